"""``hetspec validate``: the metrics, a tiny end-to-end run on the tiny demo models, and clear errors."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from demo_helpers import host_platform_folder, steady_machine
from hwmodels.errors import HetSpecError
from real.run.contention import Guard
from real.validation.grid import GridPoint, default_grid
from real.validation.metrics import (
    paired_regret,
    regret,
    relative_error,
    signed_error,
    summarize_method,
    within_full_targets,
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


def test_paired_regret_compares_timings_of_one_repeat():
    # point 1 is predicted best; in its three repeats it trails point 2 by 1 %, 2 % and 4 % and beats point 0
    samples = [[90.0, 88.0, 80.0], [99.0, 98.0, 96.0], [100.0, 100.0, 100.0]]
    r, p_best, m_best = paired_regret([10.0, 30.0, 20.0], samples)
    assert (p_best, m_best) == (1, 2)
    assert r == pytest.approx(0.02)                              # median of 1 %, 2 %, 4 %
    # the pick wins at the median: no regret, the pick is its own measured best
    assert paired_regret([2.0, 1.0], [[100.0, 100.0, 95.0], [99.0, 98.0, 96.0]])[::2] == (0.0, 0)
    with pytest.raises(ValueError, match="same number of repeats"):
        paired_regret([1.0, 2.0], [[1.0, 2.0], [1.0]])
    with pytest.raises(ValueError, match="positive"):
        paired_regret([1.0, 2.0], [[1.0, 0.0], [1.0, 1.0]])
    with pytest.raises(ValueError, match="one row of measured repeats per grid point"):
        paired_regret([1.0], [[1.0], [2.0]])


def test_paired_regret_ignores_a_drift_that_moves_a_whole_repeat():
    # the pick (point 0) trails point 1 by 1 % in the first repeat (the median one)
    steady = [[100.0, 100.0, 100.0], [101.0, 99.0, 103.0]]
    assert paired_regret([2.0, 1.0], steady)[0] == pytest.approx(1 - 100 / 101)
    assert regret([2.0, 1.0], [100.0, 101.0])[0] == pytest.approx(1 - 100 / 101)
    # the machine runs the first repeat 20 % slow and the third 10 % fast, every point alike
    speed = (0.8, 1.0, 1.1)
    drifted = [[x * f for x, f in zip(row, speed)] for row in steady]
    assert paired_regret([2.0, 1.0], drifted)[0] == pytest.approx(1 - 100 / 101)    # unchanged
    medians = [sorted(row)[1] for row in drifted]                # 100 against 99: the loss is hidden
    assert regret([2.0, 1.0], medians)[0] == 0.0


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
    assert good.passes and not good.paired
    # the full run's stricter targets: 5 % step and tokens/s errors (here 2.4 % and 3.1 %), 2 % regret
    assert good.passes_full and good.to_json()["passes_full"] and not s.passes_full
    assert within_full_targets(0.05, 0.05, 0.02) and not within_full_targets(0.05, 0.05, 0.021)
    assert not within_full_targets(0.051, 0.0, 0.0) and not within_full_targets(float("nan"), 0.0, 0.0)
    # with each point's repeats: the paired regret decides, the regret of the medians stays beside it
    paired = summarize_method("m", ["a", "b", "c"], [1.1, 2.0, 3.3], [1.0, 2.0, 3.0], [10.0, 30.0, 20.0],
                              [12.0, 15.0, 20.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0],
                              [[12.0, 11.0, 13.0], [15.0, 19.0, 14.0], [20.0, 19.5, 14.5]])
    assert paired.paired and (paired.predicted_best, paired.measured_best) == ("b", "c")
    assert paired.regret == pytest.approx(1 - 14.0 / 14.5)      # repeats: 25 %, 2.6 %, 3.4 % -> median 3.4 %
    assert paired.regret_of_medians == pytest.approx(0.25) and paired.fastest_by_median == "c"
    assert not paired.passes and paired.regret < 0.10            # the tokens/s error (2/12) misses, not regret
    assert paired.to_json()["regret_of_medians"] == pytest.approx(0.25) and paired.to_json()["regret_paired"]


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
def steady_probe() -> float:
    """A contention probe that always reads 1 FLOP/s (module level: pickled into the measuring processes)."""
    return 1.0


def test_the_full_validation_guards_its_runs_and_the_quick_one_does_not():
    from real.validation.hetero.setup import FULL as HETERO_FULL
    from real.validation.hetero.setup import QUICK as HETERO_QUICK
    from real.validation.validate import FULL, QUICK

    assert FULL.contention_guard and HETERO_FULL.contention_guard
    assert not QUICK.contention_guard and not HETERO_QUICK.contention_guard




@pytest.mark.slow
def test_validate_end_to_end_on_tiny(tiny_demo, tmp_path, monkeypatch):
    from real.validation.validate import QUICK, acceptance_check, validate

    folder = host_platform_folder(tmp_path)
    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", folder)
    steady_machine(monkeypatch, folder)
    write_cpu_profile(tiny_demo, folder)      # what `hetspec calibrate --device cpu` adds
    settings = replace(QUICK, calibration_prompts=3, eval_prompts=1, prompt_tokens=16, max_new_tokens=12,
                       repeats=2, random_models=(), contention_guard=True)
    # the contention guard with a probe that always reads its reference (the real one times a GEMM)
    monkeypatch.setattr("real.validation.validate.contention_guard",
                        lambda threads, calibrated, now: Guard(probe=steady_probe, reference=1.0, source="test"))
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
    # what the prediction counts per step beside what the run counted: chain gamma = 2 drafts 2 passes but in
    # a generation's last rounds (the profile's replayed rounds of 12-token generations) and verifies one token
    # more, medusa w = 4 drafts none and verifies its 4-token tree
    counts = {r["label"]: (r["pred_draft_passes_per_step"], r["pred_verified_per_step"]) for r in saved["points"]}
    rounds = json.loads((out / "acceptance-profile.json").read_text())["meta"]["chain_rounds"]["2"]
    passes = sum(k * w for k, w in rounds)
    assert 1.0 < passes < 2.0 and counts["chain γ=2"] == pytest.approx((passes, passes + 1.0))
    assert counts["ar"] == (0.0, 1.0) and counts["medusa w=4"] == (0.0, 4.0)
    methods = {m["method"]: m for m in saved["methods"]}
    assert set(methods) == {"ar", "chain", "medusa"}
    for m in methods.values():
        for key in ("median_step_error", "median_tokens_per_s_error", "predicted_best", "measured_best", "regret"):
            assert key in m
        assert 0.0 <= m["regret"] < 1.0 and m["regret_paired"] and 0.0 <= m["regret_of_medians"] < 1.0
    for row in saved["points"]:          # the paired regret's inputs: each repeat's tokens/s, aligned by repeat
        assert len(row["meas_tokens_per_s_samples"]) == 2 and min(row["meas_tokens_per_s_samples"]) > 0
    report = (out / "report.md").read_text()
    assert "the two timed in the same repeat, median over repeats" in report
    assert "| measured best | regret | regret of the medians | meets targets |" in report
    assert report.splitlines()[2].startswith("Generated by `test`")
    assert "Acceptance check" in report and "medusa w=4" in report and "![step latency](step_latency.png)" in report
    assert saved["fresh_processes"] is True and "2 interleaved repeats, each in a process of its own" in report
    assert saved["contention"]["measurements"] == 6 and saved["contention"]["retaken"] == 0
    assert "Contention guard" in report and "all 6 measurements taken with the probe above the floor" in report
    assert "| draft passes/step pred / meas |" in report
    assert next(line for line in report.splitlines() if line.startswith("| chain γ=2 |") and "/" in line).endswith(
        f"| {passes + 1:.2f} / {saved['points'][1]['meas_verified_per_step']:.2f} | {passes:.2f} / "
        f"{saved['points'][1]['meas_draft_passes_per_step']:.2f} |")
    check = acceptance_check(doc)
    assert set(check["methods"]) == {"chain", "medusa"} and isinstance(check["all_pass"], bool)
    # the same measurements priced by the CPU's operator profile, beside the roofline
    assert saved["profiled"]["source"]["profile"].endswith("profiled-cpu.csv")
    assert {m["method"] for m in saved["profiled"]["methods"]} == {"ar", "chain", "medusa"}
    for row in saved["points"]:
        priced = row["profiled"]
        assert priced["pred_step_ms"] > 0 and priced["meas_step_ms"] == row["meas_step_ms"]
        assert priced["pred_step_ms"] != row["pred_step_ms"]          # another timing of the operators
    assert "### Operator timing: measured profile beside the roofline" in report
    assert "| chain | roofline |" in report and "| chain | profiled |" in report
    assert "| regret of the medians | within the full run's targets |" in report
    assert "this run is quick: it is not held to them" in report
    # the profile was written after the host, as `hetspec calibrate` writes them: one calibration run
    assert "older_than_host" not in saved["profiled"]["source"] and "Two calibration runs" not in report
    summary = saved["models"]["summary"]                 # which training of the models was validated
    assert summary["device"] == "cpu" and f"recipe fingerprint {summary['fingerprint']}" in report


@pytest.mark.slow
@pytest.mark.slow
def test_a_validation_the_guard_stops_leaves_its_folder_as_it_was(tiny_demo, tmp_path, monkeypatch):
    from real.run.contention import ContendedTooLong
    from real.validation.validate import QUICK, validate

    folder = host_platform_folder(tmp_path)
    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", folder)
    steady_machine(monkeypatch, folder)
    settings = replace(QUICK, calibration_prompts=2, eval_prompts=1, prompt_tokens=16, max_new_tokens=8,
                       repeats=1, random_models=())

    def stopped(*args, **kwargs):
        raise ContendedTooLong("the cores read slowed from outside for 15 min without a break")

    monkeypatch.setattr("real.validation.measure.measure_grid", stopped)
    out = tmp_path / "report"
    out.mkdir()
    (out / "report.md").write_text("an earlier run's")
    with pytest.raises(ContendedTooLong) as err:
        validate(out, preset="tiny", progress=False, settings=settings, grid=(GridPoint("ar"),), command="test")
    assert err.value.exit_code == 3
    assert [f.name for f in out.iterdir()] == ["report.md"] and (out / "report.md").read_text() == "an earlier run's"


def test_grid_repeats_in_fresh_processes_decode_as_in_this_one(tiny_demo):
    """Each repeat in a process of its own decodes exactly what this process decodes (greedy), ticks once per
    point, and keeps each repeat's samples."""
    from real.decode.chain import ChainConfig
    from real.validation.measure import measure_grid

    prompts = [[5, 6, 7, 8, 9, 10], [11, 12, 13, 14]]
    points = (GridPoint("ar"), GridPoint("chain", 2))
    configs = [real_config_of(p) for p in points]
    assert isinstance(configs[1], ChainConfig)
    ticks = []
    fresh = measure_grid(tiny_demo, points, configs, prompts, 10, 2, tick=lambda: ticks.append(1),
                         fresh_processes=True, threads=1)
    here = measure_grid(tiny_demo, points, configs, prompts, 10, 1)
    assert len(ticks) == 4
    for a, b in zip(fresh, here):
        assert a.tokens_per_step == b.tokens_per_step and len(a.step_samples) == 2 and a.step_s > 0


def test_a_failing_repeat_in_its_own_process_is_one_line(tiny_demo):
    from real.validation.measure import measure_grid

    with pytest.raises(HetSpecError, match=r"^repeat 1, in its own process: \w+Error") as err:
        measure_grid(tiny_demo, (GridPoint("chain", 2),), ["not a config"], [[5, 6, 7]], 4, 1, fresh_processes=True)
    assert "\n" not in str(err.value)


def real_config_of(point):
    from real.validation.grid import real_config

    return real_config(point)


def write_cpu_profile(models, folder, name: str = "profiled-cpu") -> None:
    """A small operator profile of the demo models' shapes as ``name`` (default ``profiled-cpu``) in ``folder``."""
    from pathlib import Path

    from real.validation.profiler.profile_device import ProfileSettings, profile_device, write_device_profile

    settings = ProfileSettings(tokens=(1, 2, 4, 8, 16), attention_q=(1, 4, 16), attention_keys=(16, 64), repeats=1,
                               calls=2, graph_copies=2)
    prof = profile_device("cpu", [models.target.spec, models.draft.spec], settings, progress=False)
    write_device_profile(prof, Path(folder) / name, "hetspec calibrate --device cpu (test)")


def test_no_profiled_pricing_says_why(tmp_path):
    from hwmodels.loader import load_platform_file
    from real.validation.backends import profiled_variant

    folder = tmp_path / "empty"
    folder.mkdir()
    host = load_platform_file(f"{host_platform_folder(tmp_path)}/host.toml")
    missing = profiled_variant(host, "cpu", folder)
    assert missing.platform is None and "run `hetspec calibrate --device cpu`" in missing.reason
    (folder / "profiled-cpu.toml").write_text("not toml [")
    broken = profiled_variant(host, "cpu", folder)
    assert broken.platform is None and "does not load" in broken.reason
    one_core = profiled_variant(host, "cpu0", folder)      # a single-thread worker reads its own profile
    assert one_core.platform is None and "run `hetspec calibrate --device cpu0`" in one_core.reason
    assert "profiled-cpu0.toml" in one_core.reason
    gpu = profiled_variant(host, "cuda:0", folder)
    assert gpu.platform is None and "not cuda:0" in gpu.reason


def test_a_single_thread_worker_is_priced_by_its_own_profile(tmp_path, tiny_demo):
    """``validate --device cpu0`` prices the worker by ``profiled-cpu0`` (never by the all-thread profile)."""
    from hwmodels.loader import load_platform_file
    from real.validation.backends import profiled_variant

    folder = tmp_path / "profiles"
    folder.mkdir()
    write_cpu_profile(tiny_demo, folder, "profiled-cpu0")
    host = load_platform_file(f"{host_platform_folder(tmp_path)}/host.toml")
    assert profiled_variant(host, "cpu", folder).platform is None           # no profiled-cpu here
    variant = profiled_variant(host, "cpu0", folder)
    assert variant.reason == "" and variant.source["profile"].endswith("profiled-cpu0.csv")
    assert variant.platform.device("cpu0").timing.profiled
    assert variant.platform.device("cpu").timing is host.device("cpu").timing   # the other devices as they were


def test_a_profile_older_than_its_host_is_flagged_as_another_calibration_run(tmp_path, tiny_demo):
    """A calibration whose profile stopped leaves the last run's profile beside the new ``host.toml``: the
    validation prices with it but says the two columns rest on two calibration runs."""
    import os

    from hwmodels.loader import load_platform_file
    from real.validation.backends import profiled_variant
    from real.validation.report import profiled_section

    host = load_platform_file(f"{host_platform_folder(tmp_path)}/host.toml")
    folder = tmp_path / "profiles"
    folder.mkdir()
    write_cpu_profile(tiny_demo, folder, "profiled-cpu0")
    assert "older_than_host" not in profiled_variant(host, "cpu0", folder).source      # written after the host
    written = os.stat(host.path).st_mtime - 3600.0
    os.utime(folder / "profiled-cpu0.toml", (written, written))
    variant = profiled_variant(host, "cpu0", folder)
    assert variant.platform is not None                      # still priced by it ...
    note = variant.source["older_than_host"]                 # ... and said to be older
    assert "is older than the host platform" in note and "`hetspec calibrate --device cpu0`" in note
    doc = {"profiled": {"source": variant.source, "methods": []}, "settings": {"label": "full"},
           "platform": {"name": "host"}, "methods": []}
    section = "\n".join(profiled_section(doc, untrusted=False))
    assert f"**Two calibration runs:** {note}." in section


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
                   env={"HETSPEC_PLATFORMS_DIR": host_platform_folder(tmp_path)})
    assert proc.returncode == 2 and "gpu7" in proc.stderr and "Traceback" not in proc.stderr


def test_reports_show_no_absolute_path_of_the_machine(tmp_path, monkeypatch):
    from real.validation.trust import shown_path

    home = tmp_path / "home"
    (home / ".local/share/hetspec/platforms").mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    assert shown_path(home / ".local/share/hetspec/platforms/host.toml") == "~/.local/share/hetspec/platforms/host.toml"
    assert shown_path(work / "my-box.toml") == "my-box.toml"
    assert shown_path(tmp_path / "elsewhere" / "box.toml") == "box.toml"


@pytest.mark.parametrize("value", ["0", "-2"])
def test_validate_repeats_below_one_is_one_line(capsys, tmp_path, value):
    from tests.cli_runner import one_line_error

    one_line_error(capsys, "validate", "--repeats", value, "--out", str(tmp_path / "r"),
                   match=f"--repeats must be at least 1, got {value}")


def test_validate_repeats_reach_the_grid_and_the_heterogeneous_section(monkeypatch, tmp_path):
    """``--repeats N`` sets the grid's and every timed heterogeneous section's repeats, and the command the
    report prints says so."""
    import real.validation.validate as validate_module
    from hetspec.cli import main

    seen = {}

    def fake_validate(out, **kw):
        seen.update(kw)
        raise SystemExit(0)              # what was asked is all this test needs

    monkeypatch.setattr(validate_module, "validate", fake_validate)
    with pytest.raises(SystemExit):
        main(["validate", "--hetero", "--repeats", "5", "--out", str(tmp_path / "r")])
    assert seen["settings"].repeats == 5 and seen["settings"].eval_prompts == validate_module.FULL.eval_prompts
    assert seen["hetero_settings"].repeats == 5 and seen["hetero_settings"].alspec_repeats == 5
    assert seen["command"] == f"hetspec validate --hetero --repeats 5 --out {tmp_path / 'r'}"
    seen.clear()
    with pytest.raises(SystemExit):
        main(["validate", "--quick", "--out", str(tmp_path / "r")])
    assert seen["settings"] is None and seen["hetero_settings"] is None      # the defaults: validate's own


def test_the_throughput_plot_circles_the_reports_measured_best():
    """The paired measured best (the acceptance check's) is circled, not the highest median, where they differ;
    without a paired best the highest median is, and the legend says which."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from real.validation.plots import _panel

    def row(g, tps):
        return {"method": "chain", "value": g, "label": f"chain γ={g}", "meas_tokens_per_s": tps,
                "meas_tokens_per_s_min": tps - 1, "meas_tokens_per_s_max": tps + 1, "pred_tokens_per_s": 100.0 + g}

    rows = [row(4, 200.0), row(5, 205.0), row(6, 203.0)]
    for best, legend in (("chain γ=6", "measured optimum, paired within repeats (γ=6)"),
                         (None, "measured optimum, highest median (γ=5)")):
        fig, ax = plt.subplots()
        _panel(ax, rows, "chain", "pred_tokens_per_s", "meas_tokens_per_s", "meas_tokens_per_s_min",
               "meas_tokens_per_s_max", "tokens/s", True, None, best)
        labels = ax.get_legend_handles_labels()[1]
        plt.close(fig)
        assert legend in labels and "predicted optimum, as measured (γ=6)" in labels
