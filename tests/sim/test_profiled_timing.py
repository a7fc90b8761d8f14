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
from sim.acceptance_loader import load_acceptance
from sim.closed_form import step_seconds
from sim.engine import simulate
from sim.model_spec import get_model
from sim.op_timing import is_eager, is_profiled
from sim.step_graph import build_step_graph
from sim.step_timing import price_step
from sim.strategies import get_strategy
from sim.strategies.base import Problem, StrategyConfig
from sim.tree import TokenTree
from paths import DATA

DATA = DATA
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
    assert [op.name for op in graph.eager_ops] == ["positions", "rope_gather", "mask_build", "kv_write", "forward_rest"]
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


def _with_forward_rest(device, rows):
    """``device`` with its profile's rows plus ``rows`` (op, shape, tokens, keys, kernel, eager, graph)."""
    import csv
    import tempfile
    from dataclasses import replace

    from hwmodels.profile import read_profile, write_profile

    old = device.timing.profile
    with open(old.path) as f:
        body = [r for r in csv.reader(line for line in f if not line.startswith("#"))][1:]
    kept = [(r[0], r[1], int(r[2]), int(r[3]), float(r[4]), float("nan") if r[5] == "-" else float(r[5]),
             float("nan") if r[6] == "-" else float(r[6])) for r in body]
    path = Path(tempfile.mkdtemp()) / "with-rest.csv"
    write_profile(path, {"dtype": old.dtype, "source": "test", "launch_us.eager": str(old.launch_us["eager"]),
                         "launch_us.eager.source": "test"},
                  kept + rows)
    return replace(device, timing=replace(device.timing, profile=read_profile(path)))


def test_the_forward_rest_of_a_profiled_model_is_priced_in_eager_mode_only():
    from dataclasses import replace

    from sim.step_graph import forward_key

    model = get_model("llama2-7b")
    key = forward_key(model)
    assert key == "L32H4096I11008h32kv32d128V32000"
    rows = [("forward_rest", key, 1, 0, 0.0, 500.0, 0.0), ("forward_rest", key, 8, 0, 0.0, 900.0, 0.0)]
    eager = _with_forward_rest(EAGER.device("gpu"), rows)

    def rest(device, q, b=1, m=model):
        priced = {p.op.name: p for p in price_step(build_step_graph(m, q, 512, b), device).ops}
        return priced.get("forward_rest")

    # measured rows exactly, piecewise linear between them, the whole call's time (no launch on top)
    assert rest(eager, 1).time_s == pytest.approx(500e-6) and rest(eager, 1).source == "profile"
    assert rest(eager, 8).time_s == pytest.approx(900e-6)
    assert rest(eager, 4).time_s == pytest.approx((500 + 3 / 7 * 400) * 1e-6)
    # a forward of b sequences of q tokens looks the rest up at b*q tokens, as the linears
    assert rest(eager, 4, b=2).time_s == pytest.approx(900e-6)
    # outside the rows: the nearest row; a model without rows: the profiled model's rest per layer times its
    # layers; never zero while the profile measured a rest, and the source says which
    beyond = rest(eager, 9)
    assert beyond.time_s == pytest.approx(900e-6) and "9 tokens outside the profiled 1..8" in beyond.source
    other = rest(eager, 1, m=get_model("vicuna-13b"))
    assert other.time_s == pytest.approx(500e-6 * 40 / 32)
    assert other.source.startswith("fallback: forward_rest L40H5120") and key in other.source
    # a profile without any forward_rest row measured none: 0, and it says so
    bare = rest(EAGER.device("gpu"), 1)
    assert bare.time_s == 0.0 and "no forward_rest rows" in bare.source
    plat_rest = replace(EAGER, devices={**EAGER.devices, "gpu": eager})
    for m, q in ((get_model("vicuna-13b"), 3), (model, 12)):    # the closed form prices the fallback alike
        want = price_step(build_step_graph(m, q, 512), eager, standalone_bw(plat_rest, "gpu")).total_s
        assert float(step_seconds(m, plat_rest, "gpu", q, 512)) == pytest.approx(want, rel=1e-9)
    # the vectorised closed form adds the same
    base = step_seconds(model, EAGER, "gpu", np.arange(1, 9), 512)
    plat = replace(EAGER, devices={**EAGER.devices, "gpu": eager})
    np.testing.assert_allclose(step_seconds(model, plat, "gpu", np.arange(1, 9), 512) - base,
                               np.interp(np.arange(1, 9), [1, 8], [500e-6, 900e-6]), rtol=1e-9, atol=1e-12)
    # graph mode does not price it: a replayed graph runs no Python
    graph_dev = replace(eager, timing=replace(eager.timing, mode="graph"))
    assert rest(graph_dev, 4) is None


def test_attention_at_a_batch_the_profile_lacks_falls_back_and_says_so():
    dev = EAGER.device("gpu")
    price = {p.op.name: p for p in price_step(build_step_graph(get_model("llama2-7b"), 16, 1008, 4), dev).ops}
    assert price["attn_score"].source == "fallback: attention at batch 4 not profiled"
    assert price["attn_value"].time_s > 0      # each part priced by the roofline, as on a roofline device


def test_a_calibrated_roofline_prices_a_forward_its_profile_lacks_wholly():
    """A calibrated host device timed by a profile (calibrated_roofline): a model the profile did not profile,
    or another dtype, is priced exactly as the roofline prices it, every operator saying so, in the scalar
    step, the closed form and the engine's tasks alike; a profiled model keeps its rows, and an operator the
    profile lacks pays the step graph's launches, not the eager kernels."""
    from dataclasses import replace

    from sim.plan import graph_tasks
    from sim.step_graph import forward_key
    from sim.step_timing import fallback_note

    model = get_model("llama2-7b")
    key = forward_key(model)
    eager = _with_forward_rest(EAGER.device("gpu"), [("forward_rest", key, 1, 0, 0.0, 500.0, 0.0),
                                                     ("forward_rest", key, 8, 0, 0.0, 900.0, 0.0)])
    calibrated = replace(eager, timing=replace(eager.timing, calibrated_roofline=True))
    roofline = replace(eager, timing=None)
    plat = replace(EAGER, devices={**EAGER.devices, "gpu": calibrated})
    bf16 = replace(model, dtype="bf16") if model.dtype != "bf16" else replace(model, dtype="fp32")
    for other in (get_model("vicuna-13b"), bf16):
        graph = build_step_graph(other, 4, 512)
        bw = standalone_bw(plat, "gpu")
        price = price_step(graph, calibrated, bw)
        assert price.total_s == pytest.approx(price_step(graph, roofline, bw).total_s, rel=1e-12)
        assert all(p.source.startswith("fallback: ") and "the whole forward by the calibrated roofline" in p.source
                   for p in price.ops)
        assert float(step_seconds(other, plat, "gpu", 4, 512)) == pytest.approx(price.total_s, rel=1e-9)
        tasks = graph_tasks(graph, plat, "gpu", "t", "verify")
        assert tasks == graph_tasks(graph, plat.with_device(roofline), "gpu", "t", "verify")
        assert len(tasks) == len(graph.ops)                   # the roofline's operators: no eager extras
        assert fallback_note(price, other.name) is not None
    # the per-operator fallback of a profile's own roofline differs: eager kernels, the scaled rest
    other = build_step_graph(get_model("vicuna-13b"), 4, 512)
    assert price_step(other, eager).total_s != pytest.approx(price_step(other, roofline).total_s, rel=1e-6)
    # a profiled forward keeps its rows; an operator the profile lacks pays the step graph's launches
    own = {p.op.name: p for p in price_step(build_step_graph(model, 8, 512), calibrated).ops}
    assert own["forward_rest"].source == "profile" and own["forward_rest"].time_s == pytest.approx(900e-6)
    assert own["mlp_norm"].source.startswith("fallback")
    assert own["mlp_norm"].timing.overhead_s == pytest.approx(own["mlp_norm"].op.launches * eager.op_overhead_s)
