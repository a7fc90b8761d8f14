"""``hetspec calibrate``: the host platform it writes, and cache-resident pricing of calibrated devices."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import tomllib

from hwmodels.errors import HetSpecError, PresetError
from hwmodels.loader import (
    get_platform,
    load_platform_file,
    parse_platform,
    platform_to_dict,
)
from hwmodels.platform import Device, MemoryDomain, Platform
from sim.closed_form import step_seconds
from sim.engine import run_plans
from sim.model_spec import ModelSpec
from sim.plan import StepPlan, graph_tasks
from sim.step_graph import build_step_graph, weight_working_set
from sim.step_timing import price_step
from cli_runner import one_line_error, run_cli


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def tiny_calibration(tmp_path_factory):
    """``calibrate`` with tiny sizes (two token counts, two small weight shapes, a 16 MiB stream working set)
    into a temporary platform folder, inside a 40 s budget on a fake clock that every benchmark call moves by
    5 s: one round per thread count, the heterogeneous probes skipped (the bound tested without timing)."""
    from real.validation.calibration import calibrate as cal_mod
    from real.validation.calibration import microbench as mb
    from real.validation.calibration.budget import Budget
    from real.validation.calibration.calibrate import Settings, calibrate
    from real.validation.calibration.host_facts import CalibrationProbes
    from real.validation.calibration.host_hetero import add_hetero

    settings = Settings(m_values=(1, 8), shapes=((64, 64), (128, 256)), repeats=2, warmup=1,
                        dram_working_set_bytes=16 * 2**20, cold_pool_bytes=16 * 2**20, overhead_repeats=2,
                        loop_repeats=1, loop_new_tokens=24, label="test", batched_m_values=(1, 4),
                        batched_shapes=((64, 256), (128, 256)), dtype_m_values=(1, 8), dtype_shapes=((64, 256),))
    out = tmp_path_factory.mktemp("platforms") / "host.toml"
    clock = FakeClock()
    with pytest.MonkeyPatch.context() as mp:
        for name in ("gemm_rates", "stream_bandwidth", "dispatch_overhead_s", "layer_overhead", "decode_loop_samples"):
            def slow(*args, _real=getattr(mb, name), **kwargs):
                clock.now += 5.0
                return _real(*args, **kwargs)

            mp.setattr(mb, name, slow)
        mp.setattr(cal_mod, "llc_bytes", lambda: (4 * 2**20, "a 4 MiB cache (test)"))  # a small streaming probe
        platform, path, cal = calibrate(out, progress=False, settings=settings, budget=Budget(40.0, clock=clock),
                                        probes=CalibrationProbes(lambda settings: pytest.fail("the budget was spent"),
                                                                 add_hetero))
    return platform, path, cal


def test_the_calibration_keeps_to_its_budget_on_a_fake_clock(tiny_calibration):
    from real.validation.calibration.calibrate import load_raw, robustness_lines

    _, path, cal = tiny_calibration
    stages = cal.robustness["budget"]["stages"]
    # per thread count the interleaved benchmarks, then the decode loops as a block of their own
    assert len(stages) == 2 * (2 if cal.all_threads.threads > 1 else 1)
    assert [name.endswith("decode loops") for name, _, _ in stages] == [False, True] * (len(stages) // 2)
    assert [taken for _, taken, _ in stages] == [1] * len(stages)        # the budget cut the other rounds
    # the loop costs' sources name the rounds the loops ran (they may run more than the benchmarks' 3)
    platform = tiny_calibration[0]
    sources = [text for costs in platform.loop_costs.values() for text in costs.sources.values()]
    fitted = [text for text in sources if "fitted as" in text]                   # not the probes' LM-head sizes
    assert fitted and all("median of 1 interleaved rounds" in text for text in fitted)
    assert cal.all_threads.loop_rounds == 1 and cal.settings.rounds == 3
    assert "heterogeneous probes" in cal.robustness["budget"]["skipped"]
    lines = robustness_lines(cal)
    assert any("skipped" in line for line in lines)
    # one round has no spread: it says so instead of reporting 0 %
    assert all(spreads == {} for spreads in cal.robustness["spread"].values())
    assert sum("one round, no spread measured" in line for line in lines) == len(stages) // 2   # per thread count
    record = load_raw(path)["record"]
    assert record["kind"] == "calibrate" and record["headline"]["GEMM peak GFLOP/s"] > 0
    assert record["headline"]["largest spread %"] is None and "no spread measured" in record["verdict"]


def test_the_cold_pool_is_distinct_copies_in_one_reused_buffer():
    import torch

    from real.validation.calibration.microbench import WeightPool, gemm_rates

    pool = WeightPool(nbytes=10_000)
    base = torch.arange(12.0).view(3, 4)                                  # 48 bytes a copy
    weights = pool.weights(base)
    assert len(weights) == 209 and 209 * 48 >= 10_000 > 208 * 48
    assert all(torch.equal(w, base) and w.is_contiguous() for w in weights)
    ptrs = {w.data_ptr() for w in weights}
    assert len(ptrs) == len(weights)                                      # distinct memory: each call streams
    buffer = pool.buffer
    half = pool.weights(torch.ones(6, 4, dtype=torch.float64))            # another shape and dtype: same buffer
    assert pool.buffer is buffer and len(half) == 53 and torch.equal(half[-1], torch.ones(6, 4, dtype=torch.float64))
    big = pool.weights(torch.zeros(100, 100))                            # one copy larger than the pool
    assert len(big) == 1 and pool.buffer is not buffer
    points = gemm_rates((1,), ((32, 64),), threads=1, repeats=1, warmup=0, cold_pool=WeightPool(64 * 1024))
    assert [(p.m, p.k, p.n) for p in points] == [(1, 32, 64)] and points[0].flops_per_s > 0


def _numbers(doc, where=""):
    """Every ``{value, source}`` entry of a platform document, with its dotted field name."""
    if isinstance(doc, dict):
        if set(doc) == {"value", "source"}:
            yield where, doc
            return
        for k, v in doc.items():
            yield from _numbers(v, f"{where}.{k}" if where else k)
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _numbers(v, f"{where}[{i}]")


def test_calibration_writes_a_loadable_host_with_sources(tiny_calibration):
    platform, path, cal = tiny_calibration
    assert path.exists() and path.name == "host.toml"
    loaded = load_platform_file(path)
    assert loaded.name == "host"
    workers = [f"cpu{i}" for i in range(cal.cores)]
    assert set(loaded.devices) == {"cpu", *workers}
    assert len(loaded.memory_domains) == 1 and set(loaded.memory_domains[0].devices) == set(loaded.devices)
    doc = tomllib.loads(path.read_text())
    entries = list(_numbers(doc))
    assert len(entries) > 20
    for field, entry in entries:
        value = entry["value"]
        values = [v for pair in value for v in pair] if isinstance(value, list) else [value]
        assert all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for v in values), field
        assert entry["source"].strip(), field
    cpu = loaded.device("cpu")
    for v in (cpu.peak_tflops["fp32"], cpu.mem_bw_gbps, cpu.op_overhead_us, cpu.cache_op_overhead_us, cpu.cache_gb,
              cpu.cache_bw_gbps, cpu.mem_capacity_gb):
        assert v > 0
    # measured numbers say what measured them and when
    assert "hetspec calibrate" in cpu.sources["mem_bw_gbps"] and cal.cpu in cpu.sources["mem_bw_gbps"]
    assert "median of" in cpu.sources["peak_tflops.fp32"]
    assert "larger than the last-level cache" in cpu.sources["op_overhead_us"]
    assert "torch operators" in cpu.sources["cache_op_overhead_us"]
    # the Medusa heads' batched GEMM has a streamed curve of its own, at its token counts
    assert [m for m, _ in cpu.batched_gemm_efficiency_curve] == [1, 4]
    assert "torch.matmul" in cpu.sources["batched_gemm_efficiency_curve"]
    assert len(cal.all_threads.gemm_batched) == 2 * 2
    assert [m for m, _ in cpu.gemm_efficiency_curve] == [1, 8]
    assert all(0 < e <= 1 for _, e in cpu.gemm_efficiency_curve + cpu.cache_gemm_efficiency_curve)
    loops = loaded.loop_costs["cpu"]
    # dovetail's loop is a heterogeneous probe: skipped here (the budget was spent), so no dovetail costs
    host_keys = {"ar_step", "chain_step", "chain_pass", "draft-tree_step", "draft-tree_pass", "medusa_step",
                 "medusa_node"}
    # a roofline device: each loop's forwards beyond their price (read against ar's), by the same terms
    assert set(loops.costs_us) == host_keys | {k.replace("_", "_forward_") for k in host_keys if k != "ar_step"}
    assert all(v >= 0 for v in loops.costs_us.values())
    assert "decode loop" in loops.sources["chain_step"]
    # the probe loops decode the tokens the settings ask for, and the sources say so
    assert {s.new_tokens for s in cal.all_threads.loops + cal.one_thread.loops} == {24}
    # the probe's confident draft accepts whole rounds: chain's next rounds feed the lag; ar and medusa have none
    lags = {s.method: s.lag_tokens for s in cal.all_threads.loops}
    assert lags["chain"] > 0.5 and lags["ar"] == lags["medusa"] == 0.0
    assert "24 new tokens after a 48-token prompt" in loops.sources["chain_step"]
    assert not hasattr(cpu, "host_costs_us")   # the hardware record describes hardware
    w0 = loaded.device("cpu0")
    assert w0.cores == 1 and "1 thread" in w0.sources["mem_bw_gbps"]
    # raw measurements next to the platform
    from real.validation.calibration.calibrate import load_raw

    raw = load_raw(path)
    assert raw["cores"] == cal.cores and raw["all_threads"]["gemm_warm"]


def test_calibration_round_trips_through_the_preset_format(tiny_calibration):
    platform, path, _ = tiny_calibration
    again = parse_platform(platform_to_dict(load_platform_file(path)), "again")
    assert again.device("cpu") == load_platform_file(path).device("cpu")


def test_host_resolves_by_name_from_the_platform_folder(tiny_calibration, monkeypatch):
    _, path, _ = tiny_calibration
    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", str(path.parent))
    assert get_platform("host").device("cpu").op_overhead_us > 0


def test_missing_host_hints_at_calibrate(tmp_path, monkeypatch):
    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", str(tmp_path))
    with pytest.raises(HetSpecError, match="hetspec calibrate"):
        get_platform("host")


def test_calibrate_cli_quick_writes_host_and_strict_refuses_a_noisy_one(tiny_calibration, tmp_path, monkeypatch,
                                                                       capsys):
    """``hetspec calibrate --quick`` in-process, its measurement the module's tiny one: it writes the host and no
    operator profile; a calibration whose rounds spread too far is written labelled, and refused with --strict
    (exit status 3)."""
    from hetspec.cli import main
    from real.validation.calibration import calibrate as cal_mod

    cal = tiny_calibration[2]
    monkeypatch.setattr(cal_mod, "measure", lambda settings, progress, command, budget, probes:
                        replace(cal, command=command))
    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", str(tmp_path))
    out = tmp_path / "host.toml"
    assert main(["calibrate", "--quick", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "GEMM peak" in captured.out and f"wrote {out}" in captured.out
    assert "at most 30 s" in captured.err                  # the progress line states the budget
    assert not (tmp_path / "profiled-cpu.toml").exists()   # --quick writes no operator profile
    assert "hetspec calibrate --quick" in load_platform_file(out).device("cpu").sources["mem_bw_gbps"]
    noisy = ["1 thread: DRAM triad bandwidth spread 140 % over its rounds (limit 100 %)"]
    monkeypatch.setattr(cal_mod, "spread_problems", lambda robustness: noisy)
    out.unlink()
    assert main(["calibrate", "--quick", "--strict", "--out", str(out)]) == 3
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("hetspec: error: calibration not written (--strict)") and "140 %" in err
    assert not out.exists()
    assert main(["calibrate", "--quick", "--out", str(out)]) == 0     # without --strict: written, labelled
    capsys.readouterr()
    assert "noisy machine" in load_platform_file(out).description and "140 %" in load_platform_file(out).description


def test_calibrate_cli_writes_a_run_record_where_asked(tiny_calibration, tmp_path, monkeypatch, capsys):
    """``--record DIR``: the calibration's summary, measurements (with their record) and machine.json."""
    from hetspec.cli import main
    from real.validation.calibration import calibrate as cal_mod

    cal = tiny_calibration[2]
    monkeypatch.setattr(cal_mod, "measure", lambda settings, progress, command, budget, probes:
                        replace(cal, command=command))
    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", str(tmp_path))
    record = tmp_path / "record"
    assert main(["calibrate", "--quick", "--out", str(tmp_path / "host.toml"), "--record", str(record)]) == 0
    capsys.readouterr()
    assert "GEMM peak" in (record / "report.md").read_text()
    results = json.loads((record / "results.json").read_text())
    assert results["record"]["kind"] == "calibrate" and results["record"]["verdict"]
    machine = json.loads((record / "machine.json").read_text())
    assert machine["calibration"]["platform"] == str(tmp_path / "host.toml") and machine["machine"]["cores"]
    one_line_error(capsys, "calibrate", "--device", "cpu", "--record", str(record), match="--record go with")


def test_calibrate_cli_bad_out_is_one_line(tmp_path):
    proc = run_cli("calibrate", "--out", str(tmp_path / "host.json"))
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("hetspec: error:") and "ends in .toml" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("budget,match", [("0", "--budget must be > 0"), ("nan", "--budget must be a finite number"),
                                          ("inf", "--budget must be a finite number")])
def test_calibrate_refuses_a_budget_that_is_no_number_of_seconds(capsys, budget, match):
    from cli_runner import one_line_error

    one_line_error(capsys, "calibrate", "--budget", budget, match=match)


# ---------------------------------------------------------------------------- cache-resident pricing
def _cached_cpu(cache_gb: float | None) -> Platform:
    dev = Device(name="cpu", kind="cpu", peak_tflops={"fp32": 0.1, "fp16": 0.1}, mem_bw_gbps=20.0,
                 mem_capacity_gb=16.0, bw_efficiency=1.0, compute_efficiency=1.0, op_overhead_us=5.0, token_tile=1,
                 sparse_attn_efficiency=0.0, gemm_efficiency_curve=((1, 0.05), (16, 0.5)),
                 cache_gb=cache_gb, cache_bw_gbps=None if cache_gb is None else 80.0,
                 cache_gemm_efficiency_curve=None if cache_gb is None else ((1, 0.3), (16, 0.8)))
    dom = MemoryDomain(name="dram", devices=("cpu",), bw_gbps=20.0, capacity_gb=16.0, contention_efficiency=1.0)
    return Platform(name="t", description="", devices={"cpu": dev}, memory_domains=(dom,))


SMALL = ModelSpec(name="s", n_layers=2, hidden=128, intermediate=256, n_heads=4, n_kv_heads=2, vocab=512,
                  dtype="fp32")
LARGE = replace(SMALL, name="l", n_layers=24, hidden=1024, intermediate=4096, vocab=32000)


def test_a_model_that_fits_the_cache_is_priced_resident():
    cached, plain = _cached_cpu(0.032), _cached_cpu(None)
    assert weight_working_set(SMALL) < 0.032e9 < weight_working_set(LARGE)
    for q in (1, 16):
        fast = float(step_seconds(SMALL, cached, "cpu", q, 64))
        slow = float(step_seconds(SMALL, plain, "cpu", q, 64))
        assert fast < slow
        # a model larger than the cache is priced exactly as without a cache
        assert float(step_seconds(LARGE, cached, "cpu", q, 64)) == pytest.approx(
            float(step_seconds(LARGE, plain, "cpu", q, 64)), rel=1e-12)


@pytest.mark.parametrize("model", [SMALL, LARGE])
def test_resident_pricing_agrees_across_closed_form_step_price_and_engine(model):
    platform = _cached_cpu(0.032)
    graph = build_step_graph(model, 8, 64)
    closed = float(step_seconds(model, platform, "cpu", 8, 64))
    priced = price_step(graph, platform.device("cpu")).total_s
    run = run_plans(platform, [StepPlan(tasks=tuple(graph_tasks(graph, platform, "cpu", "v", "verify")),
                                        tokens_accepted=1.0)])
    assert priced == pytest.approx(closed, rel=1e-9)
    assert float(np.asarray(run.step_s)[0]) == pytest.approx(closed, rel=1e-6)


def test_resident_models_pay_the_in_cache_fixed_cost_per_launch():
    plat = _cached_cpu(0.032)
    cheap = replace(plat, devices={"cpu": replace(plat.device("cpu"), cache_op_overhead_us=1.0)})
    launches = sum(op.launches * op.count for op in build_step_graph(SMALL, 1, 64).ops)
    diff = float(step_seconds(SMALL, plat, "cpu", 1, 64)) - float(step_seconds(SMALL, cheap, "cpu", 1, 64))
    assert diff == pytest.approx(launches * (5.0 - 1.0) * 1e-6, rel=1e-9)
    # a model streaming from DRAM keeps op_overhead_us
    assert float(step_seconds(LARGE, plat, "cpu", 1, 64)) == pytest.approx(float(step_seconds(LARGE, cheap, "cpu", 1, 64)))


def test_resident_passes_pay_the_loop_fixed_cost_and_the_bare_one_stays_the_reference():
    plat = _cached_cpu(0.032)
    bare = replace(plat.device("cpu"), cache_op_overhead_us=1.0)
    looped = replace(bare, cache_loop_op_overhead_us=12.0, sources={"cache_loop_op_overhead_us": "measured"})
    one, loop = (replace(plat, devices={"cpu": d}) for d in (bare, looped))
    launches = sum(op.launches * op.count for op in build_step_graph(SMALL, 1, 64).ops)
    diff = float(step_seconds(SMALL, loop, "cpu", 1, 64)) - float(step_seconds(SMALL, one, "cpu", 1, 64))
    assert diff == pytest.approx(launches * (12.0 - 1.0) * 1e-6, rel=1e-9)
    assert float(step_seconds(LARGE, loop, "cpu", 1, 64)) == pytest.approx(float(step_seconds(LARGE, one, "cpu", 1, 64)))
    assert (looped.overhead_s(True), looped.overhead_s(False)) == pytest.approx((12e-6, 5e-6))
    assert (looped.bare_cache_overhead_s, plat.device("cpu").bare_cache_overhead_s) == pytest.approx((1e-6, 5e-6))
    assert parse_platform(platform_to_dict(loop), "ok.toml").device("cpu").cache_loop_op_overhead_us == 12.0
    doc = platform_to_dict(loop)
    doc["devices"]["cpu"]["cache_loop_op_overhead_us"] = {"value": -3.0, "source": "x"}
    with pytest.raises(PresetError, match="cache_loop_op_overhead_us: must be >= 0"):
        parse_platform(doc, "bad.toml")


def test_preset_with_a_bad_cache_curve_names_the_field(tmp_path):
    doc = platform_to_dict(_cached_cpu(0.032))
    doc["devices"]["cpu"]["cache_gemm_efficiency_curve"] = {"value": [[1, 1.5]], "source": "x"}
    with pytest.raises(PresetError, match="cache_gemm_efficiency_curve"):
        parse_platform(doc, "bad.toml")
    doc = platform_to_dict(_cached_cpu(0.032))
    doc["devices"]["cpu"]["cache_gb"] = {"value": -1, "source": "x"}
    with pytest.raises(PresetError, match="cache_gb: must be > 0"):
        parse_platform(doc, "bad.toml")


def test_one_token_passes_keep_the_larger_gemv_cache_and_a_bad_one_names_the_field():
    one = replace(_cached_cpu(0.001).device("cpu"), gemv_cache_gb=0.002)
    assert one.holds(1.5e6, tokens=1) and not one.holds(1.5e6, tokens=16) and not one.holds(1.5e6)
    assert not one.holds(2.5e6, tokens=1)
    # without the field every pass keeps cache_gb
    assert not _cached_cpu(0.001).device("cpu").holds(1.5e6, tokens=1)
    plat = replace(_cached_cpu(0.001), devices={"cpu": replace(one, sources={"gemv_cache_gb": "measured"})})
    assert parse_platform(platform_to_dict(plat), "ok.toml").device("cpu").gemv_cache_gb == 0.002
    doc = platform_to_dict(plat)
    doc["devices"]["cpu"]["gemv_cache_gb"] = {"value": 0.0005, "source": "x"}
    with pytest.raises(PresetError, match="gemv_cache_gb: needs cache_gb and must be >= it"):
        parse_platform(doc, "bad.toml")


def test_a_draft_between_the_two_caches_is_resident_in_its_one_token_passes():
    # the draft's later passes (one token each) find it in the cache the one-token passes keep, though the
    # smaller multi-token cache would not hold it; the target (larger than both) evicts it every round
    from sim.strategies.base import Problem
    from sim.strategies.chain import draft_pass_resident, draft_pass_seconds

    ws = weight_working_set(SMALL)
    base = _cached_cpu(0.5 * ws / 1e9)
    wide = replace(base, devices={"cpu": replace(base.device("cpu"), gemv_cache_gb=2 * ws / 1e9)})
    narrow, gemv = Problem(model=LARGE, platform=base, context=64), Problem(model=LARGE, platform=wide, context=64)
    assert [draft_pass_resident(narrow, SMALL, "cpu", j) for j in range(3)] == [False, False, False]
    assert [draft_pass_resident(gemv, SMALL, "cpu", j) for j in range(3)] == [False, True, True]
    cold, warm = draft_pass_seconds(narrow, SMALL, "cpu", 3), draft_pass_seconds(gemv, SMALL, "cpu", 3)
    assert warm[0] == pytest.approx(cold[0]) and warm[1] < cold[1] and warm[2] < cold[2]


# ---------------------------------------------------------------------------- host-side decode-loop costs
def test_loop_costs_round_trip_and_bad_keys_name_the_field():
    from hwmodels.platform import LoopCosts

    plat = _cached_cpu(0.032)
    plat = replace(plat, loop_costs={"cpu": LoopCosts("cpu", {"chain_step": 30.0, "chain_pass": 5.0},
                                                      {"chain_step": "x", "chain_pass": "y"})})
    again = parse_platform(platform_to_dict(plat), "again")
    assert again.loop_costs_us("cpu") == {"chain_step": 30.0, "chain_pass": 5.0}
    assert again.loop_costs["cpu"].sources == {"chain_step": "x", "chain_pass": "y"}
    assert again.loop_costs_us("gpu") == {}
    doc = platform_to_dict(plat)
    doc["loop_costs"]["cpu"]["chain_total"] = {"value": 1.0, "source": "z"}
    with pytest.raises(PresetError, match="loop_costs.cpu.chain_total"):
        parse_platform(doc, "bad.toml")
    doc = platform_to_dict(plat)
    doc["loop_costs"]["cpu"]["chain_pass"] = {"value": -1.0, "source": "z"}
    with pytest.raises(PresetError, match="must be >= 0"):
        parse_platform(doc, "bad.toml")
    doc = platform_to_dict(plat)
    doc["loop_costs"]["gpu0"] = doc["loop_costs"].pop("cpu")
    with pytest.raises(PresetError, match="loop costs of unknown device 'gpu0'"):
        parse_platform(doc, "bad.toml")


def test_loop_costs_of_two_probes_interpolate_by_the_lm_head_and_round_trip():
    """A model's loop costs lie between the narrow and the wide probe's, by the log of its LM head's size,
    held at the nearer probe outside them; a key only the wide probe has keeps its value; the narrow table
    round-trips, and a narrow probe no narrower than the wide one is refused naming the field."""
    from hwmodels.platform import LoopCosts

    costs = LoopCosts("cpu", {"chain_step": 300.0, "stream_layer": 9.0}, {"chain_step": "w"}, lm_head=4096 * 384,
                      narrow_us={"chain_step": 100.0}, narrow_lm_head=512 * 128)
    assert costs.costs_for(512 * 128)["chain_step"] == pytest.approx(100.0)
    assert costs.costs_for(4096 * 384)["chain_step"] == pytest.approx(300.0)
    middle = math.sqrt(512 * 128 * 4096 * 384)                     # half-way in the logarithm
    assert costs.costs_for(middle)["chain_step"] == pytest.approx(200.0)
    assert costs.costs_for(10.0)["chain_step"] == pytest.approx(100.0)
    assert costs.costs_for(49152 * 576)["chain_step"] == pytest.approx(300.0)
    assert costs.costs_for(512 * 128)["stream_layer"] == 9.0 and costs.costs_for(None)["chain_step"] == 300.0
    with pytest.raises(HetSpecError, match="narrow one smaller"):
        LoopCosts("cpu", {"chain_step": 1.0}, lm_head=100.0, narrow_us={"chain_step": 1.0}, narrow_lm_head=100.0)

    plat = replace(_cached_cpu(0.032), loop_costs={"cpu": costs})
    again = parse_platform(platform_to_dict(plat), "again")
    assert again.loop_costs["cpu"].narrow_us == {"chain_step": 100.0}
    assert again.loop_costs_us("cpu", 512 * 128) == {"chain_step": pytest.approx(100.0), "stream_layer": 9.0}
    doc = platform_to_dict(plat)
    doc["loop_costs"]["cpu"]["narrow"]["probe_lm_head"]["value"] = 4096 * 384
    with pytest.raises(PresetError, match="loop_costs.cpu.narrow.probe_lm_head: must be below"):
        parse_platform(doc, "bad.toml")
    doc = platform_to_dict(plat)
    del doc["loop_costs"]["cpu"]["probe_lm_head"]
    with pytest.raises(PresetError, match="loop_costs.cpu.probe_lm_head: missing field"):
        parse_platform(doc, "bad.toml")


def test_strategies_price_a_models_host_work_from_the_probe_of_its_width():
    """The tiny demo's width is the narrow probe's: its host work is the narrow costs; a model as wide as the
    wide probe pays the wide ones."""
    from hwmodels.platform import LoopCosts
    from sim.acceptance import AcceptanceModel
    from sim.strategies.base import Problem, host_seconds

    costs = LoopCosts("cpu", {"chain_step": 300.0, "chain_pass": 30.0}, lm_head=4096 * 384,
                      narrow_us={"chain_step": 100.0, "chain_pass": 10.0}, narrow_lm_head=512 * 128)
    plat = replace(_cached_cpu(0.032), loop_costs={"cpu": costs})
    acc = AcceptanceModel(name="a", source="test", draft_alpha=0.6)
    wide = replace(SMALL, name="w", hidden=384, vocab=4096, n_heads=6)
    for model, step, per_pass in ((SMALL, 100.0, 10.0), (wide, 300.0, 30.0)):
        problem = Problem(model=model, platform=plat, acceptance=acc, context=64)
        assert float(host_seconds(problem, "chain", "cpu", passes=2)) == pytest.approx(1e-6 * (step + 2 * per_pass))


def test_each_loop_is_read_against_the_ar_loop_of_its_round():
    from real.validation.calibration.calibrate import paired_loops
    from real.validation.calibration.microbench import LoopSample

    def round_of(ar_s, chain_s, shape_ar_s):
        return [LoopSample("ar", 0, step_s=ar_s, passes=0.0, nodes=1.0, heads=0, host_s=ar_s / 10),
                LoopSample("chain", 6, step_s=chain_s, passes=6.0, nodes=7.0, heads=0, host_s=chain_s / 5),
                LoopSample("ar", 0, step_s=shape_ar_s, passes=0.0, nodes=1.0, heads=0, host_s=0.0, shape="narrow")]

    # the machine ran twice as slow in the second round, and chain alone in the third: chain / ar read 5, 5 and
    # 10, so chain is 5 ar steps, where the medians of each (10 and 1), taken from different rounds, read 10
    ar, chain, narrow = paired_loops([round_of(1.0, 5.0, 3.0), round_of(2.0, 10.0, 3.0), round_of(1.0, 10.0, 3.0)])
    assert (ar.step_s, ar.host_s) == pytest.approx((1.0, 0.1))
    assert chain.step_s == pytest.approx(5.0) and chain.host_s == pytest.approx(1.0)
    assert (chain.method, chain.knob, chain.passes) == ("chain", 6, 6.0)
    # each probe against its own ar loop
    assert narrow.step_s == pytest.approx(3.0) and narrow.shape == "narrow"
    # one round reads as it was timed
    assert [s.step_s for s in paired_loops([round_of(2.0, 7.0, 3.0)])] == pytest.approx([2.0, 7.0, 3.0])


def test_the_calibration_fits_each_probes_loops_apart():
    from real.validation.calibration.host_costs import loop_costs_of
    from real.validation.calibration.host_facts import QUICK
    from real.validation.calibration.microbench import LOOP_SHAPES, LoopSample

    dev = _cached_cpu(0.032).device("cpu")
    samples = [LoopSample("chain", g, step_s=0.05, passes=float(g), nodes=g + 1.0, heads=0, shape=shape,
                          host_s=1e-6 * (base + 5.0 * g)) for shape, base in (("wide", 200.0), ("narrow", 60.0))
               for g in (1, 3, 6)]
    costs = loop_costs_of(dev, samples, QUICK.medians(QUICK.loop_repeats), "by test", "on test")
    assert costs.costs_us["chain_step"] == pytest.approx(200.0, abs=1e-3)
    assert costs.narrow_us["chain_step"] == pytest.approx(60.0, abs=1e-3)
    assert (costs.lm_head, costs.narrow_lm_head) == tuple(LOOP_SHAPES[s]["vocab"] * LOOP_SHAPES[s]["hidden"]
                                                          for s in ("wide", "narrow"))
    assert "hidden 128, vocabulary 512" in costs.sources["narrow.chain_step"]
    only_wide = loop_costs_of(dev, [s for s in samples if s.shape == "wide"], "m", "by test", "on test")
    assert only_wide.narrow_us == {} and only_wide.costs_for(1.0) == only_wide.costs_us


def test_a_streamed_models_fixed_cost_never_reads_below_the_resident_forwards():
    """The streaming probe's rest (its step minus its GEMMs) over its operators; a noisy reading below the
    cache-resident forward's cost per operator (here: GEMMs timed slower than the whole step) is held there."""
    from types import SimpleNamespace

    from real.validation.calibration.host_facts import QUICK
    from real.validation.calibration.host_platform import step_launches, streaming_overhead

    dev = replace(_cached_cpu(0.032).device("cpu"), cache_op_overhead_us=20.0)
    probe = SimpleNamespace(spec=LARGE, context=64, unmasked_s=0.030, gemm_unmasked_s=0.020, masked_s=0.05,
                            masked_tokens=4, gemm_masked_s=0.04)
    launches = step_launches(LARGE, 64)
    per_op, source = streaming_overhead(dev, probe, "2 threads", QUICK, "by test", "on test")
    assert per_op == pytest.approx(0.010 / launches) and "the rest read" not in source
    slow_gemms = SimpleNamespace(**{**vars(probe), "gemm_unmasked_s": 0.031})
    per_op, source = streaming_overhead(dev, slow_gemms, "2 threads", QUICK, "by test", "on test")
    assert per_op == pytest.approx(20e-6) and "the rest read -" in source


def test_calibrations_written_with_per_device_host_costs_still_load():
    plat = _cached_cpu(0.032)
    doc = platform_to_dict(plat)
    doc["devices"]["cpu"]["host_costs_us"] = {"chain_step": {"value": 30.0, "source": "x"}}
    old = parse_platform(doc, "old-host.toml")
    assert old.loop_costs_us("cpu") == {"chain_step": 30.0}
    assert "loop_costs" in platform_to_dict(old) and "host_costs_us" not in platform_to_dict(old)["devices"]["cpu"]


@pytest.mark.parametrize("method,knobs,passes,nodes", [
    ("ar", {}, 0, 1),
    ("chain", {"draft_depth": 3, "draft_model": "llama-68m"}, 3, 4),
    ("medusa", {"tree_width": 6, "medusa_heads_impl": "hetspec"}, 0, 6),
    ("dovetail", {"draft_device": "cpu", "draft_model": "llama-68m", "tree_width": 8, "draft_depth": 3,
                  "top_k": 4, "tau": 2.0, "draft_dtype": "fp32"}, 4, 8),
])
def test_strategies_price_the_host_costs_in_closed_form_and_plan(method, knobs, passes, nodes):
    from hwmodels.platform import LoopCosts
    from sim.acceptance import AcceptanceModel
    from sim.strategies import get_strategy
    from sim.strategies.base import Problem, StrategyConfig

    costs = {f"{method}_step": 40.0, f"{method}_pass": 7.0, f"{method}_node": 2.0}
    plain = _cached_cpu(0.032)
    costly = replace(plain, loop_costs={"cpu": LoopCosts("cpu", costs)})
    acc = AcceptanceModel(name="a", source="test", draft_alpha=0.6, medusa_accuracy=((0.6, 0.1), (0.5, 0.1)))
    strategy = get_strategy(method)
    out = {}
    for name, plat in (("plain", plain), ("costly", costly)):
        problem = Problem(model=SMALL, platform=plat, acceptance=acc, context=64)
        config = strategy.resolve(problem, StrategyConfig(method=method).with_knobs(device="cpu", **knobs))
        est = strategy.estimate(problem, config)
        many = strategy.estimate_many(problem, [config])
        plan = strategy.plan(problem, config)
        assert many.step_s[0] == pytest.approx(est.step_s, rel=1e-9)
        assert plan.serial_s(plat) == pytest.approx(est.step_s, rel=1e-9)
        out[name] = est.step_s
    host_s = 1e-6 * (40.0 + 7.0 * passes + 2.0 * nodes)
    assert out["costly"] - out["plain"] == pytest.approx(host_s, rel=1e-9)


def test_dovetail_host_costs_are_the_loop_time_beyond_the_priced_passes():
    """A dovetail probe sample without its time outside the forwards (an older calibration): the loop is
    priced as its drafter passes (the accepted tokens, then top-k per level) plus the verification; what
    is left is fitted per round and per drafter pass."""
    from real.validation.calibration.dovetail_probe import dovetail_loop_costs, dovetail_price
    from real.validation.calibration.microbench import (
        LOOP_NEW_TOKENS,
        LOOP_PROMPT_TOKENS,
        LoopSample,
    )

    dev = _cached_cpu(0.032).device("cpu")
    context = LOOP_PROMPT_TOKENS + LOOP_NEW_TOKENS // 2
    samples = []
    for depth in (2, 7):
        bare = LoopSample("dovetail", depth, step_s=0.0, passes=depth + 1.0, nodes=16.0, heads=0, tokens=1.4)
        priced = dovetail_price(dev, bare, context)
        samples.append(replace(bare, step_s=priced + 1e-6 * (30.0 + 200.0 * (depth + 1))))
    shallow, deep = (dovetail_price(dev, s, context) for s in samples)
    assert deep > shallow                          # five more top-k passes of the drafter are priced
    costs, sources = dovetail_loop_costs({"cpu": dev}, {"all_threads": samples, "repeats": 3}, "by test",
                                         "on test")["cpu"]
    assert costs == {"dovetail_step": pytest.approx(30.0, abs=1e-3), "dovetail_pass": pytest.approx(200.0, abs=1e-3)}
    assert "dovetail decode loop" in sources["dovetail_pass"]
    # loops that decoded fewer tokens (a glance's) are priced at their own, shorter context
    short = LOOP_PROMPT_TOKENS + 24 // 2
    assert dovetail_price(dev, replace(samples[1], new_tokens=24), short) != dovetail_price(dev, samples[1], context)
    samples = [replace(bare, new_tokens=24, step_s=dovetail_price(dev, bare, short) + 1e-6 * (30.0 + 200.0 * (d + 1)))
               for d, bare in ((d, LoopSample("dovetail", d, step_s=0.0, passes=d + 1.0, nodes=16.0, heads=0,
                                              tokens=1.4)) for d in (2, 7))]
    costs, sources = dovetail_loop_costs({"cpu0": dev}, {"one_thread": samples, "repeats": 3}, "by test",
                                         "on test")["cpu0"]
    assert costs == {"dovetail_step": pytest.approx(30.0, abs=1e-3), "dovetail_pass": pytest.approx(200.0, abs=1e-3)}
    assert "24 new tokens" in sources["dovetail_step"]


def test_the_dovetail_costs_come_with_the_heterogeneous_probes(tiny_calibration):
    """The dovetail loop probe's samples in a calibration's record become the ``dovetail_*`` loop costs of ``cpu``
    (all threads) and of every single-thread worker (one thread) when the heterogeneous probes extend the
    platform; without them (``hetspec demo``'s calibration) the platform has none."""
    from real.validation.calibration.host_hetero import DOVETAIL_KEY, add_hetero
    from real.validation.calibration.host_platform import build_platform
    from real.validation.calibration.microbench import LoopSample

    _, _, cal = tiny_calibration

    def samples(step_us: float):
        return tuple(LoopSample("dovetail", d, step_s=0.05, passes=d + 1.0, nodes=16.0, heads=0, tokens=1.4,
                                host_s=1e-6 * (step_us + 100.0 * (d + 1)), new_tokens=24) for d in (2, 7))

    probed = replace(cal, extra={DOVETAIL_KEY: {"all_threads": samples(300.0), "one_thread": samples(500.0),
                                                "repeats": 1}})
    plain = build_platform(probed)
    assert not any("dovetail_step" in plain.loop_costs_us(d) for d in plain.devices)
    platform = build_platform(probed, extend=add_hetero)
    assert platform.loop_costs_us("cpu")["dovetail_step"] == pytest.approx(300.0, abs=1e-3)
    for w in (d for d in platform.devices if d != "cpu"):
        costs = platform.loop_costs_us(w)
        assert costs["dovetail_step"] == pytest.approx(500.0, abs=1e-3)
        assert costs["dovetail_pass"] == pytest.approx(100.0, abs=1e-3) and "chain_step" in costs


def test_the_dovetail_loop_probe_times_the_real_loop():
    from real.validation.calibration.dovetail_probe import DOVETAIL_DEPTHS, dovetail_loop_samples

    samples = dovetail_loop_samples(1, 1, new_tokens=16)
    assert [(s.method, s.knob) for s in samples] == [("dovetail", d) for d in DOVETAIL_DEPTHS]
    assert all(s.step_s > 0 and s.host_s is not None and s.passes > 1 and s.new_tokens == 16 for s in samples)


def test_host_costs_are_the_probe_loops_time_outside_their_forwards():
    """chain, draft-tree and medusa fit their host costs on what the validation measures as host work
    (the loop's time outside its traced forwards), not on the step time beyond the model's price of the
    forwards: a probe whose passes cost more than the bare price must not put that excess in host."""
    from real.validation.calibration.dovetail_probe import DOVETAIL_TERMS
    from real.validation.calibration.host_costs import fit_host_costs
    from real.validation.calibration.host_facts import QUICK
    from real.validation.calibration.microbench import LoopSample

    dev = _cached_cpu(0.032).device("cpu")
    samples = [LoopSample("chain", g, step_s=0.05 * (g + 1), passes=float(g), nodes=g + 1.0, heads=0,
                          host_s=1e-6 * (20.0 + 5.0 * g)) for g in (1, 3, 6)]
    samples += [LoopSample("medusa", w, step_s=0.05, passes=0.0, nodes=float(w), heads=3, host_s=1e-6 * (80.0 + 2.0 * w))
                for w in (1, 8, 32)]
    # dovetail's tree work runs between its pass records: measured as the others' (its step time is no help),
    # fitted with its own terms (a heterogeneous probe: the single-device fit leaves its samples alone)
    samples += [LoopSample("dovetail", d, step_s=0.05 * d, passes=d + 1.0, nodes=16.0, heads=0, tokens=1.4,
                           host_s=1e-6 * (300.0 + 150.0 * (d + 1))) for d in (2, 7)]
    costs, sources = fit_host_costs(dev, samples, QUICK.medians(QUICK.loop_repeats), "by test", "on test")
    host = {k: v for k, v in costs.items() if "_forward_" not in k}
    assert host == {"chain_step": pytest.approx(20.0, abs=1e-3), "chain_pass": pytest.approx(5.0, abs=1e-3),
                    "medusa_step": pytest.approx(80.0, abs=1e-3), "medusa_node": pytest.approx(2.0, abs=1e-3)}
    assert "outside the traced forwards" in sources["chain_pass"]
    costs, sources = fit_host_costs(dev, samples, QUICK.medians(QUICK.loop_repeats), "by test", "on test",
                                    terms=DOVETAIL_TERMS)
    assert costs == {"dovetail_step": pytest.approx(300.0, abs=1e-3), "dovetail_pass": pytest.approx(150.0, abs=1e-3)}
    assert "outside the traced forwards" in sources["dovetail_pass"]
    # a sample without the measure (an older calibration) keeps the residual
    old = [replace(s, host_s=None) for s in samples if s.method == "chain"]
    assert fit_host_costs(dev, old, QUICK.medians(QUICK.loop_repeats), "by test", "on test")[0]["chain_pass"] > 1e4


def test_a_roofline_device_fits_its_loops_forwards_beyond_their_price():
    """What a probe loop's traced forwards take beyond the roofline's price of them (a round's lag priced), read
    against the ar loop of the same rounds, is fitted by the host terms (``<method>_forward_<term>``, never
    below 0; ar has none) and priced by a roofline device's strategies; a profiled device, which measures its
    passes inside the loop, neither fits nor prices it."""
    from real.validation.calibration.host_costs import _model_price, fit_host_costs
    from real.validation.calibration.microbench import LOOP_PROMPT_TOKENS, LoopSample
    from hwmodels.platform import LoopCosts
    from paths import DATA
    from sim.model_spec import get_model
    from sim.strategies.base import Problem, host_seconds

    platform = _cached_cpu(0.032)
    dev = platform.device("cpu")
    context = LOOP_PROMPT_TOKENS + 48

    # the whole probe ran 10 % slower than its price: ar's forwards read 1.1 times theirs, and the others'
    # excess is what they take beyond 1.1 times theirs, in the roofline's time (divided by 1.1)
    def sample(method, knob, passes, nodes, host_us, excess_us, lag=0.0):
        s = LoopSample(method, knob, step_s=0.0, passes=passes, nodes=nodes, heads=0, host_s=1e-6 * host_us,
                       lag_tokens=lag)
        return replace(s, step_s=1.1 * (_model_price(dev, s, context) + 1e-6 * excess_us) + 1e-6 * host_us)
    samples = [sample("ar", 0, 0.0, 1.0, 5.0, 0.0)]
    samples += [sample("draft-tree", m, p, p + 1.0, 50.0 + 10.0 * p, 30.0 + 40.0 * p, lag=0.8)
                for m, p in ((4, 2.0), (8, 5.0))]
    # medusa's forwards ran faster than priced: nothing, the price is kept
    samples += [sample("medusa", w, 0.0, float(w), 70.0 + w, -40.0 - 2.0 * w) for w in (1, 8)]
    costs, sources = fit_host_costs(dev, samples, "median of 3", "by test", "on test")
    assert costs == {"ar_step": pytest.approx(5.0, abs=1e-3),
                     "draft-tree_step": pytest.approx(50.0, abs=1e-3), "draft-tree_pass": pytest.approx(10.0, abs=1e-3),
                     "draft-tree_forward_step": pytest.approx(30.0, abs=1e-3),
                     "draft-tree_forward_pass": pytest.approx(40.0, abs=1e-3),
                     "medusa_step": pytest.approx(70.0, abs=1e-3), "medusa_node": pytest.approx(1.0, abs=1e-3),
                     "medusa_forward_step": 0.0, "medusa_forward_node": 0.0}
    assert "beyond the roofline's price" in sources["draft-tree_forward_pass"]
    # the lag is part of the price: a sample that fed it, priced without it, reads its cost as excess
    unlagged = fit_host_costs(dev, [replace(s, lag_tokens=0.0) for s in samples], "m", "b", "o")[0]
    assert unlagged["draft-tree_forward_step"] > costs["draft-tree_forward_step"] + 1.0
    # without an ar loop to read them against, no excess is fitted
    assert not any("_forward_" in k for k in fit_host_costs(dev, samples[1:], "m", "b", "o")[0])
    loops = LoopCosts("cpu", costs)
    roofline = replace(platform, loop_costs={"cpu": loops})
    problem = Problem(model=get_model("llama2-7b"), platform=roofline)
    assert host_seconds(problem, "draft-tree", "cpu", passes=3.0) == pytest.approx(1e-6 * (50 + 30 + 3 * (10 + 40)))
    # another strategy's loop borrowing the costs (hcmp's, alspec's) takes the host work alone
    assert host_seconds(problem, "draft-tree", "cpu", passes=3.0, forwards=False) == pytest.approx(1e-6 * 80)
    profiled = load_platform_file(DATA / "profiled-h200.toml")
    fitted = fit_host_costs(profiled.device("gpu"), samples, "median of 3", "by test", "on test", dtype="fp16")[0]
    assert "draft-tree_pass" in fitted and not any("_forward_" in k for k in fitted)
    problem = Problem(model=get_model("llama2-7b"),
                      platform=replace(profiled, loop_costs={"gpu": replace(loops, device="gpu")}))
    assert host_seconds(problem, "draft-tree", "gpu", passes=3.0) == pytest.approx(1e-6 * 80)


def test_decode_host_time_is_the_time_outside_draft_and_verify_records():
    from real.decode.common import DecodeResult, traced_phase_seconds
    from sim.trace import TraceRecord

    def rec(step, phase, a, b):
        return TraceRecord(step=step, phase=phase, device="cpu", start_s=a, end_s=b)
    records = (rec(-1, "prefill", 0.0, 1.0), rec(0, "draft", 1.0, 1.5), rec(0, "verify", 1.5, 2.5),
               rec(0, "accept", 2.5, 2.6), rec(1, "decode", 2.7, 3.0))
    assert traced_phase_seconds(records) == pytest.approx({"draft": 0.5, "verify": 1.3, "accept": 0.1})
    run = DecodeResult("chain", 4, (1, 2), (1, 1), (0, 0), prefill_s=1.0, decode_s=2.0, records=records)
    assert run.host_s == pytest.approx(2.0 - 0.5 - 1.3)


def test_a_draft_that_fits_alone_but_not_with_its_target_is_priced_from_dram():
    from sim.acceptance import AcceptanceModel
    from sim.closed_form import step_seconds as step
    from sim.model_spec import load_hf_config  # noqa: F401  (draft given by spec below)
    from sim.strategies.base import Problem, co_resident
    from sim.strategies.chain import draft_seconds

    plat = _cached_cpu(0.032)
    acc = AcceptanceModel(name="a", source="test", draft_alpha=0.6)
    small_target = Problem(model=SMALL, platform=plat, acceptance=acc, context=64)
    large_target = Problem(model=LARGE, platform=plat, acceptance=acc, context=64)
    assert co_resident(small_target, "cpu", SMALL, SMALL) and not co_resident(large_target, "cpu", LARGE, SMALL)
    alone = float(step(SMALL, plat, "cpu", 1, 64))                      # fits: resident
    assert draft_seconds(small_target, SMALL, "cpu", 1) == pytest.approx(alone)
    assert draft_seconds(large_target, SMALL, "cpu", 1) == pytest.approx(float(step(SMALL, plat, "cpu", 1, 64,
                                                                                   resident=False)))
    assert draft_seconds(large_target, SMALL, "cpu", 1) > alone
    # the target evicts the draft once per round: the first pass is cold, the following ones warm (LRU)
    assert draft_seconds(large_target, SMALL, "cpu", 3) == pytest.approx(
        float(step(SMALL, plat, "cpu", 1, 64, resident=False)) + float(step(SMALL, plat, "cpu", 1, 65))
        + float(step(SMALL, plat, "cpu", 1, 66)))


def test_partial_rewarming_prices_the_later_draft_passes_between_warm_and_cold():
    from sim.acceptance import AcceptanceModel
    from sim.closed_form import step_seconds as step
    from sim.strategies.base import Problem
    from sim.strategies.chain import draft_seconds

    base = _cached_cpu(0.032)
    plat = replace(base, devices={"cpu": replace(base.device("cpu"), cache_rewarm=0.5)})
    acc = AcceptanceModel(name="a", source="test", draft_alpha=0.6)
    problem = Problem(model=LARGE, platform=plat, acceptance=acc, context=64)
    cold = [float(step(SMALL, plat, "cpu", 1, 64 + j, resident=False)) for j in range(3)]
    warm = [float(step(SMALL, plat, "cpu", 1, 64 + j, resident=True)) for j in range(3)]
    want = cold[0] + sum(w + 0.5 * (c - w) for c, w in zip(cold[1:], warm[1:]))
    assert draft_seconds(problem, SMALL, "cpu", 3) == pytest.approx(want, rel=1e-9)
    # the engine's plan carries the same re-warming (a delay after each later pass)
    _assert_chain_plan_prices_as_estimate(problem, 3)


def _assert_chain_plan_prices_as_estimate(problem, gamma: int) -> None:
    """The engine's plan of a chain round with the SMALL draft costs what the closed form says."""
    import json
    import tempfile
    from pathlib import Path

    from sim.strategies import get_strategy
    from sim.strategies.base import StrategyConfig

    path = Path(tempfile.mkdtemp()) / "config.json"
    path.write_text(json.dumps(replace(SMALL, dtype="fp32").to_hf_config()))
    chain = get_strategy("chain")
    config = chain.resolve(problem, StrategyConfig(method="chain").with_knobs(
        device="cpu", draft_device="cpu", draft_model=str(path), draft_depth=gamma))
    assert chain.plan(problem, config).serial_s(problem.platform) == pytest.approx(
        chain.estimate(problem, config).step_s, rel=1e-9)


def test_pass_by_pass_rewarming_prices_each_later_pass_at_its_power_of_keep():
    """With ``cache_rewarm_keep`` the j-th pass after the eviction pays keep ** j of its cold-to-warm gap (it
    replaces the one-number ``cache_rewarm``); the engine's plan prices the same passes."""
    from sim.acceptance import AcceptanceModel
    from sim.closed_form import step_seconds as step
    from sim.strategies.base import Problem
    from sim.strategies.chain import draft_seconds

    base = _cached_cpu(0.032)
    plat = replace(base, devices={"cpu": replace(base.device("cpu"), cache_rewarm=0.5, cache_rewarm_keep=0.6)})
    acc = AcceptanceModel(name="a", source="test", draft_alpha=0.6)
    problem = Problem(model=LARGE, platform=plat, acceptance=acc, context=64)
    cold = [float(step(SMALL, plat, "cpu", 1, 64 + j, resident=False)) for j in range(4)]
    warm = [float(step(SMALL, plat, "cpu", 1, 64 + j, resident=True)) for j in range(4)]
    want = cold[0] + sum(warm[j] + 0.6 ** j * (cold[j] - warm[j]) for j in range(1, 4))
    assert draft_seconds(problem, SMALL, "cpu", 4) == pytest.approx(want, rel=1e-9)
    # the one-number rule would price every later pass at half its gap: more for a long round
    one_number = replace(plat, devices={"cpu": replace(plat.device("cpu"), cache_rewarm_keep=None)})
    longer = Problem(model=LARGE, platform=one_number, acceptance=acc, context=64)
    assert draft_seconds(longer, SMALL, "cpu", 4) > draft_seconds(problem, SMALL, "cpu", 4)
    _assert_chain_plan_prices_as_estimate(problem, 4)


def test_rewarm_gap_share_by_pass():
    plat = _cached_cpu(0.032)
    dev = plat.device("cpu")
    assert replace(dev, cache_rewarm=None).rewarm_gap_share(3) == 0.0            # warm from the second pass
    assert replace(dev, cache_rewarm=0.25).rewarm_gap_share(3) == pytest.approx(0.75)
    keep = replace(dev, cache_rewarm=0.25, cache_rewarm_keep=0.5, sources={"cache_rewarm_keep": "measured"})
    assert [keep.rewarm_gap_share(j) for j in range(4)] == pytest.approx([1.0, 0.5, 0.25, 0.125])
    # the platform file keeps it; a share outside [0, 1] names the field
    doc = platform_to_dict(replace(plat, devices={"cpu": keep}))
    assert parse_platform(doc, "ok.toml").device("cpu").cache_rewarm_keep == 0.5
    doc["devices"]["cpu"]["cache_rewarm_keep"] = {"value": 1.5, "source": "x"}
    with pytest.raises(PresetError, match="cache_rewarm_keep"):
        parse_platform(doc, "bad.toml")


def test_the_rewarming_fit_recovers_a_geometric_refill():
    from real.validation.calibration.stream_step_probe import StreamingProbe, fit_rewarm_keep

    assert fit_rewarm_keep([0.7 ** j for j in range(1, 8)]) == pytest.approx(0.7, abs=1e-4)
    assert fit_rewarm_keep([0.0, 0.0]) == 0.0 and fit_rewarm_keep([1.0, 1.0]) == 1.0
    with pytest.raises(ValueError):
        fit_rewarm_keep([])
    # a probe's per-pass medians: cold 1.2 ms, warm 0.4 ms, the gap refilled by half each pass
    passes = tuple(0.4e-3 + 0.8e-3 * 0.5 ** j for j in range(6))
    probe = StreamingProbe(spec=None, unmasked_s=1.0, masked_s=1.0, context=64, draft_cold_s=passes[0],
                           draft_warm_s=0.4e-3, draft_pass_s=passes)
    assert probe.rewarm_gaps == pytest.approx([0.5 ** j for j in range(6)])
    assert probe.rewarm_keep == pytest.approx(0.5, abs=1e-4)
    assert StreamingProbe(spec=None, unmasked_s=1.0, masked_s=1.0, context=64).rewarm_keep is None


def test_the_streaming_probe_runs_in_a_process_of_its_own():
    import os

    from real.validation.calibration.calibrate import _in_fresh_process

    assert _in_fresh_process(os.getpid) != os.getpid()
    assert _in_fresh_process(max, 3, 7) == 7


def test_the_probe_draft_predicts_the_probe_target_so_draft_trees_grow():
    """The host-cost probe's draft agrees with its target (same greedy tokens), so the draft-tree loop
    drafts several passes a round and its per-pass cost can be fitted apart from its per-step one."""
    import torch

    from real.decode import decoder
    from real.decode.common import Clock
    from real.decode.draft_tree import DraftTreeConfig
    from real.validation.calibration.microbench import loop_prompt, probe_models

    models = probe_models()
    assert models.draft.spec.n_layers < models.target.spec.n_layers
    tokens = torch.tensor([loop_prompt()])
    with torch.inference_mode():
        t_cache, d_cache = models.target.new_cache(64), models.draft.new_cache(64)
        assert torch.equal(models.target(tokens, t_cache).argmax(-1), models.draft(tokens, d_cache).argmax(-1))
        run = decoder("draft-tree").generate(models, tokens[0].tolist(), 24, DraftTreeConfig(tree_width=8), Clock())
    assert run.draft_passes / run.steps > 3          # trees grow past one pass a round
    # what the dovetail residual prices is what the loops run: the loop probe's own shapes, a demo
    # target's width (the forward-cost probe stays narrow)
    from real.validation.calibration.microbench import LOOP_SHAPE, probe_specs

    target, draft = probe_specs(LOOP_SHAPE)
    assert (target, draft) == (models.target.spec, models.draft.spec)
    assert target.hidden == 384 and target.vocab == 4096 and probe_specs()[0].hidden == 64


# ---------------------------------------------------------------------------- every dtype the host runs
def test_calibrated_host_prices_every_dtype_it_runs(tiny_calibration):
    """bf16 / fp16 GEMMs are timed as torch runs them on this CPU and written as measured peaks with
    their sources, so an fp16 or bf16 model predicts on host; a measurement without them (an older
    calibration) marks them derived from fp32 instead of leaving them out."""
    from real.validation.calibration.host_platform import build_platform

    _, path, cal = tiny_calibration
    loaded = load_platform_file(path)
    for name in ("cpu", "cpu0"):
        dev = loaded.device(name)
        for dt in ("bf16", "fp16"):
            assert dev.peak_tflops[dt] > 0 and dt not in dev.derived_peaks, (name, dt)
            assert dev.sources[f"peak_tflops.{dt}"].startswith("measured:") and "F.linear" in dev.sources[
                f"peak_tflops.{dt}"]
            # its own streamed curve, at the settings' token counts, from the measured rates
            curve = dev.dtype_gemm_efficiency_curves[dt]
            assert [m for m, _ in curve] == [1, 8] and all(0 < e <= 1 for _, e in curve), (name, dt)
            assert dev.efficiency_curve(dtype=dt) == curve and dev.row_curve(dtype=dt) is None
            assert "streamed from DRAM" in dev.sources[f"dtype_gemm_efficiency_curve.{dt}"]
    for dt in ("fp16", "bf16", "fp32"):
        assert float(step_seconds(replace(SMALL, dtype=dt), loaded, "cpu", 4, 64)) > 0
    older = replace(cal, all_threads=replace(cal.all_threads, dtype_rates=()),
                    one_thread=replace(cal.one_thread, dtype_rates=()))
    derived = build_platform(older).device("cpu")
    assert derived.derived_peaks == {"bf16": ("fp32", 1.0), "fp16": ("fp32", 1.0)}
    assert derived.peak_tflops["fp16"] == derived.peak_tflops["fp32"] and not derived.dtype_gemm_efficiency_curves
    doc = platform_to_dict(build_platform(older))
    assert doc["devices"]["cpu"]["derived_peak_tflops"]["fp16"]["from"] == "fp32"
    assert "not measured" in doc["devices"]["cpu"]["derived_peak_tflops"]["fp16"]["source"]


def test_a_core_held_shows_in_the_streamed_fixed_cost_the_platform_prices_even_where_the_benchmarks_miss_it(tmp_path):
    """All threads' benchmarks can read as fast as one thread's while another job holds a core (the scheduler
    happened to leave both torch threads running), yet the streamed model's fixed cost per operator the platform
    is written with reads 3.5x one thread's (a held core on this project's 2-core Xeon: 81 against 23 us; idle:
    at most 1.0x in five calibrations): that is a busy machine too, and the demo moves to the single-thread worker."""
    from types import SimpleNamespace

    from demo_helpers import host_platform_folder
    from hwmodels.loader import load_platform_file
    from real.validation.calibration.calibrate import busy_warnings

    def worker(threads):
        return SimpleNamespace(threads=threads, peak_flops_per_s=1e11, cache_bw_bytes_per_s=5e10,
                               overhead=SimpleNamespace(per_op_s=20e-6))

    cal = SimpleNamespace(all_threads=worker(2), one_thread=worker(1))
    platform = load_platform_file(f"{host_platform_folder(tmp_path)}/host.toml")
    assert busy_warnings(cal) == [] and busy_warnings(cal, platform) == []      # both devices at 8 us
    cpu, cpu0 = platform.device("cpu"), platform.device("cpu0")
    held = platform.with_device(replace(cpu, op_overhead_us=81.4)).with_device(replace(cpu0, op_overhead_us=23.5))
    warnings = busy_warnings(cal, held)
    assert len(warnings) == 1 and "a streamed model's fixed cost per operator with 2 threads" in warnings[0]
    idle = held.with_device(replace(cpu, op_overhead_us=28.4)).with_device(replace(cpu0, op_overhead_us=29.4))
    assert busy_warnings(cal, idle) == []
