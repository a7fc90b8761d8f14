"""The heterogeneous section's check of the single-thread workers against their calibration."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from real.validation.hetero.worker_drift import (
    WORKER_DRIFT_WARNING,
    calibrated_step_s,
    drift_lines,
    drift_record,
    worker_step_s,
)


def test_a_worker_that_moved_is_said_at_the_top():
    moved = drift_record("cpu0", 0.020, 0.0205, 0.0234)
    assert moved["change_after"] == pytest.approx(0.17) and moved["moved"]
    text = " ".join(drift_lines(moved))
    assert "moved since the calibration" in text and "+17 %" in text and "20.00 ms" in text
    steady = drift_record("cpu0", 0.020, 0.021, 0.019)
    assert not steady["moved"]
    assert "moved since" not in " ".join(drift_lines(steady)) and "+5 %" in " ".join(drift_lines(steady))
    # at the limit itself it has not moved beyond it
    assert not drift_record("cpu0", 0.020, 0.020 * (1 + WORKER_DRIFT_WARNING), None)["moved"]


def test_nothing_to_compare_without_a_calibration():
    record = drift_record("cpu0", None, None, None)
    assert record["change_before"] is None and not record["moved"]
    assert drift_lines(record) == [] and drift_lines(None) == []


def test_the_calibrated_step_comes_from_the_raw_record(tmp_path):
    platform = tmp_path / "host.toml"
    platform.write_text("")
    assert calibrated_step_s(SimpleNamespace(path=str(platform))) is None          # no raw record
    raw = tmp_path / "host.calibration.json"
    raw.write_text(json.dumps({"one_thread": {"streaming": {"unmasked_s": 0.0199}}}))
    assert calibrated_step_s(SimpleNamespace(path=str(platform))) == pytest.approx(0.0199)
    raw.write_text(json.dumps({"one_thread": {}}))                                   # an older record
    assert calibrated_step_s(SimpleNamespace(path=str(platform))) is None
    assert calibrated_step_s(SimpleNamespace(path="")) is None


def test_the_step_is_retimed_on_a_worker(one_torch_thread):
    from real.run.worker import allowed_cores

    seconds = worker_step_s(f"cpu{allowed_cores()[0]}", llc_bytes=1, repeats=2)    # a one-layer decoder
    assert math.isfinite(seconds) and 0 < seconds < 5.0
