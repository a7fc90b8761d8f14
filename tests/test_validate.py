"""``hetspec validate``: the metrics, a tiny end-to-end run on the tiny demo models, and clear errors."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from hwmodels.errors import HetSpecError
from hwmodels.loader import write_platform_file
from hwmodels.platform import Device, MemoryDomain, Platform
from real.validation.grid import GridPoint, default_grid
from real.validation.metrics import (
    regret,
    relative_error,
    signed_error,
    summarize_method,
)
from tests.cli_runner import run_cli


# ---------------------------------------------------------------------------- metrics
def test_regret_on_synthetic_numbers():
    # the model prefers point 1, but point 2 really is the fastest
    r, p_best, m_best = regret([10.0, 30.0, 20.0], [12.0, 15.0, 20.0])
    assert (p_best, m_best) == (1, 2)
    assert r == pytest.approx(1 - 15.0 / 20.0)
    assert regret([1.0, 2.0], [1.0, 2.0])[0] == 0.0            # right pick: no regret
    with pytest.raises(ValueError):
        regret([1.0], [1.0, 2.0])


def test_relative_errors():
    assert relative_error(90.0, 100.0) == pytest.approx(0.1)
    assert signed_error(90.0, 100.0) == pytest.approx(-0.1)
    assert math.isnan(relative_error(1.0, 0.0)) and math.isnan(relative_error(float("nan"), 1.0))


def test_method_summary_medians_and_targets():
    s = summarize_method("m", ["a", "b", "c"], [1.1, 2.0, 3.3], [1.0, 2.0, 3.0], [10.0, 30.0, 20.0],
                         [12.0, 15.0, 20.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert s.median_step_error == pytest.approx(0.1)
    assert s.median_tps_error == pytest.approx(2.0 / 12.0)       # errors 2/12, 15/15, 0/20
    assert (s.predicted_best, s.measured_best) == ("b", "c") and s.regret == pytest.approx(0.25)
    assert not s.passes                                          # regret 25 % > 10 %
    good = summarize_method("m", ["a", "b"], [1.0, 2.0], [1.0, 2.1], [5.0, 4.0], [5.2, 4.1], [1, 1], [1, 1])
    assert good.passes


def test_grid_is_the_documented_grid():
    grid = default_grid()
    assert [p.value for p in grid if p.method == "chain"] == list(range(1, 9))
    assert [p.value for p in grid if p.method == "medusa"] == [1, 2, 4, 8, 16, 32, 64]
    assert len([p for p in grid if p.method == "draft-tree"]) >= 3 and grid[0] == GridPoint("ar")
    with pytest.raises(HetSpecError):
        GridPoint("chain")                                       # a knob is required
    with pytest.raises(HetSpecError):
        GridPoint("nope", 1)


# ---------------------------------------------------------------------------- end to end
def _host(tmp_path) -> str:
    """A host platform with plausible CPU numbers (the calibration itself is tested elsewhere)."""
    dev = Device(name="cpu", kind="cpu", peak_tflops={"fp32": 0.1}, mem_bw_gbps=20.0, mem_capacity_gb=16.0,
                 bw_efficiency=1.0, compute_efficiency=1.0, op_overhead_us=8.0, token_tile=1,
                 sparse_attn_efficiency=0.0, cores=1, gemm_efficiency_curve=((1, 0.08), (16, 0.5), (64, 0.8)),
                 cache_gb=0.032, cache_bw_gbps=80.0, cache_gemm_efficiency_curve=((1, 0.3), (16, 0.8)),
                 sources={"peak_tflops.fp32": "test"})
    plat = Platform(name="host", description="test host", devices={"cpu": dev, "cpu0": replace(dev, name="cpu0")},
                    memory_domains=(MemoryDomain(name="dram", devices=("cpu", "cpu0"), bw_gbps=20.0, capacity_gb=16.0,
                                                 contention_efficiency=0.9),))
    folder = tmp_path / "platforms"
    write_platform_file(plat, folder / "host.toml")
    return str(folder)


@pytest.mark.slow
def test_validate_end_to_end_on_tiny(tiny_demo, tmp_path, monkeypatch):
    from real.validation.validate import QUICK, acceptance_check, validate

    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", _host(tmp_path))
    settings = replace(QUICK, calibration_prompts=3, eval_prompts=1, prompt_tokens=16, max_new_tokens=12,
                       repeats=2, random_models=())
    grid = (GridPoint("ar"), GridPoint("chain", 2), GridPoint("medusa", 4))
    out = tmp_path / "report"
    out.mkdir()
    stale = ("hetero.md", "hetero.json", "hetero_ratio.png", "random_weight_timing.png")
    for name in stale:                    # an earlier run's (with --hetero and random-weight models)
        (out / name).write_text("stale")
    doc = validate(out, preset="tiny", progress=False, settings=settings, grid=grid, command="test")
    for name in ("report.md", "results.json", "step_latency.png", "tokens_per_s.png", "errors.png",
                 "acceptance-profile.json"):
        assert (out / name).stat().st_size > 0, name
    assert not any((out / name).exists() for name in stale)          # this run did not write them
    saved = json.loads((out / "results.json").read_text())
    assert saved["preset"] == "tiny" and len(saved["points"]) == 3
    for row in saved["points"]:
        assert row["pred_step_ms"] > 0 and row["meas_step_ms"] > 0 and row["meas_tokens_per_s"] > 0
        assert len(row["meas_step_ms_samples"]) == 2
    methods = {m["method"]: m for m in saved["methods"]}
    assert set(methods) == {"ar", "chain", "medusa"}
    for m in methods.values():
        for key in ("median_step_error", "median_tokens_per_s_error", "predicted_best", "measured_best", "regret"):
            assert key in m
        assert 0.0 <= m["regret"] < 1.0
    report = (out / "report.md").read_text()
    assert report.splitlines()[2].startswith("Generated by `test`")
    assert "Acceptance check" in report and "medusa w=4" in report and "![step latency](step_latency.png)" in report
    check = acceptance_check(doc)
    assert set(check["methods"]) == {"chain", "medusa"} and isinstance(check["all_pass"], bool)


def test_random_weight_timing_prices_and_times_a_small_model():
    from real.model.random_models import (
        RANDOM_SHAPES,
        random_spec,
        random_transformer,
        time_steps,
    )
    from sim.model_spec import ModelSpec

    assert {s.params for s in RANDOM_SHAPES.values()} and random_spec("random-smollm-135m").params > 100e6
    with pytest.raises(HetSpecError, match="random-weight model"):
        random_spec("random-nope")
    spec = ModelSpec(name="r", n_layers=2, hidden=64, intermediate=128, n_heads=4, n_kv_heads=2, vocab=100,
                     dtype="fp32", max_position=256)
    timings = time_steps(random_transformer(spec), (1, 4), context=16, repeats=2)
    assert [t.tokens for t in timings] == [1, 4] and all(t.seconds > 0 for t in timings)


# ---------------------------------------------------------------------------- CLI errors
def test_validate_without_a_host_says_to_calibrate(tmp_path):
    proc = run_cli("validate", "--quick", "--out", str(tmp_path / "r"), env={"HETSPEC_PLATFORMS_DIR": str(tmp_path)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "hetspec: error:" in proc.stderr and "hetspec calibrate" in proc.stderr


def test_validate_bad_preset_is_one_line(tmp_path):
    proc = run_cli("validate", "--preset", "huge", "--out", str(tmp_path / "r"))
    assert proc.returncode == 2 and proc.stderr.strip().startswith("hetspec: error: unknown demo preset")


def test_demo_bad_preset_is_one_line():
    proc = run_cli("demo", "--preset", "huge")
    assert proc.returncode == 2 and proc.stderr.strip().startswith("hetspec: error: unknown demo preset")


def test_validate_unknown_device_is_one_line(tmp_path):
    proc = run_cli("validate", "--device", "gpu7", "--out", str(tmp_path / "r"),
                   env={"HETSPEC_PLATFORMS_DIR": _host(tmp_path)})
    assert proc.returncode == 2 and "gpu7" in proc.stderr and "Traceback" not in proc.stderr


def test_reports_show_no_absolute_path_of_the_machine(tmp_path, monkeypatch):
    from real.validation.machine import shown_path

    home = tmp_path / "home"
    (home / ".local/share/hetspec/platforms").mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    assert shown_path(home / ".local/share/hetspec/platforms/host.toml") == "~/.local/share/hetspec/platforms/host.toml"
    assert shown_path(work / "my-box.toml") == "my-box.toml"
    assert shown_path(tmp_path / "elsewhere" / "box.toml") == "box.toml"
