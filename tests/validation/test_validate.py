"""``hetspec validate``: the metrics, a tiny end-to-end paired run on the tiny demo models, and clear errors."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from demo_helpers import host_platform_folder
from hwmodels.errors import HetSpecError
from real.validation.grid import GridPoint, default_grid
from real.validation.metrics import paired_regret, regret, relative_error, signed_error
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
@pytest.mark.slow
def test_validate_end_to_end_on_tiny(tiny_demo, tmp_path, monkeypatch):
    from real.validation.commands import acceptance_check
    from real.validation.validate import QUICK, validate

    folder = host_platform_folder(tmp_path)
    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", folder)
    write_cpu_profile(tiny_demo, folder)      # what `hetspec calibrate --device cpu` adds
    settings = replace(QUICK, calibration_prompts=3, eval_prompts=1, prompt_tokens=16, max_new_tokens=12,
                       random_models=()).with_repeats(2)
    grid = (GridPoint("ar"), GridPoint("chain", 2), GridPoint("medusa", 4))
    out = tmp_path / "report"
    doc = validate(out, preset="tiny", progress=False, settings=settings, grid=grid, command="test", quick=True)
    for name in ("report.md", "results.json", "step_latency.png", "tokens_per_s.png", "errors.png",
                 "acceptance-profile.json"):
        assert (out / name).stat().st_size > 0, name
    machine = json.loads((out / "machine.json").read_text())      # the run record's machine, command, times
    assert machine["command"] == "test" and machine["started"] <= machine["ended"]
    assert machine["machine"]["cores"] and machine["calibration"]["platform"].endswith("host.toml")
    saved = json.loads((out / "results.json").read_text())
    assert saved["preset"] == "tiny" and len(saved["points"]) == 3
    rows = {r["label"]: r for r in saved["points"]}
    for row in saved["points"]:
        assert row["pred_step_ms"] > 0 and row["meas_step_ms"] > 0 and row["meas_tokens_per_s"] > 0
    for row in (rows["chain γ=2"], rows["medusa w=4"]):
        # each configuration in 2 A/B blocks with ar: its timings and the paired ar's, aligned
        assert len(row["meas_step_ms_samples"]) == 2 and len(row["pairs"]["ar_decode_s"]) == 2
    assert len(rows["ar"]["meas_step_ms_samples"]) == 4          # ar ran in every block: 2 points x 2 blocks
    # what the prediction counts per step beside what the run counted: chain gamma = 2 drafts 2 passes but in
    # a generation's last rounds (the profile's replayed rounds of 12-token generations) and verifies one token
    # more, medusa w = 4 drafts none and verifies its 4-token tree
    counts = {r["label"]: (r["pred_draft_passes_per_step"], r["pred_verified_per_step"]) for r in saved["points"]}
    rounds = json.loads((out / "acceptance-profile.json").read_text())["meta"]["chain_rounds"]["2"]
    passes = sum(k * w for k, w in rounds)
    assert 1.0 < passes < 2.0 and counts["chain γ=2"] == pytest.approx((passes, passes + 1.0))
    assert counts["ar"] == (0.0, 1.0) and counts["medusa w=4"] == (0.0, 4.0)
    # the paired verdict of both pricings, and the record the reports index reads
    assert [v["pricing"] for v in saved["verdicts"]] == ["roofline", "profiled"]
    for v in saved["verdicts"]:
        methods = {m["method"]: m for m in v["methods"]}
        assert set(methods) == {"ar", "chain", "medusa"}
        for m in (methods["chain"], methods["medusa"]):
            assert m["median_speedup_error"] >= 0 and 0.0 <= m["regret"] < 1.0
            assert m["predicted_best"] == m["measured_best"]        # one configuration each
        assert v["noise_band"] >= 0 and isinstance(v["absolute"]["judged"], bool)
    record = saved["record"]
    assert record["kind"] == "validate" and "chain speedup error %" in record["headline"]
    assert "profiled medusa regret %" in record["headline"] and "noise band %" in record["headline"]
    assert record["verdict"].startswith("roofline: chain speedup error")
    report = (out / "report.md").read_text()
    assert report.splitlines()[2].startswith("Generated by `test`") and record["verdict"] in report
    assert "## Verdict: predicted speedups over ar against the paired measurements" in report
    assert "| roofline | chain |" in report and "| profiled | chain |" in report
    assert "every configuration in 2 A/B blocks with `ar`" in report and "![step latency](step_latency.png)" in report
    assert "| draft passes/step pred / meas |" in report
    assert [line for line in report.splitlines() if line.startswith("| chain γ=2 |")][-1].endswith(   # phases
        f"| {passes + 1:.2f} / {rows['chain γ=2']['meas_verified_per_step']:.2f} | {passes:.2f} / "
        f"{rows['chain γ=2']['meas_draft_passes_per_step']:.2f} |")
    check = acceptance_check(doc)
    assert set(check["pricings"]) == {"roofline", "profiled"}
    assert set(check["pricings"]["roofline"]["methods"]) == {"chain", "medusa"}
    # the same measurements priced by the CPU's operator profile, beside the roofline
    assert saved["profiled"]["source"]["profile"].endswith("profiled-cpu.csv")
    for row in saved["points"]:
        priced = row["profiled"]
        assert priced["pred_step_ms"] > 0 and priced["meas_step_ms"] == row["meas_step_ms"]
        assert priced["pred_step_ms"] != row["pred_step_ms"]          # another timing of the operators
    # the profile was written after the host, as `hetspec calibrate` writes them: one calibration run
    assert "older_than_host" not in saved["profiled"]["source"] and "Two calibration runs" not in report
    # one configuration a method: nothing to settle head to head; the loop costs the run was priced with
    assert saved["head_to_head"] == {} and "Head to head" not in report
    from hwmodels.loader import load_platform_file

    priced_by = load_platform_file(out / saved["platform"]["file"])
    assert priced_by.loop_costs_us("cpu") == {"chain_step": 40.0, "medusa_node": 2.0}
    assert priced_by.device("cpu").cache_gb == 0.032 and "as priced in [`platform.toml`](platform.toml)" in report
    summary = saved["models"]["summary"]                 # which training of the models was validated
    assert summary["device"] == "cpu" and f"recipe fingerprint {summary['fingerprint']}" in report


def test_every_configuration_is_timed_in_blocks_with_ar(tiny_demo):
    """The grid's runs: each configuration beside an ar run of the same block, decoding what it decodes alone."""
    from real.validation.measure import measure_grid

    prompts = [[5, 6, 7, 8, 9, 10], [11, 12, 13, 14]]
    points = (GridPoint("chain", 2), GridPoint("ar"))
    configs = [real_config_of(p) for p in points]
    ticks = []
    import gc

    # the garbage collector is off while a block is timed (it collects between repeats), and back on after
    chain, ar = measure_grid(tiny_demo, points, configs, prompts, 10, 3,
                             tick=lambda: ticks.append(gc.isenabled()))
    assert ticks == [False] * 3 and gc.isenabled()
    assert len(chain.step_samples) == len(chain.pairs["ar_decode_s"]) == 3
    assert ar.pairs["decode_s"] == ar.pairs["ar_decode_s"] and len(ar.step_samples) == 3
    # one pair per prompt in every block: greedy decoding gives each prompt the same tokens in every block
    assert [len(b) for b in chain.pairs["decode_s"]] == [2, 2, 2] and chain.pairs["ar_tokens"] == ar.pairs["tokens"]
    assert chain.pairs["tokens"][0] == chain.pairs["tokens"][2] and all(t > 0 for b in chain.pairs["decode_s"] for t in b)
    assert chain.tokens_per_step > 1.0 and ar.tokens_per_step == 1.0
    with pytest.raises(HetSpecError, match="needs its ar point"):
        measure_grid(tiny_demo, points[:1], configs[:1], prompts, 4, 1)


def test_the_blocks_stop_when_the_band_settles_or_the_budget_is_spent():
    from real.validation.measure import Stopping, keep_measuring

    stop = Stopping(3, 10, budget_s=100.0, settled=0.05)
    assert keep_measuring(stop, 2, 500.0, 60.0, 0.01)            # the least is always taken
    assert keep_measuring(stop, 3, 40.0, 20.0, 0.12)             # wide, and another round fits
    assert not keep_measuring(stop, 3, 90.0, 20.0, 0.12)         # wide, but the round would end past 100 s
    assert not keep_measuring(stop, 3, 40.0, 20.0, 0.04)         # settled
    assert keep_measuring(stop, 3, 40.0, 20.0, float("nan"))     # not told yet
    assert not keep_measuring(stop, 10, 40.0, 1.0, 0.5)          # the most
    assert not keep_measuring(Stopping(3, 3), 3, 0.0, 0.0, 0.5)  # a fixed count
    with pytest.raises(HetSpecError, match="not a range"):
        Stopping(3, 2)


def test_the_grid_measures_rounds_inside_its_time_budget(tiny_demo):
    """On a fake clock that moves 1 s per decode, a 40 s budget stops the blocks where the next round would pass
    it, whatever the band: three rounds of 12 s (2 configurations x 3 prompts x 2 runs), then no fourth
    (36 + 12 > 40)."""
    from real.validation.measure import Stopping, measure_grid

    points = (GridPoint("ar"), GridPoint("chain", 2), GridPoint("chain", 3))
    configs = [real_config_of(p) for p in points]
    now = [0.0]
    import real.run.session as session

    real_run = session.run_prompts

    def timed(*a, **k):
        now[0] += 1.0
        return real_run(*a, **k)

    prompts = [[5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15]]
    stop = Stopping(2, 10, budget_s=40.0, settled=0.0)
    try:
        session.run_prompts = timed
        meas = measure_grid(tiny_demo, points, configs, prompts, 6, stop, clock=lambda: now[0])
    finally:
        session.run_prompts = real_run
    assert [len(m.pairs["decode_s"]) for m in meas] == [6, 3, 3]      # ar: the blocks of both configurations


def test_a_head_to_head_pairing_times_the_predicted_best_against_the_measured_best_alone(tiny_demo):
    """The pairing that settles a regret: the rival in A/B blocks with the measured best, no ar run among them."""
    from real.validation.measure import head_to_head

    points = (GridPoint("ar"), GridPoint("chain", 2), GridPoint("chain", 3), GridPoint("draft-tree", 2))
    configs = [real_config_of(p) for p in points]
    ran = []
    import real.run.session as session

    real_run = session.run_prompts

    def logged(models, method, config, *a, **k):
        ran.append(method)
        return real_run(models, method, config, *a, **k)

    try:
        session.run_prompts = logged
        out = head_to_head(tiny_demo, points, configs, [[5, 6, 7, 8], [9, 10, 11]], 6, 2,
                           {"chain": ("chain γ=3", ["chain γ=2"])})
    finally:
        session.run_prompts = real_run
    assert set(ran) == {"chain"} and len(ran) == 2 * 2 * 2          # 2 blocks x 2 prompts x the pair
    h = out["chain"]
    assert h["against"] == "chain γ=3" and h["blocks"] == 2 and list(h["pairs"]) == ["chain γ=2"]
    pairs = h["pairs"]["chain γ=2"]
    assert [len(b) for b in pairs["decode_s"]] == [2, 2] and pairs["tokens"] == pairs["ar_tokens"]


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
    from real.validation.report import verdict_section

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
    from real.validation.verdict import QUICK_TARGETS, verdict

    doc = {"profiled": {"source": variant.source}, "settings": {"repeats": 3}, "points": [],
           "verdicts": [verdict([], QUICK_TARGETS)]}
    section = "\n".join(verdict_section(doc))
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
    assert seen["section"] is not None
    settings = seen["section"].settings
    assert settings.repeats == 5 and settings.alspec_repeats == 5
    assert seen["command"] == f"hetspec validate --hetero --repeats 5 --out {tmp_path / 'r'}"
    seen.clear()
    with pytest.raises(SystemExit):
        main(["validate", "--quick", "--out", str(tmp_path / "r")])
    assert seen["settings"] is None and seen["section"] is None      # the defaults: validate's own


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


def test_validate_takes_the_smollm2_preset_and_asks_before_training_it(tmp_path, smollm2_gguf):
    """smollm2 is a validate preset; uncached, without --train and without a terminal it is one line naming the
    training command (validate does not start a half-hour training unasked)."""
    import os
    import subprocess
    import sys

    from tests.cli_runner import REPO

    env = {**os.environ, "HETSPEC_PLATFORMS_DIR": host_platform_folder(tmp_path), "HETSPEC_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "hetspec", "validate", "--quick", "--preset", "smollm2", "--out",
                           str(tmp_path / "r")], stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "hetspec train-demo --preset smollm2" in proc.stderr.strip().splitlines()[-1]


def test_a_quick_run_on_a_pretrained_target_takes_the_thinner_grid():
    from real.validation.grid import FULL_VALUES, PRETRAINED_QUICK_VALUES
    from real.validation.validate import QUICK, QUICK_PRETRAINED, grid_for, settings_for

    thin = grid_for(True, "smollm2")
    assert [p.method for p in thin].count("ar") == 1
    for method, values in PRETRAINED_QUICK_VALUES.items():
        assert tuple(p.value for p in thin if p.method == method) == values
    assert grid_for(True, "tiny") == default_grid() == grid_for(True, None)
    full = grid_for(False, "smollm2")          # a full run takes its own thinner grid, whatever the preset
    assert full == grid_for(False, "small") and len(full) < len(default_grid())
    for method, values in FULL_VALUES.items():
        assert tuple(p.value for p in full if p.method == method) == values
    assert settings_for(True, "smollm2") is QUICK_PRETRAINED and settings_for(True, "small") is QUICK
    assert QUICK_PRETRAINED.calibration_prompts < QUICK.calibration_prompts
