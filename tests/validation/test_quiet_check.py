"""``hetspec calibrate --check``: the guard probe's readings against the last calibration's, and the verdict."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest

from real.validation.machine import GUARD_LIMIT, PROBE_PEAK_LIMIT
from real.validation.quiet_check import SLOW_SHARE, QuietCheck, calibrated_reference, check_quiet, readings_in
from cli_runner import REPO, one_line_error, run_cli


class FakeTime:
    """A clock that only sleeps move."""

    def __init__(self):
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def _check(readings, reference, seconds=None, pause_s=2.0):
    it, t = iter(readings), FakeTime()
    seconds = (len(readings) - 1) * pause_s if seconds is None else seconds
    return check_quiet(seconds, 2, reference, probe=lambda: next(it), pause_s=pause_s, clock=t.clock,
                       sleep=t.sleep), t


def test_readings_come_one_every_pause_from_the_start():
    assert [readings_in(s, 2.0) for s in (0.5, 2.0, 5.9, 60.0)] == [1, 2, 3, 31]
    seen = []
    check, t = _check([100.0, 101.0, 99.0, 100.0], 100.0)
    assert check.readings == (100.0, 101.0, 99.0, 100.0) and t.now == 6.0
    assert t.slept == [0.0, 2.0, 2.0, 2.0]
    it, t = iter([1.0, 2.0]), FakeTime()
    check_quiet(2.0, 1, None, probe=lambda: next(it), clock=t.clock, sleep=t.sleep, on_reading=seen.append)
    assert seen == [1.0, 2.0]
    with pytest.raises(ValueError):
        check_quiet(0.0, 1, None, probe=lambda: 1.0)


def test_the_floor_is_the_guards_below_the_calibration_or_the_fastest_reading():
    assert GUARD_LIMIT == 0.2 and SLOW_SHARE == 0.25
    # a quarter of the readings below 80 % of the reference: a passing dip, quiet
    check, _ = _check([100.0, 79.0, 90.0, 95.0], 100.0)
    assert check.floor == pytest.approx(80.0) and check.slow == 1 and check.quiet
    assert check.lines()[-1] == "quiet: a calibration can start now"
    # more than a quarter: slowed, and the refusal names the counts and the floor
    check, _ = _check([100.0, 79.0, 78.0, 95.0], 100.0)
    assert check.slow == 2 and not check.quiet
    assert "2 of 4 guard probe readings below 80.0 GFLOP/s" in check.refusal()
    assert check.lines()[-1].startswith("slowed from outside")
    # a reading above the calibration's raises the floor, as the guard takes the larger of the two
    check, _ = _check([150.0, 100.0, 130.0, 140.0], 100.0)
    assert check.floor == pytest.approx(120.0) and check.slow == 1
    assert "above the last calibration's 100.0 GFLOP/s" in check.lines()[0]
    # a machine slowed throughout reads slowed against its calibration ...
    check, _ = _check([50.0, 52.0, 51.0], 100.0)
    assert check.slow == 3 and not check.quiet
    # ... but steady, hence quiet, without one, and the verdict says what it could not judge
    check, _ = _check([50.0, 52.0, 51.0], None)
    assert check.quiet and check.floor == pytest.approx(0.8 * 52.0)
    assert "only steadiness is judged" in check.lines()[0]


def test_a_check_with_nothing_to_compare_writes_nothing_and_exits_zero(tmp_path):
    proc = run_cli("calibrate", "--check", "1", env={"HETSPEC_PLATFORMS_DIR": str(tmp_path)}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "guard probe on" in proc.stdout and "1 readings" in proc.stdout
    assert "only steadiness is judged" in proc.stdout and "quiet: a calibration can start now" in proc.stdout
    assert "guard probe" in proc.stderr          # the progress bar
    assert list(tmp_path.iterdir()) == []


def test_cores_slower_than_the_calibration_are_refused_in_one_line(tmp_path):
    # a calibrated host whose reference probe read far more than any core here can: every reading is slowed
    shutil.copy(REPO / "hwmodels" / "presets" / "apple-m2.toml", tmp_path / "host.toml")
    reference = {f"{n} threads": {"end": {"threads": n, "gemm_gflops": 1e9}} for n in range(1, 257)}
    (tmp_path / "host.calibration.json").write_text(json.dumps({"robustness": {"reference": reference}}))
    proc = run_cli("calibrate", "--check", "2", env={"HETSPEC_PLATFORMS_DIR": str(tmp_path)}, timeout=120)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "slowed from outside" in proc.stdout and "what the last calibration's reference probe read" in proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("hetspec: error:")]
    assert len(errors) == 1 and "2 of 2 guard probe readings below 800000000.0 GFLOP/s" in errors[0]
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["host.calibration.json", "host.toml"]


@pytest.mark.parametrize("args, match", [
    (("--check", "0"), "a check lasts a positive number of seconds"),
    (("--check", "5", "--out", "x.toml"), "--check writes nothing and measures no profile: drop --out"),
    (("--check", "--quick", "--force"), "drop --quick, --force"),
    (("--check", "5", "--attempts", "2"), "drop --attempts"),
    (("--check", "5", "--device", "cuda:0"), "(--device cpu or cpuN), not cuda:0"),
    (("--check", "5", "--device", "cpu999"), "core 999 is not one this process may use"),
])
def test_bad_check_arguments_are_one_line(capsys, args, match):
    one_line_error(capsys, "calibrate", *args, match=match)


def test_the_check_is_in_the_calibrate_help():
    proc = run_cli("calibrate", "--help")
    assert "--check [SECONDS]" in proc.stdout


def test_quiet_check_is_a_dataclass_of_its_readings():
    check = QuietCheck(threads=1, readings=(10.0,), reference=None, limit=0.2)
    assert check.quiet and check.slow == 0 and "on 1 thread:" in check.lines()[0]


def _host(tmp_path, probe_gflops: dict[int, float]):
    """A calibrated host as the check reads it: the raw record beside its file, with the GEMM peaks the
    calibration measured (167 GFLOP/s on 2 threads, 100 on one) and the reference probe's end-of-run rate per
    thread count."""
    path = tmp_path / "host.toml"
    path.write_text("")
    reference = {f"{n} thr": {"end": {"threads": n, "gemm_gflops": g}} for n, g in probe_gflops.items()}
    (tmp_path / "host.calibration.json").write_text(json.dumps({
        "robustness": {"reference": reference},
        "all_threads": {"threads": 2, "peak_flops_per_s": 167e9}, "one_thread": {"threads": 1, "peak_flops_per_s": 1e11}}))
    return SimpleNamespace(path=str(path))


def test_a_reference_from_a_calibration_on_slowed_cores_is_said_to_be_lenient(tmp_path):
    assert calibrated_reference(None, 2) == (None, "")
    host = _host(tmp_path, {2: 98.8, 1: 90.0})
    # the afternoon's calibration: its probe at 59 % of its own peak, below the limit calibrate now refuses at
    reference, note = calibrated_reference(host, 2)
    assert reference == 98.8 and 98.8 < PROBE_PEAK_LIMIT * 167.0
    # worded as a validation's report words it (report.slowed_words)
    assert note == ("that calibration was itself measured on slowed cores (its reference probe's GEMM at 98.8 GFLOP/s, "
                    "59% of the 167.0 GFLOP/s peak it measured, below 65%): this check passes cores as slow as those, "
                    "until a calibration on quiet cores")
    assert calibrated_reference(host, 1) == (90.0, "")          # one thread: 90 % of its 100 GFLOP/s peak
    assert calibrated_reference(host, 4) == (None, "")          # no probe on that many threads
    check = QuietCheck(threads=2, readings=(99.0,), reference=reference, limit=GUARD_LIMIT, note=note)
    assert check.quiet and check.lines()[-1] == f"note: {note}"


def test_a_validation_says_when_its_calibration_was_measured_on_slowed_cores(tmp_path):
    """``hetspec validate`` reads the same record: the calibration's probe below the warning share of its own
    GEMM peak is carried into the report (GFLOP/s of each), a quiet one or a platform without a record is not."""
    from real.validation.machine import slowed_calibration
    from real.validation.validate import calibration_slowed

    host = _host(tmp_path, {2: 98.8, 1: 90.0})
    assert calibration_slowed(host, 2) == {"probe_gflops": 98.8, "peak_gflops": 167.0}
    assert calibration_slowed(host, 1) is None                   # 90 % of its peak
    assert calibration_slowed(SimpleNamespace(path=""), 2) is None
    assert slowed_calibration(None, 2) is None
    probe = {"robustness": {"reference": {"2 thr": {"end": {"threads": 2, "gemm_gflops": 50.0}}}}}
    assert slowed_calibration({**probe, "all_threads": {"threads": 2, "peak_flops_per_s": 1e11}}, 2) == (5e10, 1e11)
    assert slowed_calibration({**probe, "all_threads": {"threads": 2, "peak_flops_per_s": "fast"}}, 2) is None


def test_a_calibration_slowed_only_towards_its_end_is_compared_with_its_quiet_start(tmp_path):
    host = _host(tmp_path, {2: 109.1})
    record = json.loads((tmp_path / "host.calibration.json").read_text())
    record["robustness"]["reference"]["2 thr"]["start"] = {"threads": 2, "gemm_gflops": 164.5}
    (tmp_path / "host.calibration.json").write_text(json.dumps(record))
    # the 22:14 calibration of 2026-11-28: 164.5 -> 109.1 GFLOP/s; the start is 99 % of the peak, so no note
    assert calibrated_reference(host, 2) == (164.5, "")
