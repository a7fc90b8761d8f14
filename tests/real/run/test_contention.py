"""The contention guard: a measurement taken while the cores read slow is retaken; only the probe decides."""

from __future__ import annotations

import os
import time

import pytest

from real.run.contention import Guard, guard_counts, guard_head, guard_summary, guarded
from real.run.repeat_processes import interleaved_repeats


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
    assert guard_summary(None, []) is None


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
    line = f"{guard_head(s)}: {guard_counts(s)}"
    assert "2 of 3 measurements retaken (3 discarded)" in line and "lowest probe 50% of the reference" in line
    assert "1 kept although the probe still read slow" in line and "timed here" in line


def test_a_quiet_summary_says_none_was_retaken():
    records = [guarded(guard_of([100]), Measure(), i, 0, True)[1] for i in range(4)]
    assert guard_counts(guard_summary(guard_of([100]), records)).endswith(
        "all 4 measurements taken with the probe above the floor, none retaken")


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


def _slow_probe() -> float:
    """A probe that always reads half the reference (module level: pickled into the measuring processes)."""
    return 50.0


def _short(payload, item: int, rep: int, first: bool):
    time.sleep(0.05)
    return item


@pytest.mark.slow
def test_the_slow_stretch_carries_on_from_one_repeats_process_to_the_next():
    from hwmodels.errors import UntrustedMeasurement

    # each process reads slow for well under a second; the guard gives up after 2 s of slow readings, which
    # only the repeats together reach (a process of its own takes a second or more to start)
    g = Guard(probe=_slow_probe, reference=100.0, pause_s=0.0, max_wait_s=0.0, retakes=0, give_up_s=2.0)
    one = Guard(probe=_slow_probe, reference=100.0, pause_s=0.0, max_wait_s=0.0, retakes=0, give_up_s=2.0)
    interleaved_repeats(2, 1, _short, None, fresh_processes=True, threads=1, guard=one)
    assert one.stretch.since is not None and one.stretch.recent      # handed back from the process
    with pytest.raises(UntrustedMeasurement, match=r"repeat [2-6], in its own process: .* without a break"):
        interleaved_repeats(2, 6, _short, None, fresh_processes=True, threads=1, guard=g)


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


# ---------------------------------------------------------------------- cores that stay slowed
def _stopping_guard(readings, give_up_s=60.0, **kw):
    """A guard on a scripted probe whose clock runs on the fake sleeps, and the sleep that advances it."""
    from real.run.contention import Stretch

    clock = Clock()

    def sleep(s: float) -> None:
        clock.now += s

    g = guard_of(readings, give_up_s=give_up_s, stretch=Stretch(clock=clock), **kw)
    return g, sleep


def test_cores_slowed_longer_than_the_guard_gives_stop_the_run_in_one_line():
    from hwmodels.errors import EXIT_UNTRUSTED
    from real.run.contention import ContendedTooLong

    g, sleep = _stopping_guard([50], give_up_s=60.0, max_wait_s=20.0, retakes=10)
    m = Measure()
    with pytest.raises(ContendedTooLong) as err:
        for item in range(10):
            guarded(g, m, item, 0, True, sleep=sleep)
    text = str(err.value)
    assert err.value.exit_code == EXIT_UNTRUSTED == 3 and "\n" not in text
    assert "1 min without a break" in text and "probe at 50% of its reference" in text and "80% needed" in text
    # 20 s of waits per attempt: the stretch reaches 60 s at the end of the third attempt's wait, before it measures
    assert len(m.firsts) == 2 and g.stretch.clock.now == 60.0


def _timed(g, seconds: float):
    """A measurement that takes ``seconds`` on the guard's clock."""
    def measure(first: bool):
        g.stretch.clock.now += seconds
        return first
    return measure


def test_one_quiet_reading_breaks_the_stretch():
    # slow for 40 s of waits, quiet for a 30 s measurement, slow again for 40 s: never 60 s unbroken, slow for
    # 40 of the last 60 s at the most
    g, sleep = _stopping_guard([50] * 9 + [100] + [50] * 8 + [100] * 5, give_up_s=60.0, max_wait_s=40.0,
                               retakes=0)
    for item in range(3):
        guarded(g, _timed(g, 30.0), item, 0, True, sleep=sleep)
    assert g.stretch.since is None and g.stretch.clock.now == 170.0


def test_slow_share_splits_each_interval_between_its_two_readings():
    from real.run.contention import slow_share

    recent = [(0.0, True), (10.0, True), (30.0, False), (40.0, False)]
    assert slow_share(recent, 60.0) is None                       # 40 s of readings: the window not yet spanned
    assert slow_share(recent, 40.0) == pytest.approx(20.0 / 40)    # 0-10 slow, 10-30 half, 30-40 quiet
    assert slow_share(recent, 35.0) == pytest.approx(15.0 / 35)    # the window from 5 s: 5 s of the first interval
    assert slow_share([], 1.0) is None


def _periodic_guard(slow_s: float, period_s: float, give_up_s: float = 900.0):
    """A guard whose probe reads slow for the first ``slow_s`` of every ``period_s`` on its clock."""
    from real.run.contention import Stretch

    clock = Clock()

    def sleep(s: float) -> None:
        clock.now += s

    g = Guard(probe=lambda: 50.0 if clock.now % period_s < slow_s else 100.0, reference=100.0, limit=0.2,
              pause_s=5.0, max_wait_s=120.0, retakes=3, give_up_s=give_up_s, stretch=Stretch(clock=clock))
    return g, sleep


def test_cores_slowed_but_for_a_quiet_moment_now_and_then_stop_the_run():
    from real.run.contention import MOSTLY_SLOW, ContendedTooLong

    # slow but for 10 s a minute (5/6): no stretch of 15 min unbroken, and quiet often enough to go on
    g, sleep = _periodic_guard(50.0, 60.0)
    while g.stretch.clock.now < 3600:                              # an hour without stopping
        guarded(g, _timed(g, 2.0), 0, 0, True, sleep=sleep)
    assert 50 / 60 < MOSTLY_SLOW
    # slow but for 2 s a minute: the guard measures now and then, and stops at 15 min
    g, sleep = _periodic_guard(58.0, 60.0)
    with pytest.raises(ContendedTooLong) as err:
        for item in range(200):
            guarded(g, _timed(g, 2.0), item, 0, True, sleep=sleep)
    assert 900 <= g.stretch.clock.now <= 960 and "\n" not in str(err.value) and g.stretch.since is not None
    assert "slowed from outside for 9" in str(err.value) and "of the last 15 min, quiet only now and then" in str(
        err.value)


def test_a_machine_slowed_half_the_time_is_waited_through():
    g, sleep = _periodic_guard(60.0, 120.0)
    while g.stretch.clock.now < 3600:
        guarded(g, _timed(g, 2.0), 0, 0, True, sleep=sleep)
    assert g.stretch.recent[0][0] >= 3600 - 900 - 5                  # only the last 15 min are kept


def test_without_a_limit_the_guard_waits_through_any_stretch():
    g, sleep = _stopping_guard([50], give_up_s=None, max_wait_s=100.0, retakes=3)
    for item in range(20):                      # 2,000 s of slow probes
        _, rec = guarded(g, Measure(), item, 0, True, sleep=sleep)
        assert rec.contended


def test_a_long_run_of_batches_stops_too():
    from real.run.contention import ContendedTooLong, guarded_batches

    g, sleep = _stopping_guard([100, 100] + [50] * 100, give_up_s=30.0, pause_s=0.0, max_wait_s=0.0, retakes=0)

    def measure(x):
        g.stretch.clock.now += 10.0
        return x

    with pytest.raises(ContendedTooLong, match="without a break"):
        guarded_batches(g, list(range(20)), measure, every_s=5.0, clock=g.stretch.clock)


def test_a_measuring_process_that_stops_hands_back_its_line_and_exit_status():
    import multiprocessing

    from real.run.repeat_processes import _repeat_child

    g, _ = _stopping_guard([50], give_up_s=1e-9, pause_s=0.0, max_wait_s=0.0)
    g.stretch.since = -1.0                       # the stretch began before this process's first reading
    parent, child = multiprocessing.Pipe(duplex=False)
    _repeat_child(child, 2, 0, _pid, None, None, g)
    kind, line, untrusted = parent.recv()
    assert kind == "error" and untrusted and line.startswith("the cores read slowed from outside")


def test_a_guard_refuses_a_limit_that_is_not_positive():
    with pytest.raises(ValueError, match="contention guard"):
        Guard(probe=lambda: 1.0, reference=1.0, give_up_s=0.0)
