"""A profiled device (sim.op_timing) through the closed form, the engine and the strategies: the vectorised
step equals the scalar priced step, the engine equals the closed form where nothing overlaps (as on a
roofline device), estimate_many equals estimate; eager mode prices the eager model's extra operators,
graph mode and the roofline do not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hwmodels.contention import standalone_bw
from hwmodels.loader import get_platform, load_platform_file
from sim.acceptance import load_acceptance
from sim.closed_form import step_seconds
from sim.engine import simulate
from sim.model_spec import get_model
from sim.op_timing import is_eager, is_profiled
from sim.step_graph import build_step_graph
from sim.step_timing import price_step
from sim.strategies import get_strategy
from sim.strategies.base import Problem, StrategyConfig
from sim.tree import TokenTree

DATA = Path(__file__).resolve().parent / "data"
VIDUR = get_platform("a100-80gb-vidur")                      # graph mode, Vidur's A100 kernel times
EAGER = load_platform_file(DATA / "h100-sxm-eager.toml")     # eager mode, launch-inclusive calls
PLATFORMS = {"vidur": VIDUR, "eager": EAGER}


def test_the_presets_are_what_they_say():
    assert is_profiled(VIDUR.device("gpu")) and not is_eager(VIDUR.device("gpu"))
    assert is_eager(EAGER.device("gpu")) and not is_profiled(VIDUR.device("cpu"))
    assert not is_profiled(get_platform("a100-80gb-pcie").device("gpu"))


@pytest.mark.parametrize("which", PLATFORMS)
@pytest.mark.parametrize("model_name", ["llama2-7b", "tinyllama-1.1b", "vicuna-13b"])
@pytest.mark.parametrize("context", [0, 1, 300, 1500])
def test_vectorised_step_equals_the_priced_step_graph(which, model_name, context):
    plat, model = PLATFORMS[which], get_model(model_name)
    rng = np.random.default_rng(1)
    for _ in range(4):
        q, b = int(rng.integers(1, 300)), int(rng.choice([1, 1, 2, 4]))
        tree = TokenTree.greedy(np.full((4, 6), 0.1), q) if q <= 1 + 6 + 36 + 216 else None
        want = price_step(build_step_graph(model, q, context, b, tree=tree), plat.device("gpu"),
                          standalone_bw(plat, "gpu")).total_s
        got = step_seconds(model, plat, "gpu", q, context, b, tree.mask_density if tree else None)
        assert float(got) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("which", PLATFORMS)
def test_vectorised_step_broadcasts_over_configurations(which):
    plat, model = PLATFORMS[which], get_model("llama2-7b")
    q = np.arange(1, 300, 7)
    for s in (256, 1024, 3000):
        many = step_seconds(model, plat, "gpu", q, s)
        one_by_one = [float(step_seconds(model, plat, "gpu", int(v), s)) for v in q]
        np.testing.assert_allclose(many, one_by_one, rtol=1e-12)
    grid = step_seconds(model, plat, "gpu", q[:, None], np.array([[256, 1024]]), np.array([1, 2])[:, None, None])
    assert grid.shape == (2, len(q), 2)
    assert float(grid[1, 3, 1]) == pytest.approx(float(step_seconds(model, plat, "gpu", int(q[3]), 1024, 2)), rel=1e-12)


CASES = [
    ("ar", None, StrategyConfig()),
    ("ar", None, StrategyConfig(device="cpu")),
    ("medusa", "ghidorah-mbpp", StrategyConfig(tree_width=16)),
    ("medusa", "medusa-log", StrategyConfig(tree_width=64)),
    ("medusa", "medusa-log", StrategyConfig(tree_width=24, options={"medusa_heads_impl": "hetspec"})),
    ("chain", "alpha:0.7", StrategyConfig(draft_depth=4)),
    ("chain", "alpha:0.7", StrategyConfig(draft_depth=3, draft_device="cpu")),   # across PCIe
]


@pytest.mark.parametrize("which", PLATFORMS)
@pytest.mark.parametrize("method,acceptance,config", CASES)
@pytest.mark.parametrize("context", [0, 200])
def test_engine_and_closed_form_agree_on_a_profiled_device(which, method, acceptance, config, context):
    problem = Problem(get_model("vicuna-7b"), PLATFORMS[which], load_acceptance(acceptance) if acceptance else None,
                      context=context)
    sim = simulate(problem, method, config, steps=3)
    assert sim.engine_step_s == pytest.approx(sim.closed_form_step_s, rel=1e-9)


@pytest.mark.parametrize("which", PLATFORMS)
@pytest.mark.parametrize("method,acceptance,config", CASES)
def test_estimate_many_equals_estimate_on_a_profiled_device(which, method, acceptance, config):
    problem = Problem(get_model("vicuna-7b"), PLATFORMS[which], load_acceptance(acceptance) if acceptance else None,
                      batch=2, context=700)
    strategy = get_strategy(method)
    configs = [strategy.resolve(problem, config)]
    if method == "medusa":
        configs += [strategy.resolve(problem, StrategyConfig(tree_width=w)) for w in (1, 2, 7, 33)]
    many = strategy.estimate_many(problem, configs)
    for i, c in enumerate(configs):
        assert many.step_s[i] == pytest.approx(strategy.estimate(problem, c).step_s, rel=1e-12)


def test_only_eager_mode_prices_the_eager_models_extra_operators():
    graph = build_step_graph(get_model("llama2-7b"), 8, 512, 1)
    assert [op.name for op in graph.eager_ops] == ["positions", "rope_gather", "mask_build", "kv_write"]
    for dev in (get_platform("a100-80gb-pcie").device("gpu"), VIDUR.device("gpu")):
        assert [p.op.name for p in price_step(graph, dev).ops] == [op.name for op in graph.ops]
    eager = price_step(graph, EAGER.device("gpu"))
    assert [p.op.name for p in eager.ops] == [op.name for op in graph.ops + graph.eager_ops]
    extra = {p.op.name: p for p in eager.ops[len(graph.ops):]}
    launch = EAGER.device("gpu").op_overhead_s
    assert extra["kv_write"].timing.overhead_s == pytest.approx(2 * launch)     # k and v copies, per layer
    assert extra["kv_write"].time_s > 32 * 2 * launch
    # an operator the eager profile does not cover pays the eager model's kernels: RMSNorm's 8, RoPE's 10
    by_name = {p.op.name: p for p in eager.ops}
    assert by_name["rope"].timing.overhead_s == pytest.approx(10 * launch)
    assert by_name["mlp_norm"].source.startswith("fallback") and by_name["mlp_norm"].timing.overhead_s == pytest.approx(8 * launch)


def test_attention_at_a_batch_the_profile_lacks_falls_back_and_says_so():
    dev = EAGER.device("gpu")
    price = {p.op.name: p for p in price_step(build_step_graph(get_model("llama2-7b"), 16, 1008, 4), dev).ops}
    assert price["attn_score"].source == "fallback: attention at batch 4 not profiled"
    assert price["attn_value"].time_s > 0      # each part priced by the roofline, as on a roofline device
