"""The batched GEMM of HetSpec's Medusa heads (one ``torch.matmul`` over stacked weights): its own
streamed curves on a calibrated device, the operators that carry it, and the calibration that measures it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hwmodels.errors import HetSpecError, PresetError
from hwmodels.loader import load_platform_file, write_platform_file
from hwmodels.platform import Device, Link, MemoryDomain, Platform
from hwmodels.roofline import roofline_time
from sim.acceptance import AcceptanceModel
from sim.model_spec import ModelSpec
from sim.strategies import get_strategy
from sim.strategies.base import Problem, StrategyConfig
from sim.strategies.hcmp import build_split_step
from sim.strategies.medusa import head_ops, heads_seconds, heads_step_ops

MODEL = ModelSpec(name="m", n_layers=4, hidden=384, intermediate=1024, n_heads=6, n_kv_heads=2, vocab=4096,
                  dtype="fp32")
LINEAR_ROWS = ((1, 100.0), (4, 20.0))
BATCHED_ROWS = ((1, 35.0), (4, 0.0))
BATCHED_EFF = ((1, 0.4), (4, 0.6))


def _device(name: str = "cpu", batched: bool = True) -> Device:
    extra = dict(batched_gemm_efficiency_curve=BATCHED_EFF, batched_gemm_row_ns_curve=BATCHED_ROWS) if batched else {}
    return Device(name=name, kind="cpu", peak_tflops={"fp32": 0.05}, mem_bw_gbps=30.0, mem_capacity_gb=16.0,
                  bw_efficiency=1.0, compute_efficiency=1.0, op_overhead_us=10.0, token_tile=1,
                  sparse_attn_efficiency=0.0, gemm_efficiency_curve=((1, 0.2), (4, 0.5)),
                  gemm_row_ns_curve=LINEAR_ROWS, **extra)


def _platform(batched: bool = True) -> Platform:
    devs = {n: _device(n, batched) for n in ("cpu", "cpu0", "cpu1")}
    dom = MemoryDomain(name="dram", devices=tuple(devs), bw_gbps=30.0, capacity_gb=16.0, contention_efficiency=0.8)
    link = Link(name="cpu0-cpu1", kind="unified", src="cpu0", dst="cpu1", bw_gbps=30.0, latency_us=10.0,
                efficiency=1.0)
    return Platform(name="t", description="", devices=devs, memory_domains=(dom,), links=(link,))


def _by_hand(op, dev: Device, eff_curve, row_curve) -> float:
    """One streamed GEMM priced from the named curves (M = 1)."""
    eff, row_ns = dict(eff_curve)[1], dict(row_curve)[1]
    compute = op.flops / (dev.peak_flops_per_s("fp32") * eff) + op.weight_rows * row_ns * 1e-9
    return dev.op_overhead_s + max(compute, op.bytes / dev.mem_bw_bytes_per_s)


def test_batched_head_gemms_are_priced_with_the_batched_curves():
    dev = _device()
    ops = head_ops(MODEL, 1, 4, batched=True)
    linears = [op for op in ops if op.table == "linear"]
    assert [op.batched for op in ops] == [True, False, True]
    for op in linears:
        got = roofline_time(dev, op.flops, op.bytes, "fp32", tokens=1, rows=op.weight_rows, batched=True).time_s
        assert got == pytest.approx(_by_hand(op, dev, BATCHED_EFF, BATCHED_ROWS), rel=1e-12)
        # the same GEMM as one linear layer pays F.linear's curves
        plain = roofline_time(dev, op.flops, op.bytes, "fp32", tokens=1, rows=op.weight_rows).time_s
        assert plain == pytest.approx(_by_hand(op, dev, dev.gemm_efficiency_curve, LINEAR_ROWS), rel=1e-12)
        assert plain > got
    # the whole heads' price (what the medusa strategy adds per step) follows: the three kernels of the
    # ResBlock's bias add, SiLU and residual add, and the loop's row select and top-k around the heads
    problem = Problem(model=MODEL, platform=_platform())
    want = sum(_by_hand(op, dev, BATCHED_EFF, BATCHED_ROWS) for op in linears)
    other = roofline_time(dev, ops[1].flops, ops[1].bytes, "fp32", launches=3).time_s
    select = roofline_time(dev, 0.0, 4 * MODEL.hidden * 2, "fp32").time_s
    topk = roofline_time(dev, 0.0, 4 * 4 * MODEL.vocab, "fp32").time_s
    assert heads_seconds(problem, "cpu", 1, 4, batched=True) == pytest.approx(want + other + select + topk, rel=1e-12)


def test_without_batched_curves_a_batched_gemm_prices_as_a_linear_and_in_the_cache_as_resident():
    bare = _device(batched=False)
    op = head_ops(MODEL, 1, 4, batched=True)[2]
    args = (op.flops, op.bytes, "fp32")
    assert roofline_time(bare, *args, tokens=1, rows=op.weight_rows, batched=True) == \
        roofline_time(bare, *args, tokens=1, rows=op.weight_rows)
    cached = replace(_device(), cache_gb=1.0, cache_bw_gbps=100.0, cache_gemm_efficiency_curve=((1, 0.9),))
    assert roofline_time(cached, *args, tokens=1, rows=op.weight_rows, resident=True, batched=True) == \
        roofline_time(cached, *args, tokens=1, rows=op.weight_rows, resident=True)


def test_the_batched_heads_price_every_kernel_the_real_proposal_launches():
    """HetSpec's Medusa loop picks the accepted row, runs the heads (two batched GEMMs, the bias add, the SiLU,
    the residual add) and takes each head's top-k: the operators priced launch as many kernels."""
    import torch

    from real.decode.medusa import head_proposals
    from real.model.medusa_heads import MedusaHeads

    heads = MedusaHeads(ModelSpec(name="t", n_layers=1, hidden=16, intermediate=32, n_heads=2, n_kv_heads=1,
                                  vocab=64, dtype="fp32"), 3)
    hidden = torch.randn(5, 16)
    with torch.inference_mode(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        head_proposals(heads, hidden.index_select(0, torch.tensor([2]))[0], 4, 3)
    kernels = [e for e in prof.events() if e.cpu_parent is None and e.name in
               ("aten::index_select", "aten::matmul", "aten::add", "aten::silu", "aten::topk")]
    assert sum(op.launches for op in heads_step_ops(MODEL, 1, 3, batched=True)) == len(kernels) == 7
    assert [op.name for op in heads_step_ops(MODEL, 5, 3)] == [op.name for op in head_ops(MODEL, 5, 3)]


def test_reference_heads_are_unbatched_linears():
    assert not any(op.batched for op in head_ops(MODEL, 5, 4))
    problem = Problem(model=MODEL, platform=_platform())
    assert heads_seconds(problem, "cpu", 5, 4) == heads_seconds(Problem(model=MODEL, platform=_platform(False)),
                                                               "cpu", 5, 4)


def test_medusa_closed_form_plan_and_split_step_price_the_batched_heads_alike():
    acc = AcceptanceModel(name="a", source="test", draft_alpha=0.6, medusa_accuracy=((0.6, 0.1), (0.5, 0.1)))
    medusa = get_strategy("medusa")
    steps = {}
    for batched in (True, False):
        problem = Problem(model=MODEL, platform=_platform(batched), acceptance=acc, context=64)
        config = medusa.resolve(problem, StrategyConfig(method="medusa").with_knobs(
            device="cpu", tree_width=6, medusa_heads_impl="hetspec"))
        est = medusa.estimate(problem, config)
        assert medusa.estimate_many(problem, [config]).step_s[0] == pytest.approx(est.step_s, rel=1e-9)
        assert medusa.plan(problem, config).serial_s(problem.platform) == pytest.approx(est.step_s, rel=1e-9)
        assert est.breakdown["heads"] == pytest.approx(heads_seconds(problem, "cpu", 1, config.tree.depth,
                                                                     batched=True), rel=1e-12)
        steps[batched] = est.step_s
        # hcmp's split step prices each side's share of the heads' GEMMs the same way
        hcmp = get_strategy("hcmp")
        split_cfg = hcmp.resolve(problem, StrategyConfig(method="hcmp").with_knobs(
            device="cpu0", tree_width=6, partition_ratio=0.5, secondary="cpu1", medusa_heads_impl="hetspec"))
        head = next(g for g in build_split_step(problem, split_cfg).groups if g.name == "medusa_head")
        op = next(o for o in head_ops(MODEL, 1, split_cfg.tree.depth, batched=True) if o.name == "medusa_head")
        want = roofline_time(problem.platform.device("cpu0"), op.flops, op.bytes, "fp32", tokens=1,
                             rows=op.weight_rows, batched=True,
                             bw_bytes_per_s=problem.platform.device("cpu0").mem_bw_bytes_per_s * 0.8)
        assert head.primary.compute_s == pytest.approx(want.compute_s, rel=1e-12)
    assert steps[True] < steps[False]


def test_batched_curves_round_trip_through_the_platform_file(tmp_path):
    plat = _platform()
    keys = ("peak_tflops.fp32", "mem_bw_gbps", "mem_capacity_gb", "bw_efficiency", "compute_efficiency",
            "op_overhead_us", "token_tile", "sparse_attn_efficiency", "gemm_efficiency_curve", "gemm_row_ns_curve",
            "batched_gemm_efficiency_curve", "batched_gemm_row_ns_curve")
    plat = replace(plat, devices={n: replace(d, sources={k: "test" for k in keys}) for n, d in plat.devices.items()})
    back = load_platform_file(write_platform_file(plat, tmp_path / "p.toml")).device("cpu")
    assert back.batched_gemm_efficiency_curve == BATCHED_EFF and back.batched_gemm_row_ns_curve == BATCHED_ROWS
    bad = (tmp_path / "p.toml").read_text().replace("35.0", "-2.0", 1)
    (tmp_path / "bad.toml").write_text(bad)
    with pytest.raises(PresetError, match="batched_gemm_row_ns_curve: needs tokens >= 1 and costs >= 0"):
        load_platform_file(tmp_path / "bad.toml")


def test_the_probe_times_one_batched_matmul_over_stacked_heads():
    from real.validation.calibration.microbench import gemm_rates

    points = gemm_rates((1, 2), ((32, 64),), threads=1, repeats=1, warmup=0, heads=4)
    assert [(p.m, p.k, p.n) for p in points] == [(1, 32, 64), (2, 32, 64)]
    assert all(p.flops_per_s == pytest.approx(2.0 * p.m * 32 * 64 / p.seconds) for p in points)
    with pytest.raises(HetSpecError, match="64 output rows do not split into 3 heads"):
        gemm_rates((1,), ((32, 64),), threads=1, repeats=1, warmup=0, heads=3)


def test_the_host_platform_carries_the_batched_fit():
    from real.validation.calibration.gemm_rows import fit_rows
    from real.validation.calibration.host_facts import QUICK, WorkerMeasurement
    from real.validation.calibration.host_platform import _with_batched
    from real.validation.calibration.microbench import GemmPoint

    shapes = ((256, 16384), (512, 16384))
    points = [GemmPoint(m, k, n, 2.0 * m * k * n / rate + n * row_s, 0.0)
              for m, rate, row_s in ((1, 16e9, 35e-9), (4, 40e9, 10e-9)) for k, n in shapes]
    fits = fit_rows(points)
    w = WorkerMeasurement(threads=1, gemm_warm=(), gemm_cold=(), peak_flops_per_s=80e9, efficiency_curve=(),
                          cache_efficiency_curve=(), dram_bw_bytes_per_s=30e9, cache_bw_bytes_per_s=100e9,
                          cache_bytes=0, cache_curve=(), dispatch_s=0.0, overhead=None, gemm_batched=tuple(points),
                          batched_fits=fits, batched_efficiency_curve=((1, 0.2), (4, 0.5)))
    sources: dict = {}
    dev = _with_batched(_device(batched=False), w, QUICK, sources, "1 thread", "by test", "on test")
    assert dev.batched_gemm_efficiency_curve == ((1, 0.2), (4, 0.5))
    assert dev.batched_gemm_row_ns_curve == ((1, 35.0), (4, 10.0), (16, 0.0))
    assert "torch.matmul" in sources["batched_gemm_efficiency_curve"]
    assert "35 ns per weight row" in sources["batched_gemm_row_ns_curve"]
