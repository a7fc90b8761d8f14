"""The heterogeneous methods' calibrated costs on a two-worker host: ALSpec predicted from a hit-rate profile
(loop hetspec), LLMCad streaming through staging buffers against a storage link, the split step's costs of
hcmp on two worker threads, the drafter's cache residency of dovetail, and the calibration records that
write them (split probe, storage probe -> loop costs and a storage link)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hwmodels.errors import HetSpecError
from hwmodels.platform import STORAGE, Device, Link, LoopCosts, MemoryDomain, Platform
from sim.acceptance import AcceptanceModel
from sim.engine import simulate
from sim.model_spec import ModelSpec
from sim.strategies import get_strategy
from sim.strategies.base import Problem, StrategyConfig
from sim.tree import TokenTree

#: The small demo target's shape, a 2-layer draft.
TARGET = ModelSpec(name="small-shape", n_layers=8, hidden=384, intermediate=1024, n_heads=6, n_kv_heads=2, vocab=4096,
                   dtype="fp32", max_position=2048)
DRAFT = ModelSpec(name="draft-shape", n_layers=2, hidden=256, intermediate=704, n_heads=4, n_kv_heads=2, vocab=4096,
                  dtype="fp32", max_position=2048)


def _device(name: str, threads: int = 1, **extra) -> Device:
    return Device(name=name, kind="cpu", peak_tflops={"fp32": 0.05 * threads}, mem_bw_gbps=20.0, mem_capacity_gb=8.0,
                  bw_efficiency=1.0, compute_efficiency=1.0, op_overhead_us=10.0, token_tile=1,
                  sparse_attn_efficiency=0.0, cores=threads, **extra)


def host(loop_costs=None, storage=None, **device_extra) -> Platform:
    devices = {"cpu": _device("cpu", 2, **device_extra), "cpu0": _device("cpu0", **device_extra),
               "cpu1": _device("cpu1", **device_extra)}
    domain = MemoryDomain(name="dram", devices=tuple(devices), bw_gbps=30.0, capacity_gb=16.0, contention_efficiency=0.8)
    links = (Link(name="cpu0-cpu1", kind="unified", src="cpu0", dst="cpu1", bw_gbps=30.0, latency_us=10.0,
                  efficiency=1.0),)
    if storage is not None:
        links += (Link(name="disk", kind="storage", src=STORAGE, dst="cpu", bw_gbps=storage[0], latency_us=storage[1],
                       efficiency=1.0),)
    loops = {n: LoopCosts(n, dict(loop_costs)) for n in ("cpu0", "cpu1")} if loop_costs else {}
    return Platform(name="host", description="synthetic two-worker host", devices=devices, links=links,
                    memory_domains=(domain,), loop_costs=loops)


# ---------------------------------------------------------------------- alspec from a hit-rate profile
def _alspec(platform, rates, window=8, context=112):
    strategy = get_strategy("alspec")
    problem = Problem(TARGET, platform, AcceptanceModel(name="hits", source="test", alspec_hit_rate_by_layer=tuple(rates)),
                      context=context)
    cfg = strategy.resolve(problem, StrategyConfig(method="alspec", device="cpu0", draft_device="cpu1",
                                                   options={"loop": "hetspec", "window": window, "sp": 1, "tp": 1}))
    return strategy, problem, cfg


def test_alspec_predicts_the_real_loop_from_per_layer_hit_rates():
    from sim.strategies.alspec_loop import loop_costs

    rates = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.9]
    strategy, problem, cfg = _alspec(host(), rates)
    c = loop_costs(problem, cfg)
    est = strategy.estimate(problem, cfg)
    # every layer: pre + approx + max(exact + check, hop + receiver's post + hop); a miss adds the sender's post
    hit_layer = c.pre_s + c.approx_s + max(c.exact_s + c.check_s, c.hop_to_s + c.post_receiver_s + c.hop_back_s)
    want = c.embed_s + 8 * hit_layer + sum(1 - r for r in rates) * c.post_s + c.final_s + c.host_s
    assert est.step_s == pytest.approx(want, rel=1e-12) and est.tokens_per_step == 1.0
    assert c.hop_to_s == pytest.approx(10e-6 + 6 * 64 * 4 / 30e9) and c.post_s > c.pre_s > 0
    # the approximation attends to 2 S keys, gathered by two copies; a window covering the cache is the exact attention
    wide = loop_costs(*_alspec(host(), rates, window=64)[1:])
    assert wide.approx_s == pytest.approx(wide.exact_s) and c.approx_s > c.exact_s - 1e-12
    # the profile's layers are what it prices: one more hit in one layer saves exactly one post-attention block
    _, _, more = _alspec(host(), rates[:-1] + [1.0])
    assert strategy.estimate(problem, cfg).step_s - strategy.estimate(problem, more).step_s == pytest.approx(0.1 * c.post_s)
    # lambda 0 (no hits) is the slowest; all hits the fastest
    none = strategy.estimate(*_alspec(host(), [0.0] * 8)[1:]).step_s
    every = strategy.estimate(*_alspec(host(), [1.0] * 8)[1:]).step_s
    assert every < est.step_s < none
    assert none - every == pytest.approx(8 * c.post_s)


def test_alspec_loop_costs_the_loop_around_the_step_and_the_engine_agrees():
    strategy, problem, cfg = _alspec(host({"ar_step": 50.0}), [0.5] * 8)
    plain = strategy.estimate(*_alspec(host(), [0.5] * 8)[1:]).step_s
    assert strategy.estimate(problem, cfg).step_s - plain == pytest.approx(50e-6)
    sim = simulate(problem, "alspec", cfg, steps=2)
    assert sim.engine_step_s == pytest.approx(sim.closed_form_step_s, rel=1e-9)


def test_alspec_prices_no_two_thread_contention():
    # the sender's exact attention and check are done before the woken receiver starts: the host's two-thread
    # share (the split probe's) is hcmp's, not priced here
    strategy, plain_p, plain_cfg = _alspec(host(), [0.5] * 8)
    _, problem, cfg = _alspec(host({"hcmp_layer": 100.0, "hcmp_merge_layer": 0.0, "hcmp_pair_layer": 250.0}), [0.5] * 8)
    assert strategy.estimate(problem, cfg).step_s == pytest.approx(strategy.estimate(plain_p, plain_cfg).step_s)


def test_alspec_loop_is_checked():
    strategy = get_strategy("alspec")
    problem = Problem(TARGET, host(), AcceptanceModel(name="h", source="t", alspec_hit_rate_by_layer=(0.5,) * 8),
                      context=112)
    with pytest.raises(HetSpecError, match="alspec loop"):
        strategy.resolve(problem, StrategyConfig(method="alspec", device="cpu0", options={"loop": "fast"}))


# ---------------------------------------------------------------------- LLMCad streaming through staging buffers
def _draft_tree(platform, budget_gb, staging=1):
    strategy = get_strategy("draft-tree")
    acc = AcceptanceModel(name="a", source="t", draft_alpha=0.7, meta={"draft_rank_accuracy": [0.7, 0.1]})
    problem = Problem(TARGET, platform, acc, context=112)
    cfg = strategy.resolve(problem, StrategyConfig(method="draft-tree").with_knobs(
        device="cpu0", draft_device="cpu0", draft_model="llama-68m", tree_width=8, draft_depth=8,
        memory_budget_gb=budget_gb, fallback="budget", staging=staging, cache_tokens=200))
    return strategy, problem, cfg


def _layer_budget_gb(keep: int) -> float:
    """A budget that keeps ``keep`` layers of the target resident (one staging layer, half a layer of slack)."""
    from sim.model_spec import get_model

    draft = get_model("llama-68m").with_dtype("fp32")
    layer = TARGET.params_per_layer * 4
    fixed = TARGET.weight_bytes() - 8 * layer
    kv = (TARGET.kv_bytes_per_token() + draft.kv_bytes_per_token()) * 200
    return (draft.weight_bytes() + kv + fixed + (keep + 1.5) * layer) / 1e9


def test_streaming_is_priced_layer_by_layer_against_the_storage_link():
    from sim.strategies.streaming_pipeline import READS_PER_LAYER

    platform = host(storage=(0.8, 30.0))
    strategy, problem, cfg = _draft_tree(platform, _layer_budget_gb(2))
    est = strategy.estimate(problem, cfg)
    b = est.breakdown
    assert (b["resident_layers"], b["streamed_layers"]) == (2, 6)
    layer = TARGET.params_per_layer * 4
    read = READS_PER_LAYER * 30e-6 + layer / 0.8e9
    assert b["load"] == pytest.approx(6 * read)
    # one buffer: the first read overlaps the tail, the draft and the resident layers; every further layer
    # waits for its own read after the previous layer's compute
    lp, (rnd,) = strategy.staged_rounds(problem, cfg, strategy.rounds(problem, cfg))
    head = rnd.tail_s + rnd.host_s + rnd.draft_s + rnd.embed_s + rnd.resident_s
    want = max(head, read) + 6 * rnd.layer_s + 5 * read
    assert est.step_s == pytest.approx(want, rel=1e-9)
    assert b["wait"] == pytest.approx(max(read - head, 0.0) + 5 * read, rel=1e-9)
    # a faster disk is faster; everything resident reads nothing
    faster = strategy.estimate(*_draft_tree(host(storage=(1.6, 30.0)), _layer_budget_gb(2))[1:])
    assert faster.step_s < est.step_s
    full = strategy.estimate(*_draft_tree(platform, 10.0)[1:])
    assert full.breakdown["load"] == 0.0 and full.breakdown["streamed_layers"] == 0.0 and full.step_s < est.step_s
    # the engine plays the same steady-state round
    sim = simulate(problem, "draft-tree", cfg, steps=2)
    assert sim.engine_step_s == pytest.approx(sim.closed_form_step_s, rel=1e-9)


def test_streaming_hand_overs_wake_the_waiting_thread():
    from sim.strategies.streaming_pipeline import pipeline_round

    # one buffer, 4 streamed layers: every layer after the first costs its read, two wake-ups and its compute
    plain = pipeline_round(3.0, 0.1, 1.0, 0.5, 0.2, 0.3, 1.0, 4, 1)
    woken = pipeline_round(3.0, 0.1, 1.0, 0.5, 0.2, 0.3, 1.0, 4, 1, wake_s=0.05)
    assert plain.time_s == pytest.approx(max(0.5 + 3.0 + 1.1, 1.0) + 4 * 0.5 + 3 * 1.0)
    assert woken.time_s - plain.time_s == pytest.approx(3 * 2 * 0.05)
    # a calibrated host's wake-up (hcmp_sync) is priced; the engine plays it too
    platform = replace(host({"hcmp_sync": 50.0}, storage=(0.8, 30.0)))
    strategy, problem, cfg = _draft_tree(platform, _layer_budget_gb(2))
    bare = strategy.estimate(*_draft_tree(host(storage=(0.8, 30.0)), _layer_budget_gb(2))[1:])
    assert strategy.estimate(problem, cfg).step_s - bare.step_s == pytest.approx(5 * 2 * 50e-6, rel=1e-6)
    sim = simulate(problem, "draft-tree", cfg, steps=2)
    assert sim.engine_step_s == pytest.approx(sim.closed_form_step_s, rel=1e-9)


def test_more_staging_buffers_preload_more():
    platform = host(storage=(0.8, 30.0))
    one = get_strategy("draft-tree").estimate(*_draft_tree(platform, _layer_budget_gb(4) + 0.01, 1)[1:])
    two = get_strategy("draft-tree").estimate(*_draft_tree(platform, _layer_budget_gb(4) + 0.01, 2)[1:])
    assert two.breakdown["streamed_layers"] == one.breakdown["streamed_layers"] + 1    # a buffer costs a layer
    assert two.breakdown["wait"] / two.breakdown["streamed_layers"] <= one.breakdown["wait"] / one.breakdown["streamed_layers"]


def test_streaming_needs_a_storage_link_and_a_sane_staging():
    with pytest.raises(HetSpecError, match="no storage link"):
        get_strategy("draft-tree").estimate(*_draft_tree(host(), _layer_budget_gb(2))[1:])
    with pytest.raises(HetSpecError, match="staging must be an integer >= 1"):
        _draft_tree(host(storage=(1.0, 10.0)), 1.0, staging=0)


# ---------------------------------------------------------------------- hcmp on two worker threads
HCMP_COSTS = {"hcmp_step": 60.0, "hcmp_sync": 40.0, "hcmp_bare_sync": 15.0, "hcmp_layer": 150.0,
              "hcmp_merge_layer": 20.0, "hcmp_pair_layer": 272.0}


def _hcmp(platform, ratios=(0.0, 0.3, 0.5, 1.0)):
    strategy = get_strategy("hcmp")
    problem = Problem(TARGET, platform, AcceptanceModel(name="a", source="t", length_table=((1, 1.0), (64, 4.0))), context=112)
    tree = TokenTree.greedy([[0.7, 0.1, 0.05], [0.6, 0.1, 0.05], [0.5, 0.1, 0.05], [0.4, 0.1, 0.05]], 16)
    cfg = strategy.resolve(problem, StrategyConfig(method="hcmp").with_knobs(
        device="cpu0", secondary="cpu1", tree=tree, tree_width=16, partition_ratio=0.5, medusa_heads=4,
        medusa_heads_impl="hetspec", attention_split="static"))
    return strategy, problem, cfg, strategy.estimate_ratios(problem, cfg, np.array(ratios))


def _with(costs: dict) -> Platform:
    return host(costs, cache_op_overhead_us=5.0)


def test_hcmp_prices_barriers_and_hand_offs_as_calibrated():
    from sim.strategies.hcmp import build_split_step

    _, problem, cfg, base = _hcmp(_with({}))
    n_syncs = build_split_step(problem, cfg).n_syncs
    # a barrier whose bare round trip is all of it costs the same at every ratio, instead of the link's 10 us
    _, _, _, synced = _hcmp(_with({"hcmp_sync": 40.0, "hcmp_bare_sync": 40.0}))
    assert synced[1:3] - base[1:3] == pytest.approx(n_syncs * (40e-6 - 10e-6))
    # beyond the bare round trip, a barrier is paid in the share of the time the sides spend in Python
    _, _, _, part = _hcmp(_with({"hcmp_sync": 40.0, "hcmp_bare_sync": 15.0}))
    assert (n_syncs * (15e-6 - 10e-6) < part[1:3] - base[1:3]).all()
    assert (part[1:3] - base[1:3] < n_syncs * (40e-6 - 10e-6)).all()
    _, _, _, handed = _hcmp(_with({"hcmp_step": 60.0}))
    assert handed[1:3] - base[1:3] == pytest.approx(60e-6)
    # the ends are the unsplit step on one worker: none of this
    _, _, _, every = _hcmp(_with(HCMP_COSTS))
    assert every[[0, 3]] == pytest.approx(base[[0, 3]])


def test_hcmp_prices_each_sides_split_layer_and_the_two_threads_python():
    from sim.strategies.hcmp import build_split_step

    _, problem, cfg, _ = _hcmp(_with({"hcmp_layer": 150.0, "hcmp_merge_layer": 20.0}))
    step = build_split_step(problem, cfg)
    layer_groups = [g for g in step.groups if g.count == 8]
    scale = 10.0 / 5.0          # op_overhead_us / cache_op_overhead_us: the small model streams from DRAM
    for side in ("primary", "secondary"):
        assert sum(getattr(g, side).fixed_s for g in layer_groups) == pytest.approx(170e-6 * scale)
        merge = next(g for g in layer_groups if g.name == "softmax_merge")
        assert getattr(merge, side).fixed_s == pytest.approx(20e-6 * scale)
    assert step.serial == 0.0
    # the split layer's costs were measured on the bare narrow forward: a resident model's loop cost
    # (cache_loop_op_overhead_us) does not rescale them
    _, problem, cfg, _ = _hcmp(host({"hcmp_layer": 150.0, "hcmp_merge_layer": 20.0}, cache_op_overhead_us=5.0,
                                    cache_loop_op_overhead_us=40.0))
    looped = [g for g in build_split_step(problem, cfg).groups if g.count == 8]
    assert sum(g.primary.fixed_s for g in looped) == pytest.approx(170e-6 * scale)
    _, problem, cfg, _ = _hcmp(_with({"hcmp_layer": 150.0, "hcmp_merge_layer": 20.0, "hcmp_pair_layer": 272.0}))
    paired = build_split_step(problem, cfg)
    assert paired.serial == pytest.approx(272.0 / 170.0 - 1.0)
    r = np.array([0.5])
    fixed = paired.arrays(r)[0][0]
    added = paired.seconds(problem.platform, r)[0] - step.seconds(problem.platform, r)[0]
    # the turns are paid, but only in the share of the time spent in Python: less than all of the fixed costs
    every = paired.serial * (fixed.min(axis=-1) * np.array([g.count for g in paired.groups])).sum()
    assert 0.0 < added < every


def _one_group_step(fixed_us: float, compute_us: float):
    from sim.strategies.hcmp import Group, Part, SplitStep

    part = Part(op="op", compute_s=compute_us * 1e-6, fixed_s=fixed_us * 1e-6, act0_bytes=0.0, bytes1=0.0, flops=0.0,
                split=False)
    return SplitStep(primary="cpu0", secondary="cpu1", groups=(Group("op", part, part, count=1, syncs=1),),
                     sync_s=80e-6, serial=2.0, bare_sync_s=20e-6)


def test_hcmp_turns_and_barriers_are_paid_in_the_share_of_time_in_python():
    platform = _with({})
    # all Python (the split probe): the turns and the whole barrier as measured
    python_only = _one_group_step(100.0, 0.0).seconds(platform, [0.5])[0]
    assert python_only == pytest.approx((100.0 + 2.0 * 100.0 + 80.0) * 1e-6)
    # 10 % of the time in Python: 10 % of the turns and of the barrier beyond its bare round trip
    mostly_kernels = _one_group_step(100.0, 900.0).seconds(platform, [0.5])[0]
    assert mostly_kernels == pytest.approx((1000.0 + 0.1 * 2.0 * 100.0 + 20.0 + 0.1 * 60.0) * 1e-6)
    # the engine plays the same prices
    from sim.strategies.hcmp_threads import python_share

    assert python_share(np.array([[1.0, 0.0]]), np.array([[4.0, 0.0]]))[0] == pytest.approx(0.125)


def test_hcmp_engine_equals_the_closed_form_with_the_calibrated_costs():
    strategy, problem, cfg, _ = _hcmp(_with(HCMP_COSTS))
    for per_layer in (False, True):
        sim = simulate(problem, "hcmp", cfg, steps=2, per_layer=per_layer) if per_layer else \
            simulate(problem, "hcmp", cfg, steps=2)
        assert sim.engine_step_s == pytest.approx(sim.closed_form_step_s, rel=1e-9)


def test_split_probe_becomes_the_workers_loop_costs():
    from real.validation.calibration.host_hetero import split_loop_costs
    from real.validation.calibration.split_probe import SplitProbe

    probe = SplitProbe(layers=(1, 5), tokens=16, context=64, hidden=64, heads=3, unsplit_s=(1e-3, 1.4e-3),
                       side_s=((0.9e-3, 1.3e-3), (0.9e-3, 1.3e-3)), pair_s=(1.5e-3, 2.3e-3), full_s=(2e-3, 3.2e-3),
                       handoff_s=25e-6, merge_s=15e-6, barrier_s=12e-6, syncs_per_layer=5, workers=("cpu0", "cpu1"))
    costs, sources = split_loop_costs(probe, "by test", "on a CPU")
    assert costs == pytest.approx({"hcmp_step": 50.0, "hcmp_sync": 20.0, "hcmp_bare_sync": 12.0, "hcmp_layer": 85.0,
                                   "hcmp_merge_layer": 15.0, "hcmp_pair_layer": 200.0})
    assert set(sources) == set(costs) and all("measured" in s for s in sources.values())
    LoopCosts("cpu0", costs, sources)                     # the sync and layer terms are loop-cost terms


def test_hcmp_costs_round_trip_through_a_platform_file(tmp_path):
    from hwmodels.loader import load_platform_file, write_platform_file

    platform = replace(_with(HCMP_COSTS), loop_costs={"cpu0": LoopCosts("cpu0", HCMP_COSTS,
                                                                       {k: "measured" for k in HCMP_COSTS})})
    write_platform_file(platform, tmp_path / "h.toml")
    assert load_platform_file(tmp_path / "h.toml").loop_costs_us("cpu0") == HCMP_COSTS


# ---------------------------------------------------------------------- the storage probe's link
def test_storage_probe_becomes_the_storage_link():
    from real.validation.calibration.host_hetero import storage_link
    from real.validation.calibration.storage_probe import StorageProbe, fit_latency_bandwidth

    sizes = (16384, 262144, 1048576, 4194304)
    cold = tuple(40e-6 + s / 1e9 for s in sizes)
    lat, bw = fit_latency_bandwidth(sizes, cold)
    assert lat == pytest.approx(40e-6) and bw == pytest.approx(1e9)
    probe = StorageProbe(folder="/x", sizes=sizes, cold_s=cold, warm_s=tuple(c / 4 for c in cold), latency_s=lat,
                         bw_bytes_per_s=bw, reads=3)
    assert probe.evicts
    link = storage_link(probe, "by test", "on a CPU")
    assert (link.kind, link.src, link.dst, link.bw_gbps, link.latency_us) == ("storage", STORAGE, "cpu", 1.0, 40.0)
    assert "posix_fadvise" in link.sources["bw_gbps"] and "evicts" in link.sources["bw_gbps"]
    slow = replace(probe, warm_s=cold)
    assert not slow.evicts and "WARNING" in storage_link(slow, "by test", "on a CPU").sources["latency_us"]


# ---------------------------------------------------------------------- dovetail: the drafter evicted by the target
def test_dovetail_drafter_is_read_from_dram_after_each_verification():
    strategy = get_strategy("dovetail")
    cached = host(cache_gb=0.2, cache_bw_gbps=100.0, cache_op_overhead_us=5.0, cache_rewarm=0.5)

    def draft_s(platform, drafter="cpu0", verifier="cpu1"):
        problem = Problem(TARGET, platform, None, context=112)
        cfg = strategy.resolve(problem, StrategyConfig(method="dovetail").with_knobs(
            device=verifier, draft_device=drafter, draft_model="llama-68m", tree_width=16, draft_depth=7, top_k=10,
            draft_dtype="fp32", tau=4.0))
        return strategy.estimate(problem, cfg).breakdown["draft"], problem, cfg

    from sim.closed_form import step_seconds
    from sim.model_spec import get_model
    from sim.strategies.dovetail import draft_passes, drafter_pass_resident

    d = get_model("llama-68m").with_dtype("fp32")
    got, problem, cfg = draft_s(cached)
    passes = draft_passes(problem, cfg, 4)
    assert [drafter_pass_resident(problem, cfg, d, j) for j in range(3)] == [False, True, True]
    cold = [float(step_seconds(d, cached, "cpu0", p.tokens, p.context, resident=False)) for p in passes]
    warm = [float(step_seconds(d, cached, "cpu0", p.tokens, p.context, resident=True)) for p in passes]
    want = cold[0] + sum(w + 0.5 * (c - w) for c, w in zip(cold[1:], warm[1:]))
    assert got == pytest.approx(want, rel=1e-9)
    # without a measured cache (every preset) nothing changes: every pass from DRAM as before
    plain, _, _ = draft_s(host())
    assert plain == pytest.approx(sum(float(step_seconds(d, host(), "cpu0", p.tokens, p.context)) for p in passes))
    sim = simulate(problem, "dovetail", cfg, steps=1)
    assert sim.engine_step_s == pytest.approx(sim.closed_form_step_s, rel=1e-9)
