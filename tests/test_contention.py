"""The contention guard: a measurement taken while the cores read slow is retaken; only the probe decides."""

from __future__ import annotations

import os

import pytest

from real.run.contention import Guard, guard_line, guard_summary, guarded
from real.run.repeats import interleaved_repeats


def scripted(readings):
    """A probe that reads ``readings`` (FLOP/s) in order, then the last one forever."""
    readings = list(readings)

    def probe():
        return readings.pop(0) if len(readings) > 1 else readings[0]
    return probe


def guard_of(readings, **kw) -> Guard:
    return Guard(probe=scripted(readings), reference=100.0, **{"limit": 0.2, "pause_s": 5.0, "max_wait_s": 20.0,
                                                                  "retakes": 2, **kw})


class Measure:
    """Counts its calls and the warm-up flags it was given."""

    def __init__(self):
        self.firsts = []

    def __call__(self, first: bool):
        self.firsts.append(first)
        return len(self.firsts)


def test_a_quiet_machine_measures_once_and_waits_for_nothing():
    m, sleeps = Measure(), []
    result, rec = guarded(guard_of([95, 90]), m, 3, 1, True, sleep=sleeps.append)
    assert result == 1 and m.firsts == [True] and sleeps == []
    assert (rec.item, rec.repeat, rec.retakes, rec.waited_s, rec.contended) == (3, 1, 0, 0.0, False)
    assert rec.rates == [0.95, 0.9]


def test_a_slow_probe_after_the_run_retakes_it_without_a_second_warm_up():
    m, sleeps = Measure(), []
    # before: quiet; after: slow (discard); before the retake: still slow, then quiet; after: quiet
    result, rec = guarded(guard_of([100, 70, 75, 85, 90]), m, 0, 0, True, sleep=sleeps.append)
    assert result == 2 and m.firsts == [True, False]
    assert rec.retakes == 1 and not rec.contended and sleeps == [5.0] and rec.waited_s == 5.0
    assert rec.rates == [1.0, 0.7, 0.75, 0.85, 0.9]


def test_a_slow_probe_before_the_run_holds_it_back_until_the_wait_is_spent():
    m, sleeps = Measure(), []
    result, rec = guarded(guard_of([60] * 10, max_wait_s=12.0, retakes=0), m, 0, 0, True, sleep=sleeps.append)
    assert sleeps == [5.0, 5.0]                        # a third pause would pass 12 s
    assert result == 1 and rec.contended and rec.retakes == 0


def test_retakes_are_bounded_and_the_last_run_is_kept_marked_contended():
    m = Measure()
    result, rec = guarded(guard_of([100, 50, 100, 50, 100, 50]), m, 0, 0, False, sleep=lambda s: None)
    assert result == 3 and m.firsts == [False, False, False]
    assert rec.retakes == 2 and rec.contended


def test_the_floor_is_the_limit_below_the_reference():
    m = Measure()
    _, rec = guarded(guard_of([80, 80]), m, 0, 0, True, sleep=lambda s: None)    # exactly at the floor: quiet
    assert rec.retakes == 0 and not rec.contended
    _, rec = guarded(guard_of([80, 79.9, 80, 80]), m, 0, 0, True, sleep=lambda s: None)
    assert rec.retakes == 1


def test_without_a_guard_the_measurement_runs_once_unbracketed():
    m = Measure()
    assert guarded(None, m, 0, 0, True) == (1, None) and m.firsts == [True]
    assert guard_summary(None, []) is None and guard_line(None) == ""


@pytest.mark.parametrize("field, value", [("reference", 0.0), ("limit", 1.0), ("limit", 0.0), ("pause_s", -1.0),
                                          ("retakes", -1)])
def test_invalid_guard_settings_are_refused(field, value):
    with pytest.raises(ValueError, match="contention guard"):
        Guard(**{"probe": lambda: 1.0, "reference": 1.0, field: value})


def test_the_summary_counts_what_the_guard_did():
    g = guard_of([100], source="timed here")
    records = [guarded(guard_of(r), Measure(), i, 0, True, sleep=lambda s: None)[1]
               for i, r in enumerate(([100, 100], [100, 60, 60, 100, 100], [100, 50, 50, 50, 50, 50, 50, 50]))]
    s = guard_summary(g, records + [None])
    assert (s["measurements"], s["retaken"], s["retakes"], s["kept_contended"]) == (3, 2, 3, 1)
    assert s["lowest_probe"] == 0.5 and s["reference_gflops"] == 0.0 and s["source"] == "timed here"
    assert [r["item"] for r in s["records"]] == [1, 2]         # only the measurements it touched
    line = guard_line(s)
    assert "2 of 3 measurements retaken (3 discarded)" in line and "lowest probe 50% of the reference" in line
    assert "1 kept although the probe still read slow" in line and "timed here" in line


def test_a_quiet_summary_says_none_was_retaken():
    records = [guarded(guard_of([100]), Measure(), i, 0, True)[1] for i in range(4)]
    assert guard_line(guard_summary(guard_of([100]), records)).endswith(
        "all 4 measurements taken with the probe above the floor, none retaken.")


# ---------------------------------------------------------------------- through the measurement protocol
def _pid(payload, item: int, rep: int, first: bool):
    return os.getpid(), first


def _steady_probe() -> float:
    """A probe that always reads the reference (module level: pickled into the measuring processes)."""
    return 100.0


def test_interleaved_repeats_in_this_process_log_one_record_per_measurement():
    log = []
    probe = scripted([100, 50] + [100] * 40)         # the first measurement's after-probe reads slow
    g = Guard(probe=probe, reference=100.0, pause_s=0.0)
    out = interleaved_repeats(2, 2, _pid, None, guard=g, log=log)
    assert len(log) == 4 and sorted((r.item, r.repeat) for r in log) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [r.retakes for r in log] == [1, 0, 0, 0]
    assert [[first for _, first in row] for row in out] == [[False, False], [True, False]]


@pytest.mark.slow
def test_each_process_brackets_its_measurements_and_hands_the_records_back():
    log = []
    g = Guard(probe=_steady_probe, reference=100.0)
    out = interleaved_repeats(2, 2, _pid, None, fresh_processes=True, threads=1, guard=g, log=log)
    assert sorted((r.item, r.repeat) for r in log) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(r.rates == [1.0, 1.0] and r.retakes == 0 for r in log)
    assert all(pid != os.getpid() and first for row in out for pid, first in row)


# ---------------------------------------------------------------------- a long run of short measurements
class Clock:
    """A clock that advances one second per measurement taken (``step``)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_batches_without_a_guard_measure_each_item_once():
    from real.run.contention import guarded_batches

    ticks = []
    out, records = guarded_batches(None, [1, 2, 3], lambda x: 10 * x, tick=ticks.append)
    assert out == [10, 20, 30] and records == [] and ticks == [1, 1, 1]


def test_a_batch_the_probe_read_slow_after_is_measured_again_and_kept_in_order():
    from real.run.contention import guarded_batches

    clock, calls, ticks = Clock(), [], []

    def measure(x):
        calls.append(x)
        clock.now += 1.0
        return x * x

    # batches of 2 s = 2 items; probes: before batch 1, after it (slow), before the retake, after it, after batch 2
    probe = scripted([100, 50, 100, 100, 100, 100])
    g = Guard(probe=probe, reference=100.0, pause_s=0.0)
    out, records = guarded_batches(g, [1, 2, 3, 4], measure, every_s=2.0, tick=ticks.append, clock=clock)
    assert out == [1, 4, 9, 16]
    assert calls == [1, 2, 1, 2, 3, 4]                   # the first batch measured twice
    assert ticks == [2, 2] and [r.retakes for r in records] == [1, 0] and not any(r.contended for r in records)
    assert [r.item for r in records] == [0, 2]            # a record per batch, named by its first item


def test_a_batch_still_slow_after_its_retakes_is_kept_and_marked():
    from real.run.contention import guarded_batches

    clock = Clock()

    def measure(x):
        clock.now += 5.0
        return x

    g = Guard(probe=scripted([100, 50]), reference=100.0, pause_s=0.0, max_wait_s=0.0, retakes=1)
    out, records = guarded_batches(g, ["a", "b"], measure, every_s=2.0, clock=clock)
    assert out == ["a", "b"] and all(r.contended and r.retakes == 1 for r in records)


def test_a_guard_without_a_pause_never_waits():
    m, sleeps = Measure(), []
    _, rec = guarded(guard_of([50] * 10, pause_s=0.0, retakes=0), m, 0, 0, True, sleep=sleeps.append)
    assert sleeps == [] and rec.waited_s == 0.0 and rec.rates == [0.5, 0.5] and rec.contended
