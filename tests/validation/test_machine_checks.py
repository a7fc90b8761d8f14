"""Robustness on a shared machine: the reference probe and the spread of a calibration's rounds
(real/validation/trust.py), a calibration refused without ``--force`` and written with it, and a
validation whose machine changed under it reported as "not a validation" with exit status 3, or stopped before
its grid when the machine had already changed.

The drift is injected: the reference probe is replaced by one that returns drifting values."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from demo_helpers import host_platform_folder
from hwmodels.errors import EXIT_UNTRUSTED
from hwmodels.loader import load_platform_file
from real.validation import trust as machine
from real.validation.trust import (
    PROBE_MOVE_LIMIT,
    SPREAD_LIMIT,
    MachineChanged,
    calibration_problems,
    probe_moves,
    spread,
    validation_verdict,
)

#: The smallest calibration that runs every benchmark: one token count, one shape, one repeat, two rounds.
TINY = dict(m_values=(1,), shapes=((64, 64),), repeats=1, warmup=1, dram_working_set_bytes=16 * 2**20,
            cold_pool_bytes=16 * 2**20, overhead_repeats=1, loop_repeats=1, loop_new_tokens=24, label="test", rounds=2,
            batched_m_values=(1,), batched_shapes=((64, 256),))


def _probe(op_us: float, triad_gbps: float = 20.0, threads: int = 1) -> dict:
    return {"threads": threads, "op_us": op_us, "triad_gbps": triad_gbps, "triad_bytes": 16 * 2**20, "seconds": 0.0}


class DriftingProbe:
    """A reference probe whose fixed cost per operator doubles at every call (the machine slows down)."""

    def __init__(self, op_us: float = 10.0, factor: float = 2.0):
        self.op_us, self.factor, self.calls = op_us, factor, 0

    def __call__(self, threads: int, triad_bytes: int) -> dict:
        self.calls += 1
        self.op_us *= self.factor
        return _probe(self.op_us, threads=threads)


# ---------------------------------------------------------------------------- the checks
def test_spread_and_probe_moves():
    assert spread([10.0, 12.0, 11.0]) == pytest.approx(0.2)
    assert spread([5.0]) == 0.0 and math.isinf(spread([0.0, 1.0]))
    assert probe_moves(_probe(10.0), _probe(10.0 * (1 + PROBE_MOVE_LIMIT / 2)), PROBE_MOVE_LIMIT, "x") == []
    moved = probe_moves(_probe(10.0, 20.0), _probe(18.0, 5.0), PROBE_MOVE_LIMIT, "from start to end")
    assert moved == ["fixed cost per operator 10.0 us -> 18.0 us (+80 %) from start to end",
                     "DRAM triad bandwidth 20.0 GB/s -> 5.0 GB/s (-75 %) from start to end"]
    rob = {"rounds": 3, "reference": {"2 threads (cpu)": {"start": _probe(10.0), "end": _probe(10.5)}},
           "spread": {"2 threads (cpu)": {"op_overhead": 0.05, "triad_dram": SPREAD_LIMIT + 0.2}}}
    assert calibration_problems(rob) == [
        f"2 threads (cpu): DRAM triad bandwidth spread {100 * SPREAD_LIMIT + 20:.0f} % over 3 rounds "
        f"(limit {100 * SPREAD_LIMIT:.0f} %)"]
    rob["spread"]["2 threads (cpu)"]["triad_dram"] = 0.1
    assert calibration_problems(rob) == []


# ---------------------------------------------------------------------------- calibrate
@pytest.fixture(scope="module")
def forced(tmp_path_factory):
    """A tiny calibration measured while the injected reference probe drifts, written with ``force``."""
    from real.validation.calibration import calibrate as cal_mod
    from real.validation.calibration.host_facts import Settings

    probe = DriftingProbe()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cal_mod, "reference_probe", probe)
        out = tmp_path_factory.mktemp("forced") / "host.toml"
        platform, path, cal = cal_mod.calibrate(out, progress=False, settings=Settings(**TINY), force=True,
                                                attempts=1)
    return platform, path, cal, probe


def test_a_forced_calibration_is_written_with_its_warning(forced):
    platform, path, cal, probe = forced
    threads = cal.runtime["torch_threads"]
    assert probe.calls == 2 * (2 if threads > 1 else 1)        # start and end, per thread count
    rob = cal.robustness
    assert rob["trusted"] is False and rob["attempts"] == 1 and rob["rounds"] == 2
    assert any("fixed cost per operator" in p and "from start to end" in p for p in rob["problems"])
    assert set(rob["spread"]) == set(rob["reference"])
    for spreads in rob["spread"].values():
        assert set(spreads) == set(machine.SPREAD_KEYS) and all(v >= 0 for v in spreads.values())
    loaded = load_platform_file(path)
    assert "WARNING: written with --force" in loaded.description and "from start to end" in loaded.description
    assert loaded.description.count(" from start to end") + loaded.description.count(" over 2 rounds") == \
        min(3, len(rob["problems"]))                         # the first three; the raw measurements hold them all
    assert all("WARNING: written with --force" in d.description for d in loaded.devices.values())
    assert "OMP_WAIT_POLICY" in loaded.device("cpu").sources["cores"]
    assert "interleaved rounds" in loaded.device("cpu").sources["mem_bw_gbps"]
    raw = json.loads(path.with_name("host.calibration.json").read_text())
    assert raw["robustness"]["trusted"] is False and raw["robustness"]["warning"].startswith("WARNING")
    assert raw["runtime"]["torch_threads"] == threads and "omp_wait_policy" in raw["runtime"]
    assert raw["all_threads"]["spread"] == rob["spread"][next(iter(rob["spread"]))]


def test_calibrate_refuses_a_machine_that_changed_under_it(forced, tmp_path, monkeypatch):
    from real.validation.calibration import calibrate as cal_mod

    _, _, cal, _ = forced
    measured = []
    monkeypatch.setattr(cal_mod, "measure", lambda *a, **k: measured.append(1) or cal)
    out = tmp_path / "host.toml"
    with pytest.raises(MachineChanged) as err:
        cal_mod.calibrate(out, progress=False, attempts=2)
    assert len(measured) == 2                                      # measured again before refusing
    text = str(err.value)
    assert text.startswith("calibration not written: the machine changed under it in 2 attempts (")
    assert "fixed cost per operator" in text and "%" in text and "--force" in text and "\n" not in text
    assert err.value.exit_code == EXIT_UNTRUSTED
    assert not out.exists() and not out.with_name("host.calibration.json").exists()


def test_a_steady_calibration_is_written_at_the_first_attempt(forced, tmp_path, monkeypatch):
    from real.validation.calibration import calibrate as cal_mod

    _, _, cal, _ = forced
    steady = {label: {"start": _probe(10.0), "end": _probe(10.1)} for label in cal.robustness["reference"]}
    calm = replace(cal, robustness={**cal.robustness, "reference": steady,
                                    "spread": {k: {s: 0.01 for s in v} for k, v in cal.robustness["spread"].items()}})
    measured = []
    monkeypatch.setattr(cal_mod, "measure", lambda *a, **k: measured.append(1) or calm)
    platform, path, written = cal_mod.calibrate(tmp_path / "host.toml", progress=False)
    assert len(measured) == 1 and written.robustness["trusted"] is True and written.robustness["problems"] == []
    assert "WARNING" not in load_platform_file(path).description


def test_calibrate_cli_exit_status_without_and_with_force(forced, tmp_path, monkeypatch, capsys):
    from hetspec.cli import main
    from real.validation.calibration import calibrate as cal_mod

    _, _, cal, _ = forced
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")           # main() would set it for the process
    monkeypatch.setattr(cal_mod, "measure", lambda *a, **k: cal)
    # the operator profile written beside a calibration is timed for real in test_calibrate_cli_quick_writes_host
    monkeypatch.setattr("real.validation.calibration.cpu_profiles.profile_cpu_beside", lambda *a, **k: ["(profile beside)"])
    out = tmp_path / "host.toml"
    assert main(["calibrate", "--quick", "--out", str(out), "--attempts", "1"]) == EXIT_UNTRUSTED == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith("hetspec: error: calibration not written: the machine changed under it")
    assert len(err.splitlines()) == 1 and not out.exists()
    assert main(["calibrate", "--quick", "--out", str(out), "--attempts", "1", "--force"]) == 0
    printed = capsys.readouterr().out
    assert "WARNING: written with --force" in printed and f"wrote {out}" in printed
    assert "WARNING: written with --force" in load_platform_file(out).description


def test_cores_that_stay_slowed_stop_the_profile_beside_a_calibration_unless_forced(forced, tmp_path, monkeypatch,
                                                                                     capsys):
    from hetspec.cli import main
    from real.run.contention import ContendedTooLong
    from real.validation.calibration import calibrate as cal_mod

    _, _, cal, _ = forced
    steady = {label: {"start": _probe(10.0), "end": _probe(10.1)} for label in cal.robustness["reference"]}
    calm = replace(cal, robustness={**cal.robustness, "reference": steady,
                                    "spread": {k: {s: 0.01 for s in v} for k, v in cal.robustness["spread"].items()}})
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setattr(cal_mod, "measure", lambda *a, **k: calm)
    forces = []

    def profile(path, quick, one_thread=False, force=False, progress=True):    # the guard's verdict, injected
        forces.append(force)
        if not force:
            raise ContendedTooLong("the cores read slowed from outside for 15 min without a break (...): run it "
                                   "again once `hetspec calibrate --check` reads the cores quiet")
        return ["(profile beside)"]

    monkeypatch.setattr("real.validation.calibration.cpu_profiles.profile_cpu_beside", profile)
    out = tmp_path / "host.toml"
    assert main(["calibrate", "--quick", "--out", str(out), "--attempts", "1"]) == EXIT_UNTRUSTED
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"hetspec: error: {out} written, an operator profile beside")
    assert err.endswith("once `hetspec calibrate --check` reads the cores quiet, or pass --force to measure through it")
    assert main(["calibrate", "--quick", "--out", str(out), "--attempts", "1", "--force"]) == 0
    assert forces == [False, True] and "(profile beside)" in capsys.readouterr().out


def test_a_forced_profile_guard_waits_for_ever_and_an_unforced_one_for_a_quarter_hour(monkeypatch):
    from real.validation.calibration import cpu_profiles

    monkeypatch.setattr(machine, "gemm_rate", lambda threads, samples=5: 1e11)
    assert cpu_profiles.cpu_profile_guard("cpu0").give_up_s == machine.GUARD_GIVE_UP_S == 900.0
    assert cpu_profiles.cpu_profile_guard("cpu0", force=True).give_up_s is None


# ---------------------------------------------------------------------------- validate
def _drift(now_us: float, then_us: float = 8.0, triad: float = 20.0, then_triad: float = 20.0) -> dict:
    return {"now_us": now_us, "calibrated_us": then_us, "change": now_us / then_us - 1, "triad_now_gbps": triad,
            "triad_calibrated_gbps": then_triad, "triad_change": triad / then_triad - 1, "warning": 0.15,
            "limit": machine.CALIBRATION_CHANGE_LIMIT, "probe": _probe(now_us, triad), "omp_wait_policy": "OMP_WAIT_POLICY=PASSIVE, GOMP_SPINCOUNT=10000"}


def _point(step_error: float) -> dict:
    return {"label": "chain γ=2", "step_error_signed": step_error, "tps_error_signed": -step_error / 2}


def test_validation_verdict():
    ok = validation_verdict(_drift(8.4), _drift(8.8), [_point(0.05)])
    assert ok["trusted"] and ok["headline"] is None and ok["reasons"] == []
    moved = validation_verdict(_drift(8.0), _drift(24.0), [_point(3.1)])
    assert not moved["trusted"]
    assert moved["headline"].startswith("not a validation: the machine changed (fixed cost per operator +200 % vs "
                                        "calibration after the grid")
    assert "during the grid" in moved["headline"] and "errors over 100 % (chain γ=2 step +310 %)" in moved["headline"]
    wild = validation_verdict(_drift(8.0), _drift(8.2), [_point(-0.2)], [{"model": "r", "tokens": 4,
                                                                         "error_signed": 1.5}])
    assert not wild["trusted"] and wild["headline"].startswith("not a validation: errors over 100 % (r q=4 step")
    unprobed = validation_verdict(None, None, [_point(-0.6)], [{"model": "r", "tokens": 1, "error_signed": -0.95}])
    assert unprobed["trusted"]                     # no probe: only the errors decide
    wild_gpu = validation_verdict(None, None, [_point(1.5)])
    assert not wild_gpu["trusted"] and "held within" not in wild_gpu["headline"]
    assert wild_gpu["headline"] == ("not a validation: errors over 100 % (chain γ=2 step +150 %), and no reference "
                                    "probe re-timed the machine (the platform describes no host CPU)")




@pytest.mark.slow
def test_validate_on_a_changed_machine_is_not_a_validation(tiny_demo, tmp_path, monkeypatch, capsys):
    """``hetspec validate`` (in process, a three-point grid on the tiny models) while the reference probe
    says the machine slowed down during the grid: headline, labelled tables, exit status 3."""
    from hetspec.cli import main
    from real.validation import grid as grid_mod
    from real.validation import validate as val_mod
    from real.validation.grid import GridPoint

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", host_platform_folder(tmp_path))
    small = replace(val_mod.QUICK, calibration_prompts=3, eval_prompts=1, prompt_tokens=16, max_new_tokens=12,
                    repeats=1, random_models=())
    monkeypatch.setattr(val_mod, "settings_for", lambda quick: small)
    monkeypatch.setattr(grid_mod, "default_grid", lambda: (GridPoint("ar"), GridPoint("chain", 2)))
    readings = iter([8.0, 24.0])           # before the grid as calibrated, after it three times slower
    monkeypatch.setattr(machine, "reference_probe", lambda threads, nbytes: _probe(next(readings), 20.0, threads))
    # and the calibration itself measured on slowed cores (as machine.slowed_calibration reads its record)
    slowed = {"probe_gflops": 80.3, "peak_gflops": 155.4}
    monkeypatch.setattr(val_mod, "calibration_slowed", lambda host, threads: slowed)
    out = tmp_path / "report"
    assert main(["validate", "--quick", "--preset", "tiny", "--out", str(out)]) == EXIT_UNTRUSTED
    captured = capsys.readouterr()
    printed = captured.out
    assert ("warning: the calibration was measured on slowed cores (its reference probe's GEMM at 80.3 GFLOP/s, 52% "
            "of the 155.4 GFLOP/s peak it measured, below 65%)") in captured.err
    assert "not a validation: the machine changed (fixed cost per operator +200 % vs calibration after the grid" \
        in printed
    assert "step error" not in printed                     # no per-method results printed
    report = (out / "report.md").read_text()
    assert "**Not a validation: the machine changed (" in report
    assert "## Acceptance check — not a validation" in report
    assert "## Every configuration — not a validation" in report
    assert "not judged" in report and "Where the model misses" not in report
    assert "\n- Calibration: the calibration was measured on slowed cores (its reference probe's GEMM at 80.3 " \
        in report
    saved = json.loads((out / "results.json").read_text())
    assert saved["trust"]["trusted"] is False and saved["drift_after"]["now_us"] == 24.0
    assert saved["calibration_slowed"] == slowed
    readings = iter([8.0, 24.0])
    monkeypatch.setattr(machine, "reference_probe", lambda threads, nbytes: _probe(next(readings), 20.0, threads))
    assert main(["validate", "--quick", "--preset", "tiny", "--out", str(out), "--json"]) == EXIT_UNTRUSTED
    check = json.loads(capsys.readouterr().out)
    assert check["trusted"] is False and check["all_pass"] is False and check["headline"].startswith("not a valid")


def test_a_machine_changed_before_the_grid_stops_the_validation_there(tmp_path, monkeypatch, capsys):
    """The reference probe before the grid already three times the calibration's fixed cost: ``hetspec validate``
    stops with one line and exit status 3, before the models are loaded, and writes nothing; ``--force``, or a
    probe within the limit, goes on to the grid (here into a stand-in for the models, which stops it)."""
    from hetspec.cli import main
    from hwmodels.errors import UntrustedMeasurement
    from real.run import session

    loaded = []

    def stand_in(*args, **kwargs):
        loaded.append(1)
        raise UntrustedMeasurement("stand-in for the models")

    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", host_platform_folder(tmp_path))
    monkeypatch.setattr(session, "load_models", stand_in)
    monkeypatch.setattr(machine, "BEFORE_GRID_PAUSE_S", 0.0)
    readings = []
    monkeypatch.setattr(machine, "reference_probe", lambda threads, nbytes: readings.append(1) or _probe(24.0, 20.0,
                                                                                                         threads))
    out = tmp_path / "report"
    assert main(["validate", "--quick", "--preset", "tiny", "--out", str(out)]) == EXIT_UNTRUSTED
    err = capsys.readouterr().err.strip().splitlines()
    assert len(readings) == machine.BEFORE_GRID_READINGS == 3       # read again twice before it stops
    assert [line for line in err if "read again" in line] == [
        "reference probe before the grid: fixed cost per operator +200 % vs calibration before the grid: read again "
        "in 0 s"] * 2
    assert err[-1] == ("hetspec: error: not a validation: the machine changed since the calibration (fixed cost per "
                       "operator +200 % vs calibration before the grid), so the grid was not run: recalibrate "
                       "(`hetspec calibrate`) with the machine quiet and run it again; or pass --force to run the grid "
                       "anyway (its report then says it is not a validation)")
    assert "reference probe before the grid: fixed cost per operator 24.00 us vs 8.00 us" in err[-2]
    assert not out.exists() and not loaded
    assert main(["validate", "--quick", "--preset", "tiny", "--out", str(out), "--force"]) == EXIT_UNTRUSTED
    assert loaded == [1] and "stand-in for the models" in capsys.readouterr().err
    monkeypatch.setattr(machine, "reference_probe", lambda threads, nbytes: _probe(12.0, 20.0, threads))   # +50 %
    assert main(["validate", "--quick", "--preset", "tiny", "--out", str(out)]) == EXIT_UNTRUSTED
    assert loaded == [1, 1] and "stand-in for the models" in capsys.readouterr().err


def test_the_probe_before_the_grid_is_taken_with_the_cores_quiet(monkeypatch):
    """With the grid's contention guard, the reference probe before the grid is retaken while the guard's probe
    after it reads the cores slowed: the passing slowdown does not stand as the machine's state, and does not
    stop the validation; the slowed reading alone would have (one line, exit status 3)."""
    from types import SimpleNamespace

    from real.run.contention import Guard

    dev = SimpleNamespace(bare_cache_overhead_s=8e-6, mem_bw_gbps=20.0)
    probes = iter([30.0, 8.4])
    monkeypatch.setattr(machine, "reference_probe", lambda threads, nbytes: _probe(next(probes), 20.0, threads))
    guard_readings = iter([1.0, 0.5, 1.0, 1.0])   # quiet; slowed after the first probe; quiet, quiet after the retake
    guard = Guard(probe=lambda: next(guard_readings), reference=1.0, pause_s=0.001)
    drift = machine.settled_drift(dev, 2, 16 * 2**20, None, guard)
    assert drift["now_us"] == 8.4 and drift["settled"] == {"waited_s": 0.0, "retakes": 1, "contended": False}
    machine.refuse_changed_before_grid(drift)                  # within the limit: no refusal
    from real.validation.report import machine_state

    state = machine_state({"drift": drift, "drift_after": None})
    assert "before the grid: fixed cost per operator 8.40 us vs 8.00 us at calibration (+5.0 %), DRAM triad 20.0 vs " \
           "20.0 GB/s (+0.0 %) (taken once the contention guard's probe read the cores quiet: 0 s waited, 1 retaken)" \
           in state
    machine.refuse_changed_before_grid(None)                   # no probe (a GPU run without a host CPU)
    probes = iter([30.0])
    unguarded = machine.settled_drift(dev, 2, 16 * 2**20, None)
    assert unguarded["now_us"] == 30.0 and "settled" not in unguarded
    with pytest.raises(machine.ChangedBeforeGrid) as err:
        machine.refuse_changed_before_grid(unguarded)
    assert err.value.exit_code == EXIT_UNTRUSTED and "\n" not in str(err.value)
    assert "(fixed cost per operator +275 % vs calibration before the grid)" in str(err.value)


def test_a_probe_before_the_grid_that_moved_is_read_again_before_it_stops_the_validation(monkeypatch):
    """The reference probe before the grid reading the machine changed since the calibration is read again, up to
    three readings ``pause_s`` apart: a passing disturbance of one reading (the 2026-11-29 case: +66 %, then +9 %)
    does not stop the validation and the report says what the earlier reading read; a change in every reading
    still stops it, judged on the last."""
    from types import SimpleNamespace

    from real.validation.report import machine_state

    dev = SimpleNamespace(bare_cache_overhead_s=8e-6, mem_bw_gbps=20.0)
    probes = iter([13.28, 8.72])                  # +66 %, then +9 %
    monkeypatch.setattr(machine, "reference_probe", lambda threads, nbytes: _probe(next(probes), 20.0, threads))
    told = []
    drift = machine.drift_before_grid(dev, 2, 16 * 2**20, None, on_moved=lambda *a: told.append(a), pause_s=0.0)
    assert drift["now_us"] == 8.72 and drift["earlier"] == ["fixed cost per operator +66 % vs calibration before "
                                                            "the grid"]
    assert told == [(drift["earlier"][0], 0.0)]
    machine.refuse_changed_before_grid(drift)     # the last reading is within the limit: no refusal
    state = machine_state({"drift": drift, "drift_after": None})
    assert "before the grid: fixed cost per operator 8.72 us vs 8.00 us at calibration (+9.0 %), DRAM triad 20.0 vs " \
           "20.0 GB/s (+0.0 %) (read 2 times, the earlier reading moved: fixed cost per operator +66 % vs " \
           "calibration before the grid)" in state
    probes = iter([24.0, 16.0, 12.0, 8.0])        # +200 %, +100 %, then +50 % at the third reading
    drift = machine.drift_before_grid(dev, 2, 16 * 2**20, None, pause_s=0.0)
    assert drift["now_us"] == 12.0 and len(drift["earlier"]) == 2 and next(probes) == 8.0
    probes = iter([24.0, 16.0, 13.6, 8.0])        # +200 %, +100 %, +70 %: the third reading still moved
    drift = machine.drift_before_grid(dev, 2, 16 * 2**20, None, pause_s=0.0)
    assert drift["now_us"] == 13.6 and drift["earlier"] == [
        "fixed cost per operator +200 % vs calibration before the grid",
        "fixed cost per operator +100 % vs calibration before the grid"] and next(probes) == 8.0
    with pytest.raises(machine.ChangedBeforeGrid) as err:
        machine.refuse_changed_before_grid(drift)
    assert "(fixed cost per operator +70 % vs calibration before the grid)" in str(err.value)
    assert "read 3 times, the earlier readings moved: fixed cost per operator +200 % vs calibration before the " \
           "grid; then fixed cost per operator +100 %" in machine_state({"drift": drift, "drift_after": None})
    probes = iter([8.0, 24.0])                    # a first reading within the limit is not read again
    drift = machine.drift_before_grid(dev, 2, 16 * 2**20, None, pause_s=0.0)
    assert drift["now_us"] == 8.0 and "earlier" not in drift and next(probes) == 24.0


def test_the_probes_fixed_cost_is_the_median_of_its_readings(monkeypatch):
    """The reference probe reads the fixed cost per operator as a full calibration does, the median of
    several readings of the overhead probe: one slow reading among them does not move it."""
    from types import SimpleNamespace

    from real.validation.calibration import microbench

    readings = iter([10e-6, 30e-6, 12e-6])
    calls = []

    def overhead(threads, repeats, warmup):
        calls.append((threads, repeats))
        return SimpleNamespace(per_op_s=next(readings))

    monkeypatch.setattr(microbench, "layer_overhead", overhead)
    monkeypatch.setattr(microbench, "stream_bandwidth", lambda nbytes, threads, repeats, warmup: 20e9)
    monkeypatch.setattr(machine, "gemm_rate", lambda threads: 100e9)
    probe = machine.reference_probe(2, 16 * 2**20)
    assert machine.PROBE_READINGS == 3 and calls == [(2, machine.PROBE_REPEATS)] * 3
    assert probe["op_us"] == 12.0 and probe["triad_gbps"] == 20.0 and probe["gemm_gflops"] == 100.0


def test_the_probe_after_the_grid_waits_for_quiet_but_never_gives_up(monkeypatch):
    """After the grid the reference probe is taken as before it: retaken while the guard's probe reads the cores
    slowed, and the report says so. A machine slowed for longer than the guard gives up after stops the command
    before the grid; after it, the probe is kept, marked still slowed, so the grid it judges is not thrown away."""
    from types import SimpleNamespace

    from real.run.contention import ContendedTooLong, Guard, Stretch
    from real.validation.report import machine_state

    dev = SimpleNamespace(bare_cache_overhead_s=8e-6, mem_bw_gbps=20.0)
    monkeypatch.setattr(machine, "reference_probe", lambda threads, nbytes: _probe(8.4, 20.0, threads))
    ticks = iter(range(1000))
    slowed = Guard(probe=lambda: 0.5, reference=1.0, pause_s=0.001, max_wait_s=0.002, give_up_s=5.0,
                   stretch=Stretch(clock=lambda: float(next(ticks))))   # a reading a second, every one slowed
    with pytest.raises(ContendedTooLong):
        machine.settled_drift(dev, 2, 16 * 2**20, None, slowed)
    after = machine.drift_after_grid(dev, 2, 16 * 2**20, None, slowed)
    assert after["now_us"] == 8.4
    assert after["settled"] == {"waited_s": 0.008, "retakes": 3, "contended": True}   # 4 takes, 2 pauses each
    assert slowed.give_up_s == 5.0                               # the guard of the runs is left as it was
    before = {**_drift(8.0), "settled": {"waited_s": 12.0, "retakes": 1, "contended": False}}
    state = machine_state({"drift": before, "drift_after": after})
    assert "before the grid: fixed cost per operator 8.00 us vs 8.00 us at calibration (+0.0 %), DRAM triad 20.0 " \
           "vs 20.0 GB/s (+0.0 %) (taken once the contention guard's probe read the cores quiet: 12 s waited, " \
           "1 retaken); after it: fixed cost per operator 8.40 us vs 8.00 us at calibration (+5.0 %), DRAM triad " \
           "20.0 vs 20.0 GB/s (+0.0 %) (taken once the contention guard's probe read the cores quiet: 0 s waited, " \
           "3 retaken, the last still slowed)" in state
    quiet = machine.drift_after_grid(dev, 2, 16 * 2**20, None)         # no guard (runs not guarded): once
    assert quiet["now_us"] == 8.4 and "settled" not in quiet


def test_the_gemm_rate_is_part_of_the_probe_and_the_verdict(monkeypatch):
    """A compute-bound GEMM's rate moves on its own on a shared virtual machine: the probe carries it, a
    move of it is reported like the others, a probe recorded before it existed is compared without it,
    and the calibration's rate is read from its raw record."""
    with_gemm = lambda gflops: {**_probe(10.0), "gemm_gflops": gflops}   # noqa: E731
    assert probe_moves(with_gemm(200.0), with_gemm(60.0), PROBE_MOVE_LIMIT, "during the grid") == [
        "GEMM rate 200.0 GFLOP/s -> 60.0 GFLOP/s (-70 %) during the grid"]
    assert probe_moves(_probe(10.0), with_gemm(60.0), PROBE_MOVE_LIMIT, "during the grid") == []
    slow = {**_drift(8.0), "gemm_now_gflops": 50.0, "gemm_calibrated_gflops": 200.0, "gemm_change": -0.75}
    verdict = validation_verdict(slow, None, [_point(0.05)])
    assert not verdict["trusted"] and "GEMM rate -75 % vs calibration before the grid" in verdict["headline"]
    from real.validation.calibration import host_facts

    record = {"robustness": {"reference": {"1 thread": {"start": {"threads": 1}, "end": {"threads": 1, "gemm_gflops": 90.0}},
                                           "2 threads": {"end": {"threads": 2, "gemm_gflops": 170.0}}}}}
    monkeypatch.setattr(host_facts, "raw_record", lambda platform: record)
    assert machine.calibrated_gemm_gflops(None, 2) == 170.0 and machine.calibrated_gemm_gflops(None, 4) is None
    # cores slowed towards the calibration's end: the guards compare with its faster, earlier probe
    record["robustness"]["reference"]["2 threads"]["start"] = {"threads": 2, "gemm_gflops": 165.0}
    record["robustness"]["reference"]["2 threads"]["end"]["gemm_gflops"] = 109.0
    assert machine.calibrated_gemm_gflops(None, 2) == 165.0
    assert machine.gemm_probe_rates(record["robustness"]) == {1: ("1 thread", 90.0), 2: ("2 threads", 109.0)}
    monkeypatch.setattr(host_facts, "raw_record", lambda platform: {})
    assert machine.calibrated_gemm_gflops(None, 2) is None


def _cal_with_probes(peak_all: float, peak_one: float, end_all: float, end_one: float):
    """A calibration's fields that the probe-against-peak check reads: the peaks (FLOP/s) and the probes' end GEMM
    rates (GFLOP/s)."""
    from types import SimpleNamespace

    def threads(n, peak):
        return SimpleNamespace(threads=n, peak_flops_per_s=peak, cache_bw_bytes_per_s=1.0,
                               overhead=SimpleNamespace(per_op_s=1e-5))

    reference = {"2 threads (cpu)": {"start": {"threads": 2}, "end": {"threads": 2, "gemm_gflops": end_all}},
                 "1 thread (cpu0)": {"start": {"threads": 1}, "end": {"threads": 1, "gemm_gflops": end_one}}}
    return SimpleNamespace(all_threads=threads(2, peak_all), one_thread=threads(1, peak_one),
                           robustness={"reference": reference})


def _slowed(cal) -> list[str]:
    from real.validation.calibration.calibrate import gemm_peaks

    return calibration_problems(cal.robustness, gemm_peaks(cal))


def test_a_probe_far_below_the_calibrations_own_peak_is_a_problem_of_the_calibration():
    from real.validation.calibration.calibrate import busy_warnings

    # the afternoon of 2026-11-28: 98.8 of 167.0 GFLOP/s with 2 threads; the single thread's probe at 0.83
    slowed = _cal_with_probes(167.0e9, 103.7e9, 98.8, 85.7)
    assert _slowed(slowed) == ["2 threads (cpu): the reference probe's GEMM read 98.8 GFLOP/s at the end, 59 % of "
                               "the 167.0 GFLOP/s peak measured (limit 65 %): the cores slowed from outside throughout"]
    assert busy_warnings(slowed) == []                        # a problem now, not also a warning
    assert calibration_problems(slowed.robustness) == []      # without the peaks it is not judged
    # a quiet machine's probe sits near the peak (0.74-0.97): no problem; the limit itself is not below it
    assert _slowed(_cal_with_probes(238.9e9, 120.0e9, 176.8, 100.0)) == []
    assert _slowed(_cal_with_probes(100e9, 100e9, 100 * machine.PROBE_PEAK_LIMIT, 100.0)) == []
    # each thread count against its own peak
    assert [p.split(":")[0] for p in _slowed(_cal_with_probes(200e9, 100e9, 180.0, 50.0))] == ["1 thread (cpu0)"]


def test_calibrate_measures_again_and_refuses_cores_slowed_throughout(forced, tmp_path, monkeypatch):
    """Cores slowed evenly from start to end pass the start-to-end and spread checks; the probe far below the
    calibration's own GEMM peak refuses it all the same, after measuring again, unless --force."""
    from real.validation.calibration import calibrate as cal_mod

    _, _, cal, _ = forced
    peaks = cal_mod.gemm_peaks(cal)

    def steady(share: float):
        """``cal`` with a probe that held still, at ``share`` of the GEMM peak on each thread count."""
        def probe(op_us: float, threads: int) -> dict:
            return {**_probe(op_us, threads=threads), "gemm_gflops": share * peaks[threads] / 1e9}

        reference = {label: {"start": probe(10.0, p["start"]["threads"]), "end": probe(10.1, p["start"]["threads"])}
                     for label, p in cal.robustness["reference"].items()}
        spreads = {k: {s: 0.01 for s in v} for k, v in cal.robustness["spread"].items()}
        return replace(cal, robustness={**cal.robustness, "reference": reference, "spread": spreads})

    measured = []
    monkeypatch.setattr(cal_mod, "measure", lambda *a, **k: measured.append(1) or steady(0.5))
    out = tmp_path / "host.toml"
    with pytest.raises(MachineChanged) as err:
        cal_mod.calibrate(out, progress=False, attempts=2)
    assert len(measured) == 2 and not out.exists()             # measured again before refusing
    text = str(err.value)
    assert "GFLOP/s at the end, 50 % of the" in text and "slowed from outside throughout" in text
    assert "\n" not in text and err.value.exit_code == EXIT_UNTRUSTED
    _, path, written = cal_mod.calibrate(out, progress=False, attempts=1, force=True)
    assert written.robustness["trusted"] is False and "slowed from outside throughout" in written.robustness["warning"]
    assert "WARNING: written with --force" in load_platform_file(path).description
    monkeypatch.setattr(cal_mod, "measure", lambda *a, **k: steady(0.9))
    _, _, written = cal_mod.calibrate(tmp_path / "quiet.toml", progress=False, attempts=1)
    assert written.robustness["trusted"] is True and written.robustness["problems"] == []
