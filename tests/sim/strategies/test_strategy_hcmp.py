"""``hcmp`` (Ghidorah's hetero-core model parallelism): endpoints equal one device, the split conserves
the work, contention only slows, engine = closed form, clear errors."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hwmodels.contention import standalone_bw
from hwmodels.errors import HetSpecError, UnknownNameError
from hwmodels.loader import get_platform
from sim.acceptance_loader import load_acceptance
from sim.engine import run_plans, simulate
from sim.model_spec import get_model
from sim.optimizer import optimize
from sim.step_graph import build_step_graph
from sim.strategies import get_strategy
from sim.strategies.base import Problem, StrategyConfig
from sim.strategies.hcmp import (MERGE_FLOPS_PER_ELEMENT, attention_split, build_split_step, linear_dims,
                                 standalone_ratio)
from sim.strategies.medusa import head_ops

JETSON = get_platform("jetson-xavier-nx-204mhz")
VICUNA = get_model("vicuna-7b")
HCMP = get_strategy("hcmp")
MEDUSA = get_strategy("medusa")


def problem(platform=JETSON, context=256) -> Problem:
    return Problem(VICUNA, platform, load_acceptance("ghidorah-mbpp"), context=context)


def config(width=16, ratio=0.4, **options) -> StrategyConfig:
    return HCMP.resolve(problem(), StrategyConfig(tree_width=width, tree_shape="medusa-list", partition_ratio=ratio,
                                                  options={"medusa_heads": 5, **options}))


def with_contention(platform, efficiency: float):
    return replace(platform, memory_domains=tuple(replace(d, contention_efficiency=efficiency)
                                                  for d in platform.memory_domains))


# ---------------------------------------------------------------------- endpoints
@pytest.mark.parametrize("split", ["hcmp", "megatron"])
@pytest.mark.parametrize("ratio,device", [(1.0, "gpu"), (0.0, "cpu")])
def test_ratio_0_or_1_is_the_single_device_step_plus_nothing(split, ratio, device):
    p = problem()
    cfg = config(16, ratio, split=split)
    single = MEDUSA.resolve(p, StrategyConfig(tree_width=16, tree_shape="medusa-list", device=device,
                                              options={"medusa_heads": 5}))
    want = MEDUSA.estimate(p, single).step_s
    assert HCMP.estimate(p, cfg).step_s == pytest.approx(want, rel=1e-12)
    assert HCMP.estimate_ratios(p, cfg, np.array([ratio]))[0] == pytest.approx(want, rel=1e-12)
    plan = HCMP.plan(p, cfg)
    assert {t.resource for t in plan.tasks} == {device}                  # nothing on the other device
    assert not [t for t in plan.tasks if t.phase == "sync" or "merge" in t.name]
    assert simulate(p, "hcmp", cfg, steps=1).engine_step_s == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("impl", ["reference", "hetspec"])
def test_the_split_runs_the_heads_the_way_medusa_does(impl):
    p = problem()
    cfg = config(16, 0.5, medusa_heads_impl=impl)
    step = build_split_step(p, cfg)
    heads = [g for g in step.groups if g.name.startswith("medusa")]
    single = MEDUSA.resolve(p, StrategyConfig(tree_width=16, tree_shape="medusa-list", device="gpu",
                                              options={"medusa_heads": 5, "medusa_heads_impl": impl}))
    plan = MEDUSA.plan(p, single)
    want = sum(t.flops for t in plan.tasks if t.phase == "draft")
    assert sum(g.count * (0.5 * g.primary.flops + 0.5 * g.secondary.flops) for g in heads) == pytest.approx(want)


def test_the_loop_around_hetspec_heads_runs_on_the_primary_alone():
    # real/hetero/hcmp.py copies the accepted row in for the split heads and takes each head's top-k on the
    # primary: no share of them on the secondary, no barrier after them, the same price at every ratio
    p = problem()
    step = build_split_step(p, config(16, 0.5, medusa_heads_impl="hetspec"))
    names = ("medusa_row_select", "medusa_topk")
    at = [i for i, g in enumerate(step.groups) if g.name in names]
    assert [step.groups[i].name for i in at] == list(names)
    ends, serial, syncs = step.priced(p.platform, [0.3, 0.7])
    alone = standalone_bw(p.platform, step.primary)
    for i in at:
        g = step.groups[i]
        assert (g.count, g.syncs, g.phase, g.primary.split) == (1, 0, "draft", False)
        assert g.secondary.fixed_s == g.secondary.compute_s == g.secondary.bytes1 == g.secondary.act0_bytes == 0.0
        want = g.primary.fixed_s + max(g.primary.compute_s, g.primary.bytes1 / alone)
        assert ends[:, i] == pytest.approx([want, want], rel=1e-12) and want > 0
        assert serial[0, i] == serial[1, i] == syncs[0, i] == syncs[1, i] == 0.0
    assert not set(names) & {g.name for g in build_split_step(p, config(16, 0.5)).groups}   # Medusa's own loop
    # and the engine runs the step the closed form prices
    cfg = config(16, 0.45, medusa_heads_impl="hetspec")
    run = run_plans(p.platform, [HCMP.plan(p, cfg)], op_records=False)
    assert run.step_s[0] == pytest.approx(HCMP.estimate(p, cfg).step_s, rel=1e-9)


def test_a_split_pays_syncs_so_tiny_shares_cost_more_than_one_device():
    p = problem()
    cfg = config(16, 1.0)
    one = HCMP.estimate(p, cfg).step_s
    almost = HCMP.estimate(p, replace(cfg, partition_ratio=1.0 - 1e-9)).step_s
    step = build_split_step(p, cfg)
    assert almost > one
    assert step.n_syncs == 1 + 5 * VICUNA.n_layers + 1 + 2      # embed, 5 per layer, final norm, LM head+heads
    assert build_split_step(p, config(16, 0.5, split="megatron")).n_syncs == 4 * VICUNA.n_layers + 2


# ---------------------------------------------------------------------- conservation
def _unsplit(p, cfg):
    tree = cfg.tree
    graph = build_step_graph(p.model, tree.size, p.context, p.batch, tree=tree)
    ops = list(graph.ops) + head_ops(p.model, tree.size * p.batch, 5, graph.dtype)
    return graph, ops


@pytest.mark.parametrize("ratio", [0.13, 0.5, 0.87])
@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_column_split_conserves_flops_weights_and_kv(ratio, mode):
    p = problem()
    cfg = config(32, ratio, attention_split=mode)
    graph, ops = _unsplit(p, cfg)
    step = build_split_step(p, cfg)
    L = p.model.n_layers
    flops = wkv = act = 0.0
    for g in step.groups:
        for part, f in ((g.primary, ratio), (g.secondary, 1 - ratio)):
            share = f if part.split else 1.0
            flops += g.count * share * part.flops
            wkv += g.count * share * part.wkv_bytes
            act += g.count * (part.act0_bytes + share * (part.bytes1 - part.wkv_bytes))
    merge_elements = graph.batch * graph.tokens * p.model.n_heads * p.model.head_dim
    merge_flops = 2 * L * MERGE_FLOPS_PER_ELEMENT * merge_elements
    assert flops - merge_flops == pytest.approx(sum(op.flops * op.count for op in ops), rel=1e-12)
    assert wkv == pytest.approx(sum((op.weight_bytes + op.kv_bytes) * op.count for op in ops), rel=1e-12)
    # activations: the unsplit traffic plus each linear's input read by both devices and the merge's reads
    dt = 2.0
    dup = sum(dt * op.tokens * linear_dims(p.model, op.name)[0] * op.count for op in ops if op.kind in ("linear", "lm_head"))
    merge_bytes = sum(g.count * (g.primary.bytes1 + g.secondary.bytes1) for g in step.groups if g.name == "softmax_merge")
    assert act == pytest.approx(sum(op.act_bytes * op.count for op in ops) + dup + merge_bytes, rel=1e-12)


def test_plan_carries_the_same_work_as_the_groups():
    p = problem()
    cfg = config(16, 0.37)
    plan = HCMP.plan(p, cfg)
    step = build_split_step(p, cfg)
    want = sum(g.count * (0.37 * g.primary.flops * (1 if g.primary.split else 1 / 0.37)
                          + 0.63 * g.secondary.flops * (1 if g.secondary.split else 1 / 0.63)) for g in step.groups)
    assert sum(t.flops for t in plan.tasks) == pytest.approx(want, rel=1e-12)
    assert sum(1 for t in plan.tasks if t.phase == "sync") == sum(1 for g in step.groups if g.syncs)


# ---------------------------------------------------------------------- contention
@pytest.mark.parametrize("width", [4, 16, 64])
def test_contention_never_makes_a_step_faster(width):
    ratios = np.linspace(0.05, 0.95, 19)
    free = problem(with_contention(JETSON, 100.0))
    tight = problem(with_contention(JETSON, 0.15))
    base = problem()
    cfg = HCMP.resolve(base, StrategyConfig(tree_width=width, tree_shape="medusa-list", options={"medusa_heads": 5}))
    t_free = HCMP.estimate_ratios(free, cfg, ratios)
    t_base = HCMP.estimate_ratios(base, cfg, ratios)
    t_tight = HCMP.estimate_ratios(tight, cfg, ratios)
    assert np.all(t_base >= t_free * (1 - 1e-12))
    assert np.all(t_tight >= t_base * (1 - 1e-12))
    assert np.any(t_tight > t_free * 1.05)            # a binding ceiling does slow the memory-bound split


def test_dynamic_attention_split_is_never_slower_than_static_and_helps_at_long_context():
    for context in (16, 256, 2048):
        p = problem(context=context)
        cfg = config(64, 0.5)
        graph = build_step_graph(p.model, 64, context, 1, tree=cfg.tree)
        dyn = attention_split(p, graph, "gpu", "cpu", "dynamic")
        st = attention_split(p, graph, "gpu", "cpu", "static")
        assert st.dense_moved == st.sparse_moved == 0.0
        assert dyn.seconds <= st.seconds * (1 + 1e-12)
    assert dyn.seconds < 0.9 * st.seconds and dyn.dense_moved > 0.0   # at 2048 dense work moves to the CPU


# ---------------------------------------------------------------------- engine vs closed form
@pytest.mark.parametrize("split,per_layer", [("hcmp", False), ("hcmp", True), ("megatron", False)])
@pytest.mark.parametrize("ratio", [0.2, 0.65])
def test_engine_equals_closed_form(split, per_layer, ratio):
    # each group's two parts start together and end in a barrier, and the closed form prices them with the
    # engine's own fluid contention rule, so the two agree to round-off (difference reported by simulate)
    p = problem(with_contention(JETSON, 0.3))          # make contention bind so the comparison means something
    cfg = HCMP.resolve(p, StrategyConfig(tree_width=8, tree_shape="medusa-list", partition_ratio=ratio,
                                         options={"medusa_heads": 5, "split": split}))
    run = run_plans(p.platform, [HCMP.plan(p, cfg, per_layer=per_layer)], op_records=False)
    assert run.step_s[0] == pytest.approx(HCMP.estimate(p, cfg).step_s, rel=1e-9)


# ---------------------------------------------------------------------- ratios and the optimizer
def test_edgenn_ratio_is_the_standalone_speed_share():
    p = problem()
    cfg = config(16, 0.5, split="megatron")
    t_gpu = HCMP.estimate(p, replace(cfg, partition_ratio=1.0)).step_s
    t_cpu = HCMP.estimate(p, replace(cfg, partition_ratio=0.0)).step_s
    assert standalone_ratio(p, cfg) == pytest.approx(t_cpu / (t_gpu + t_cpu))


def test_optimizer_splits_and_beats_both_devices_alone():
    p = problem()
    res = optimize(p, "hcmp", space={"tree_width": 16, "tree_shape": "medusa-list", "medusa_heads": 5})
    r = float(res.best["partition_ratio"])
    assert 0.0 < r < 1.0
    cfg = config(16, r)
    assert res.best["step_s"] < min(HCMP.estimate(p, replace(cfg, partition_ratio=x)).step_s for x in (0.0, 1.0))


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("cfg,error,message", [
    (StrategyConfig(tree_width=16, partition_ratio=1.5), HetSpecError, r"partition ratio must be in \[0, 1\] \(got 1.5\)"),
    (StrategyConfig(tree_width=16, options={"split": "ring"}), UnknownNameError, "unknown hcmp split 'ring'"),
    (StrategyConfig(tree_width=16, options={"attention_split": "random"}), UnknownNameError, "hcmp attention split"),
    (StrategyConfig(tree_width=16, options={"secondary": "gpu"}), HetSpecError, "two different devices"),
    (StrategyConfig(tree_width=16, options={"secondary": "npu"}), UnknownNameError, "'npu'"),
    (StrategyConfig(tree_width=128), HetSpecError, "width 128 is outside"),
])
def test_bad_configs_are_one_line(cfg, error, message):
    with pytest.raises(error, match=message) as info:
        HCMP.resolve(problem(), cfg)
    assert "\n" not in str(info.value)


def test_discrete_gpu_platform_is_refused_in_one_line():
    p = Problem(VICUNA.with_dtype("fp16"), get_platform("xeon4310-rtx3090"), load_acceptance("ghidorah-mbpp"))
    with pytest.raises(HetSpecError, match="one memory domain with a unified link") as info:
        HCMP.resolve(p, StrategyConfig(tree_width=8, device="gpu", options={"secondary": "cpu"}))
    assert "\n" not in str(info.value)
