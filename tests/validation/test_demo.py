"""``hetspec demo``: it always answers when the pipeline ran (exit 0, whatever the noise), and keeps a non-zero
exit for bad input, a broken cache and a crash."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from demo_helpers import host_platform_folder
from hwmodels.errors import HetSpecError
from tests.cli_runner import one_line_error


def test_the_demo_exits_0_whenever_its_pipeline_ran(monkeypatch):
    """However noisy the machine (here: a verdict too noisy to judge), a demo that ran exits 0."""
    import real.validation.demo_job as demo_job
    from hetspec.cli import main

    ran = {}

    def noisy(**kwargs):
        ran.update(kwargs)
        return {"record": {"kind": "demo", "headline": {"noise band %": 80.0},
                           "verdict": "roofline: ... paired band 40.0 % is wider than the 10.0 % target: too noisy"}}

    monkeypatch.setattr(demo_job, "run_demo", noisy)
    assert main(["demo", "--preset", "tiny"]) == 0 and ran["preset"] == "tiny"


def test_bad_input_and_a_broken_cache_exit_2_with_one_line(monkeypatch, capsys):
    import real.validation.demo_job as demo_job

    one_line_error(capsys, "demo", "--preset", "huge", match="unknown demo preset 'huge'")

    def broken(**kwargs):
        raise HetSpecError("demo cache /tmp/x/tiny: config.json does not load (delete the folder to retrain)")

    monkeypatch.setattr(demo_job, "run_demo", broken)
    one_line_error(capsys, "demo", "--preset", "tiny", match="does not load")


def test_a_crash_is_not_swallowed(monkeypatch):
    import real.validation.demo_job as demo_job
    from hetspec.cli import main

    def crash(**kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(demo_job, "run_demo", crash)
    with pytest.raises(RuntimeError, match="a bug"):        # a traceback and exit 1 under `python -m hetspec`
        main(["demo", "--preset", "tiny"])


@pytest.mark.slow
def test_the_demo_prints_every_methods_best_configuration_and_the_verdict(tiny_demo, tmp_path, monkeypatch, capsys):
    """The whole demo on the tiny models, a fresh host platform reused, a short grid: the best configuration of
    every method and the verdict tables are printed, and results.json carries the demo's record."""
    from real.validation.demo_job import run_demo
    from real.validation.grid import GridPoint
    from real.validation.validate import QUICK

    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", host_platform_folder(tmp_path))
    settings = replace(QUICK, calibration_prompts=3, eval_prompts=1, prompt_tokens=16, max_new_tokens=12).with_repeats(2)
    grid = (GridPoint("ar"), GridPoint("chain", 2), GridPoint("chain", 3), GridPoint("draft-tree", 4),
            GridPoint("medusa", 4))
    done = run_demo(preset="tiny", out=tmp_path / "demo", validate_settings=settings, grid=grid)
    out = capsys.readouterr().out
    assert "best configuration per method" in out
    for method in ("chain", "draft-tree", "medusa"):
        assert any(line.strip().startswith(f"{method} ") and "predicted best" in line for line in out.splitlines())
    assert "roofline: chain speedup error" in out and "speedup err" in out      # headline and table
    saved = json.loads((tmp_path / "demo" / "results.json").read_text())
    assert saved["record"]["kind"] == "demo" and done["record"] == saved["record"]
    assert "noise band" in saved["record"]["verdict"]
    assert json.loads((tmp_path / "demo" / "machine.json").read_text())["command"].startswith("hetspec validate --quick")


def test_the_demo_calibrates_inside_the_budget_and_profiles_only_its_preset(monkeypatch, tmp_path, capsys):
    """No fresh host: the demo calibrates (no heterogeneous probes, the default budget) and profiles the CPU for
    the shapes of the preset it runs, not every demo preset's."""
    from real.validation import demo_job
    from real.validation.calibration import calibrate as cal_mod
    from real.validation.calibration import cpu_profiles

    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", str(tmp_path))
    seen = {}

    def fake_calibrate(path, progress=True, **kw):
        from hwmodels.loader import load_platform_file

        seen["calibrate"] = kw
        folder = host_platform_folder(tmp_path / "made")
        return load_platform_file(f"{folder}/host.toml"), path, None

    monkeypatch.setattr(cal_mod, "calibrate", fake_calibrate)
    monkeypatch.setattr(cal_mod, "summary_lines", lambda platform, cal: ["summary"])
    monkeypatch.setattr(cal_mod, "busy_warnings", lambda cal, platform=None: [])
    monkeypatch.setattr(cpu_profiles, "profile_cpu_beside", lambda path, quick, models=None, **kw: seen.update(
        quick=quick, models=models, **kw) or [])
    platform, device = demo_job.host_platform(False, None, "tiny")
    assert device == "cpu" and platform.device("cpu") and seen["calibrate"] == {}
    assert seen["quick"] and seen["models"] == ["demo:tiny"] and seen["all_threads"] and not seen["one_thread"]
    assert "at most 65 s of micro-benchmarks" in capsys.readouterr().err


def test_a_busy_machine_moves_the_demo_to_a_single_thread_worker(monkeypatch, tmp_path, capsys):
    """All threads calibrated slower than one (another job holds a core): the demo predicts, profiles and validates
    on the single-thread worker; asked for a device, it keeps it."""
    from real.validation import demo_job
    from real.validation.calibration import calibrate as cal_mod
    from real.validation.calibration import cpu_profiles

    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", str(tmp_path))
    seen = {}

    def fake_calibrate(path, progress=True, **kw):
        from hwmodels.loader import load_platform_file

        folder = host_platform_folder(tmp_path / "made")
        return load_platform_file(f"{folder}/host.toml"), path, None

    monkeypatch.setattr(cal_mod, "calibrate", fake_calibrate)
    monkeypatch.setattr(cal_mod, "summary_lines", lambda platform, cal: [])
    monkeypatch.setattr(cal_mod, "busy_warnings", lambda cal, platform=None: ["warning: the machine looks busy"])
    monkeypatch.setattr(cpu_profiles, "first_worker", lambda host: "cpu0")
    monkeypatch.setattr(cpu_profiles, "profile_cpu_beside", lambda path, quick, models=None, **kw: seen.update(kw) or [])
    platform, device = demo_job.host_platform(False, None, "tiny")
    assert device == "cpu0" and platform.device("cpu0").cores == 1
    assert seen == {"one_thread": True, "all_threads": False}
    assert "single-thread worker cpu0" in capsys.readouterr().err
    _, device = demo_job.host_platform(True, "cpu", "tiny")           # --device cpu: all threads, as asked
    assert device == "cpu" and seen == {"one_thread": False, "all_threads": True}


def test_the_prediction_table_names_the_configurations_near_each_best():
    """Where the optimum is flat the table says which configurations a recalibration might pick instead."""
    from real.validation.demo_job import prediction_table

    top = [{"tree_width": w, "draft_depth": 3, "tokens_per_s": t} for w, t in ((16, 1000.0), (12, 990.0), (24, 981.0),
                                                                               (8, 950.0))]
    rows = [{"method": "medusa", "tree_width": 16, "draft_depth": 3, "tokens_per_step": 2.5, "step_ms": 2.5,
             "tokens_per_s": 1000.0, "speedup_vs_ar": 1.6, "top": top},
            {"method": "ar", "tree_width": 1, "draft_depth": 0, "tokens_per_step": 1.0, "step_ms": 1.6,
             "tokens_per_s": 625.0, "speedup_vs_ar": 1.0, "top": top[:1]},
            {"method": "chain", "error": "no draft"}]
    lines = prediction_table(rows).splitlines()
    assert "within 2 % of it" in lines[0]
    assert lines[1].endswith("w 12-24, d 3") and lines[2].endswith("-")      # w=8 is 5 % off: not near
    assert "no prediction: no draft" in lines[3]


def test_the_predictions_keep_every_configuration_of_a_flat_optimum(monkeypatch):
    """A draft tree's predicted optimum can tie more configurations than the kept top rows: another run's best is
    then among them, and the agreement of the repeats finds it instead of reading a truncated tie as another answer."""
    import pandas as pd

    import sim.acceptance
    import sim.optimizer
    import sim.strategies.base
    from real.validation import demo_job

    ties = [(w, d, 1000.0) for w in range(4, 33) for d in range(3, 9)]          # 174 configurations tied
    table = pd.DataFrame([*ties, (2, 1, 979.0), (3, 1, 970.0), *[(1, d, 500.0) for d in range(1, 60)]],
                         columns=["tree_width", "draft_depth", "tokens_per_s"])
    best = {"tree_width": 10, "draft_depth": 8, "tokens_per_s": 1000.0, "tokens_per_step": 2.0, "step_s": 2e-3,
            "speedup_vs_ar": 0.8}
    monkeypatch.setattr(sim.optimizer, "optimize", lambda *a, **k: SimpleNamespace(best=best, table=table))
    monkeypatch.setattr(sim.acceptance, "from_profile", lambda profile: profile)
    monkeypatch.setattr(sim.strategies.base, "Problem", lambda **kw: kw)
    models = SimpleNamespace(folder="m", target=SimpleNamespace(spec=None), heads=SimpleNamespace(n_heads=3))
    rows = demo_job.predict_best(models, None, "cpu", None, 64)
    kept = {(r["tree_width"], r["draft_depth"]) for r in rows[0]["top"]}
    assert len(rows[0]["top"]) == len(ties) and kept == {(w, d) for w, d, _ in ties}   # 979 is 2.1 % off: not kept
    short = table[table.tokens_per_s < 1000.0]                                          # no tie: the top rows
    monkeypatch.setattr(sim.optimizer, "optimize", lambda *a, **k: SimpleNamespace(best={**best, "tokens_per_s": 979.0},
                                                                                  table=short))
    assert len(demo_job.predict_best(models, None, "cpu", None, 64)[0]["top"]) == demo_job.TOP_ROWS
