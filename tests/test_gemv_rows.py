"""One-token linears' row start-up (``gemv_row_ns``) and the weight cache a model really gets: the
calibration's fits and how every pricing path applies them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hwmodels.loader import load_platform_file, write_platform_file
from hwmodels.platform import Device, MemoryDomain, Platform
from hwmodels.roofline import roofline_time
from real.validation.calibrate import _with_gemv, fit_gemv
from real.validation.microbench import GemmPoint, StreamingProbe
from sim.closed_form import roofline_arrays, step_seconds
from sim.engine import run_plans
from sim.model_spec import ModelSpec
from sim.plan import StepPlan, graph_tasks
from sim.step_graph import build_step_graph
from sim.step_timing import price_step

ROW_NS = 150.0
MODEL = ModelSpec(name="m", n_layers=4, hidden=384, intermediate=1024, n_heads=6, n_kv_heads=2, vocab=4096,
                  dtype="fp32")


def _cpu(row_ns: float | None, cache_gb: float | None = None) -> Platform:
    dev = Device(name="cpu", kind="cpu", peak_tflops={"fp32": 0.1}, mem_bw_gbps=20.0, mem_capacity_gb=16.0,
                 bw_efficiency=1.0, compute_efficiency=1.0, op_overhead_us=5.0, token_tile=1,
                 sparse_attn_efficiency=0.0, gemm_efficiency_curve=((1, 0.05), (16, 0.5)), gemv_row_ns=row_ns,
                 cache_gb=cache_gb, cache_bw_gbps=None if cache_gb is None else 80.0)
    dom = MemoryDomain(name="dram", devices=("cpu",), bw_gbps=20.0, capacity_gb=16.0, contention_efficiency=1.0)
    return Platform(name="t", description="", devices={"cpu": dev}, memory_domains=(dom,))


def _linear_rows(model: ModelSpec) -> int:
    return sum(op.weight_rows * op.count for op in build_step_graph(model, 1, 64).ops)


def test_a_one_token_step_pays_every_weight_row_once():
    with_rows, without = _cpu(ROW_NS), _cpu(None)
    rows = _linear_rows(MODEL)
    assert rows == 4 * (384 + 128 + 128 + 384 + 1024 + 1024 + 384) + 4096
    diff = float(step_seconds(MODEL, with_rows, "cpu", 1, 64)) - float(step_seconds(MODEL, without, "cpu", 1, 64))
    assert diff == pytest.approx(rows * ROW_NS * 1e-9, rel=1e-9)


@pytest.mark.parametrize("q", [2, 8])
def test_several_tokens_and_resident_weights_pay_no_row_cost(q):
    assert float(step_seconds(MODEL, _cpu(ROW_NS), "cpu", q, 64)) == float(step_seconds(MODEL, _cpu(None), "cpu", q, 64))
    # weights in the cache: no stream to start per row
    cached, plain = _cpu(ROW_NS, cache_gb=1.0), _cpu(None, cache_gb=1.0)
    assert float(step_seconds(MODEL, cached, "cpu", 1, 64)) == float(step_seconds(MODEL, plain, "cpu", 1, 64))


def test_row_cost_is_compute_time_in_the_scalar_and_array_roofline():
    dev = _cpu(ROW_NS).device("cpu")
    flops, nbytes = 2.0 * 384 * 1024, 4.0 * 384 * 1024
    t = roofline_time(dev, flops, nbytes, "fp32", tokens=1, rows=1024)
    bare = roofline_time(replace(dev, gemv_row_ns=None), flops, nbytes, "fp32", tokens=1, rows=1024)
    assert t.compute_s - bare.compute_s == pytest.approx(1024 * ROW_NS * 1e-9, rel=1e-12)
    arr = roofline_arrays(dev, "fp32", np.array([flops]), np.array([nbytes]), np.array([1.0]), rows=np.array([1024.0]))
    assert float(arr["time_s"][0]) == pytest.approx(t.time_s, rel=1e-12)
    assert roofline_time(dev, flops, nbytes, "fp32", tokens=None, rows=1024).compute_s == pytest.approx(
        roofline_time(dev, flops, nbytes, "fp32", tokens=None).compute_s)


@pytest.mark.parametrize("q", [1, 4])
def test_closed_form_step_price_and_engine_agree_with_row_costs(q):
    platform = _cpu(ROW_NS)
    graph = build_step_graph(MODEL, q, 64)
    closed = float(step_seconds(MODEL, platform, "cpu", q, 64))
    assert price_step(graph, platform.device("cpu")).total_s == pytest.approx(closed, rel=1e-9)
    run = run_plans(platform, [StepPlan(tasks=tuple(graph_tasks(graph, platform, "cpu", "v", "verify")),
                                        tokens_accepted=1.0)])
    assert float(np.asarray(run.step_s)[0]) == pytest.approx(closed, rel=1e-6)


def test_row_cost_round_trips_through_the_platform_file(tmp_path):
    plat = _cpu(ROW_NS)
    dev = plat.device("cpu")
    src = {k: "test" for k in ("peak_tflops.fp32", "mem_bw_gbps", "mem_capacity_gb", "bw_efficiency",
                               "compute_efficiency", "op_overhead_us", "token_tile", "sparse_attn_efficiency",
                               "gemm_efficiency_curve", "gemv_row_ns")}
    plat = replace(plat, devices={"cpu": replace(dev, sources=src)})
    back = load_platform_file(write_platform_file(plat, tmp_path / "p.toml"))
    assert back.device("cpu").gemv_row_ns == ROW_NS


def _points(rate: float, row_s: float, shapes) -> list[GemmPoint]:
    return [GemmPoint(1, k, n, 2.0 * k * n / rate + n * row_s, 0.0) for k, n in shapes] + \
        [GemmPoint(8, k, n, 1e-3, 0.0) for k, n in shapes]


def test_the_gemv_fit_recovers_a_known_rate_and_row_cost():
    shapes = ((384, 1536), (1536, 384), (512, 512), (2048, 2048))
    fit = fit_gemv(_points(9e9, 140e-9, shapes))
    assert fit.flops_per_s == pytest.approx(9e9, rel=1e-6)
    assert fit.row_s == pytest.approx(140e-9, rel=1e-6)
    assert fit.shapes == 4 and fit.max_residual < 1e-6
    # the curve's one-token point becomes the row-free rate; the others stay
    curve = _with_gemv(((1, 0.05), (8, 0.3)), fit, 100e9)
    assert curve == ((1, 0.09), (8, 0.3))


def test_the_gemv_fit_needs_two_row_lengths_and_never_a_negative_cost():
    assert fit_gemv(_points(9e9, 140e-9, ((512, 512), (512, 2048)))) is None
    # rows that cost less than nothing (noise): the rate alone
    fit = fit_gemv(_points(9e9, -50e-9, ((384, 1536), (1536, 384), (2048, 2048))))
    assert fit.row_s == 0.0 and fit.flops_per_s > 0


def _probe(curve, streamed_bw: float) -> StreamingProbe:
    return StreamingProbe(spec=None, unmasked_s=1.0, masked_s=1.0, context=64, weight_curve=curve,
                          gemm_unmasked_bw=streamed_bw)


def test_the_weight_cache_is_the_largest_set_still_read_at_cache_speed():
    curve = ((1_000_000, 30e9), (3_000_000, 31e9), (6_700_000, 27e9), (8_900_000, 11e9), (12_000_000, 7.5e9))
    # midpoint of 31 and 7 GB/s: 14.7 GB/s
    assert _probe(curve, 7e9).weight_cache == (6_700_000, 27e9)
    assert _probe((), 7e9).weight_cache is None
    assert _probe(((1_000_000, 5e9),), 7e9).weight_cache == (1_000_000, 5e9)
