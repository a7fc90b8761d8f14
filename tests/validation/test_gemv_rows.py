"""Streamed linears' row start-up (``gemm_row_ns_curve``) and the weight cache a model really gets: the
calibration's fits and how every pricing path applies them."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from hwmodels.errors import PresetError
from hwmodels.loader import load_platform_file, write_platform_file
from hwmodels.platform import Device, MemoryDomain, Platform
from hwmodels.roofline import roofline_time
from real.validation.calibration.host_facts import effective_cache
from real.validation.calibration.gemm_rows import fit_rows, row_curve, row_free
from real.validation.calibration.microbench import GemmPoint
from real.validation.calibration.stream_step_probe import StreamingProbe
from sim.closed_form import roofline_arrays, step_seconds
from sim.engine import run_plans
from sim.model_spec import ModelSpec
from sim.plan import StepPlan, graph_tasks
from sim.step_graph import build_step_graph
from sim.step_timing import price_step

ROW_NS = 150.0
ROW_CURVE = ((1, ROW_NS), (2, 0.0), (8, 20.0), (64, 0.0))
MODEL = ModelSpec(name="m", n_layers=4, hidden=384, intermediate=1024, n_heads=6, n_kv_heads=2, vocab=4096,
                  dtype="fp32")


def _cpu(curve, cache_gb: float | None = None) -> Platform:
    dev = Device(name="cpu", kind="cpu", peak_tflops={"fp32": 0.1}, mem_bw_gbps=20.0, mem_capacity_gb=16.0,
                 bw_efficiency=1.0, compute_efficiency=1.0, op_overhead_us=5.0, token_tile=1,
                 sparse_attn_efficiency=0.0, gemm_efficiency_curve=((1, 0.05), (16, 0.5)), gemm_row_ns_curve=curve,
                 cache_gb=cache_gb, cache_bw_gbps=None if cache_gb is None else 80.0)
    dom = MemoryDomain(name="dram", devices=("cpu",), bw_gbps=20.0, capacity_gb=16.0, contention_efficiency=1.0)
    return Platform(name="t", description="", devices={"cpu": dev}, memory_domains=(dom,))


def _linear_rows(model: ModelSpec) -> int:
    return sum(op.weight_rows * op.count for op in build_step_graph(model, 1, 64).ops)


@pytest.mark.parametrize("q, per_row", [(1, ROW_NS), (2, 0.0), (3, 0.0), (8, 20.0), (40, 20.0), (64, 0.0)])
def test_a_step_pays_every_weight_row_at_its_token_count(q, per_row):
    with_rows, without = _cpu(ROW_CURVE), _cpu(None)
    rows = _linear_rows(MODEL)
    assert rows == 4 * (384 + 128 + 128 + 384 + 1024 + 1024 + 384) + 4096
    diff = float(step_seconds(MODEL, with_rows, "cpu", q, 64)) - float(step_seconds(MODEL, without, "cpu", q, 64))
    assert diff == pytest.approx(rows * per_row * 1e-9, rel=1e-9, abs=1e-15)


def test_resident_weights_pay_no_row_cost():
    cached, plain = _cpu(ROW_CURVE, cache_gb=1.0), _cpu(None, cache_gb=1.0)
    assert float(step_seconds(MODEL, cached, "cpu", 1, 64)) == float(step_seconds(MODEL, plain, "cpu", 1, 64))


def test_row_cost_is_compute_time_in_the_scalar_and_array_roofline():
    dev = _cpu(ROW_CURVE).device("cpu")
    flops, nbytes = 2.0 * 384 * 1024, 4.0 * 384 * 1024
    t = roofline_time(dev, flops, nbytes, "fp32", tokens=1, rows=1024)
    bare = roofline_time(replace(dev, gemm_row_ns_curve=None), flops, nbytes, "fp32", tokens=1, rows=1024)
    assert t.compute_s - bare.compute_s == pytest.approx(1024 * ROW_NS * 1e-9, rel=1e-12)
    for tokens in (1, 2, 9):
        want = roofline_time(dev, flops * tokens, nbytes, "fp32", tokens=tokens, rows=1024).time_s
        arr = roofline_arrays(dev, "fp32", np.array([flops * tokens]), np.array([nbytes]), np.array([float(tokens)]),
                              rows=np.array([1024.0]))
        assert float(arr["time_s"][0]) == pytest.approx(want, rel=1e-12)
    assert roofline_time(dev, flops, nbytes, "fp32", tokens=None, rows=1024).compute_s == pytest.approx(
        roofline_time(dev, flops, nbytes, "fp32", tokens=None).compute_s)


@pytest.mark.parametrize("q", [1, 8])
def test_closed_form_step_price_and_engine_agree_with_row_costs(q):
    platform = _cpu(ROW_CURVE)
    graph = build_step_graph(MODEL, q, 64)
    closed = float(step_seconds(MODEL, platform, "cpu", q, 64))
    assert price_step(graph, platform.device("cpu")).total_s == pytest.approx(closed, rel=1e-9)
    run = run_plans(platform, [StepPlan(tasks=tuple(graph_tasks(graph, platform, "cpu", "v", "verify")),
                                        tokens_accepted=1.0)])
    assert float(np.asarray(run.step_s)[0]) == pytest.approx(closed, rel=1e-6)


def test_row_cost_round_trips_through_the_platform_file(tmp_path):
    plat = _cpu(ROW_CURVE)
    dev = plat.device("cpu")
    src = {k: "test" for k in ("peak_tflops.fp32", "mem_bw_gbps", "mem_capacity_gb", "bw_efficiency",
                               "compute_efficiency", "op_overhead_us", "token_tile", "sparse_attn_efficiency",
                               "gemm_efficiency_curve", "gemm_row_ns_curve")}
    plat = replace(plat, devices={"cpu": replace(dev, sources=src)})
    back = load_platform_file(write_platform_file(plat, tmp_path / "p.toml"))
    assert back.device("cpu").gemm_row_ns_curve == ROW_CURVE
    bad = (tmp_path / "p.toml").read_text().replace("150.0", "-1.0")
    (tmp_path / "bad.toml").write_text(bad)
    with pytest.raises(PresetError, match="gemm_row_ns_curve: needs tokens >= 1 and costs >= 0"):
        load_platform_file(tmp_path / "bad.toml")


def _points(m: int, rate: float, row_s: float, shapes) -> list[GemmPoint]:
    return [GemmPoint(m, k, n, 2.0 * m * k * n / rate + n * row_s, 0.0) for k, n in shapes]


def test_the_row_fit_recovers_a_known_rate_and_row_cost_per_token_count():
    shapes = ((384, 1536), (1536, 384), (512, 512), (2048, 2048))
    # M = 8: rows that cost less than nothing (noise) are no fit; its median rate stands
    fits = fit_rows(_points(1, 9e9, 140e-9, shapes) + _points(4, 20e9, 60e-9, shapes)
                    + _points(8, 30e9, -50e-9, shapes))
    assert [f.m for f in fits] == [1, 4]
    assert fits[0].flops_per_s == pytest.approx(9e9, rel=1e-6) and fits[0].row_s == pytest.approx(140e-9, rel=1e-6)
    assert fits[1].flops_per_s == pytest.approx(20e9, rel=1e-6) and fits[1].row_s == pytest.approx(60e-9, rel=1e-6)
    assert fits[0].shapes == 4 and fits[0].max_residual < 1e-6
    # the streamed curve becomes the row-free rate where a start-up was fitted; the others stay
    assert row_free(((1, 0.05), (4, 0.1), (8, 0.3)), fits, 100e9) == ((1, 0.09), (4, 0.2), (8, 0.3))
    assert row_curve(fits, (1, 4, 8)) == ((1, 140.0), (4, 60.0), (8, 0.0))


def test_the_row_fit_needs_two_row_lengths():
    assert fit_rows(_points(1, 9e9, 140e-9, ((512, 512), (512, 2048)))) == ()


def _probe(curve) -> StreamingProbe:
    return StreamingProbe(spec=None, unmasked_s=1.0, masked_s=1.0, context=64, weight_curve=curve)


def _knee(above, below, cut):
    """Where the line through two (bytes, bytes/s) points, in log-log, falls to ``cut`` bytes/s."""
    return above[0] * (below[0] / above[0]) ** (math.log(above[1] / cut) / math.log(above[1] / below[1]))


def test_the_weight_cache_ends_where_the_curve_falls_through_the_midpoint():
    curve = ((1_000_000, 30e9), (3_000_000, 31e9), (6_700_000, 27e9), (8_900_000, 11e9), (12_000_000, 7e9))
    # geometric midpoint of 31 and 7 GB/s: 14.7 GB/s, crossed between the 6.7 and the 8.9 MB sets
    size, rate = _probe(curve).weight_cache
    assert size == pytest.approx(_knee(curve[2], curve[3], math.sqrt(31e9 * 7e9)), abs=1) and 6.7e6 < size < 8.9e6
    assert rate == 27e9                     # the rate of the largest probed set within it
    # a set read slower than the midpoint before a faster, larger one: the crossing after the larger one counts
    # (the slow end is now the median of the two largest sets, 9 GB/s)
    size, _ = _probe(curve[:2] + ((5_000_000, 12e9),) + curve[2:]).weight_cache
    assert size == pytest.approx(_knee(curve[2], curve[3], math.sqrt(31e9 * 9e9)), abs=1)
    assert _probe(()).weight_cache is None


def test_a_stream_triad_knee_between_probed_sets_rounds_to_neither():
    # measured (hetspec calibrate, 2 threads, GB/s): the 4 MiB set read 40 GB/s in one calibration and 88 in another;
    # taking the largest probed set above the midpoint made the cache 2 MiB in the first, 4 MiB in the second
    mib = 2**20
    slow = ((2 * mib, 98e9), (4 * mib, 40e9), (6 * mib, 31e9), (8 * mib, 39e9), (12 * mib, 35e9))
    fast = ((2 * mib, 122e9), (4 * mib, 88e9), (6 * mib, 48e9), (8 * mib, 48e9), (12 * mib, 43e9))
    (a, _), (b, _) = effective_cache(slow, 25e9), effective_cache(fast, 28e9)
    assert a == pytest.approx(_knee(slow[0], slow[1], math.sqrt(98e9 * 25e9)), abs=1) and 2 * mib < a < 4 * mib
    assert b == pytest.approx(_knee(fast[1], fast[2], math.sqrt(122e9 * 28e9)), abs=1) and 4 * mib < b < 6 * mib
    assert b / a < 1.7                      # not the 2x the rounding to a probed set gave
    # the rate is the median of the sets up to the last one above the midpoint; a flat curve is all cache
    assert effective_cache(slow, 25e9)[1] == 98e9 and effective_cache(fast, 28e9)[1] == pytest.approx(105e9)
    assert effective_cache(((mib, 50e9), (2 * mib, 50e9)), 20e9) == (2 * mib, 50e9)
    assert effective_cache(((mib, 10e9), (2 * mib, 10e9)), 20e9) == (mib, 10e9)   # none above: the first set


def test_multi_token_passes_can_only_shrink_the_weight_cache():
    one = ((1_000_000, 30e9), (3_000_000, 31e9), (6_700_000, 27e9), (8_900_000, 11e9), (12_000_000, 7e9))
    # 16-token passes: the 6.7 MB set already at DRAM speed (midpoint of 40 and 10: 20)
    multi = ((1_000_000, 40e9), (3_000_000, 35e9), (6_700_000, 14e9), (8_900_000, 11e9), (12_000_000, 10e9))
    probe = replace(_probe(one), weight_curve_multi=multi, weight_curve_tokens=16)
    one_size = _knee(one[2], one[3], math.sqrt(31e9 * 7e9))
    size, rate = probe.weight_cache         # the smaller set; the rate is the one-token curve's
    assert size == pytest.approx(_knee(multi[1], multi[2], 20e9), abs=1) and size < one_size and rate == 31e9
    # measured (hetspec calibrate, one thread, 16-token passes, GB/s of weights): after the 4.2 MB set the
    # curve is flat within noise; its single slowest point (5.0 MB) must not pull the midpoint down so far
    # that a later, noisily faster set (10.9 MB) counts as held
    measured = ((4.2e6, 6.76e9), (5.0e6, 3.23e9), (7.1e6, 3.96e9), (7.9e6, 3.61e9), (10.1e6, 3.61e9), (10.9e6, 4.84e9),
                (13.0e6, 4.5e9), (13.8e6, 4.53e9), (16.0e6, 3.71e9), (16.8e6, 3.99e9), (18.9e6, 4.05e9),
                (19.7e6, 3.95e9), (21.9e6, 3.86e9))
    one_thread = tuple((n, bw) for n, bw in zip((m for m, _ in measured), (38.71e9, 36.21e9, 34.94e9, 27.68e9, 26.77e9,
                                                                          23.03e9, 7.31e9, 5.57e9, 5.71e9, 5.84e9,
                                                                          5.35e9, 5.35e9, 5.45e9)))
    size, rate = _probe(one_thread).weight_cache
    assert 10.9e6 < size < 13.0e6 and rate == 23.03e9
    size, rate = replace(_probe(one_thread), weight_curve_multi=measured).weight_cache
    assert 4.2e6 < size < 5.0e6 and rate == 38.71e9
    # a multi-token curve holding more than the one-token one does not grow it
    assert replace(probe, weight_curve_multi=tuple((n, 40e9) for n, _ in one)).weight_cache == (int(one_size), 27e9)
    # what one-token passes keep is the one-token curve's set, whatever the multi-token curve says
    assert probe.gemv_weight_cache == (int(one_size), 27e9)
    assert replace(_probe(one_thread), weight_curve_multi=measured).gemv_weight_cache == _probe(one_thread).weight_cache


def test_the_weight_curve_counts_the_bytes_the_working_set_counts():
    # a curve set of a model's shape is that model's working set, norms included: a draft measured as held
    # by the cache is priced as held (one repeat, no warm-up: only the byte counts are checked)
    from real.validation.calibration.stream_step_probe import REWARM_DRAFT
    from real.validation.calibration.weight_cache import weight_cache_curve
    from sim.step_graph import weight_working_set

    sizes = [n for n, _ in weight_cache_curve(1, 0)]
    for layers in (1, 2):
        spec = ModelSpec(name="d", dtype="fp32", max_position=256, **{**REWARM_DRAFT, "n_layers": layers})
        assert sizes[2 * layers] == weight_working_set(spec)


def test_the_resident_loop_cost_is_the_draft_pass_beyond_its_gemms_per_operator():
    # the cache-resident draft-sized model's pass in a loop of its own minus its GEMMs alone, over the
    # pass's step-graph launches, as the streaming probe's DRAM cost is derived
    from real.validation.calibration.host_platform import resident_loop_overhead
    from real.validation.calibration.host_facts import FULL
    from real.validation.calibration.stream_step_probe import REWARM_DRAFT
    from sim.step_graph import build_step_graph

    spec = ModelSpec(name="d", dtype="fp32", max_position=256, **REWARM_DRAFT)
    launches = sum(op.launches * op.count for op in build_step_graph(spec, 1, 64).ops)
    probe = replace(_probe(()), draft_warm_s=1.2e-3, draft_gemm_s=0.3e-3, draft_spec=spec)
    dev = Device(name="cpu", kind="cpu", peak_tflops={"fp32": 0.1}, mem_bw_gbps=20.0, mem_capacity_gb=16.0,
                 bw_efficiency=1.0, compute_efficiency=1.0, op_overhead_us=18.0, token_tile=1,
                 sparse_attn_efficiency=0.0, cache_op_overhead_us=14.7)
    per_op, source = resident_loop_overhead(probe, dev, "2 threads", FULL, "by hetspec calibrate", "on x")
    assert per_op == pytest.approx(0.9e-3 / launches)
    assert f"over its {launches} operators" in source and "14.70 us" in source
    # a pass faster than its GEMMs (noise) costs nothing beyond them, never a negative cost
    assert resident_loop_overhead(replace(probe, draft_gemm_s=2e-3), dev, "", FULL, "", "")[0] == 0.0
