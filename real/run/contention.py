"""The contention guard: a timed measurement taken while the cores were slowed from outside is retaken.

On a shared virtual machine the cores' compute speed drops for a minute or two at a time while the
memory bandwidth holds, with nothing else of ours running. A decode run that falls in such a stretch
measures the neighbour, not the decoder: wide verification trees lose up to a quarter of their speed,
autoregressive steps nothing.

A :class:`Guard` brackets each measurement with a short compute-bound probe (its ``probe``: FLOP/s of
a cache-resident GEMM, about 25 ms). Before it, the guard waits until the probe reads at least
``1 - limit`` of its ``reference`` (polling every ``pause_s``, at most ``max_wait_s``); after it, a
probe below that floor discards the measurement and takes it again, at most ``retakes`` times; the last
one is kept and marked contended. Every decision is a :class:`GuardRecord`, which the reports count.
Nothing here looks at what is measured: only the probe decides.

A machine whose cores stay slowed is not waited out for ever: when the probe has read below the floor,
without one reading above it, for the guard's whole ``give_up_s``, or for at least
:data:`MOSTLY_SLOW` of the last ``give_up_s`` (a slowdown broken now and then by a quiet reading, which lets a
batch through and no more), the run stops with :class:`ContendedTooLong` (one line; exit status 3) instead
of spending hours on waits and retakes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TypeVar

from hwmodels.errors import UntrustedMeasurement

T = TypeVar("T")

#: The share of the guard's last ``give_up_s`` the probe may read slow, broken by quiet readings, before the
#: run stops: a slowdown broken by a quiet reading now and then lets a batch through and no more (a guarded
#: profile has measured 174 of 5,066 rows in 23 minutes that way, without 15 minutes of unbroken slow readings).
MOSTLY_SLOW = 0.9


class ContendedTooLong(UntrustedMeasurement):
    """The probe read the cores slowed from outside, without a break or nearly, for longer than the guard gives."""


@dataclass
class Stretch:
    """The probe's current unbroken run of readings below the floor: when it began on ``clock`` (None: the last
    reading was above it); and the readings of the guard's last ``give_up_s`` (``(clock, slow)`` each, with the
    one before them). One per guard, shared by every measurement the guard brackets: in this process and, handed
    on and back (:func:`adopt`), in the repeats' processes of their own, so ``clock`` must read the same in
    every process of the machine (``time.monotonic`` does)."""
    clock: Callable[[], float] = time.monotonic
    since: float | None = None
    recent: list = field(default_factory=list)


def adopt(stretch: Stretch, other: Stretch) -> None:
    """``stretch`` carries on from ``other``: the same guard's stretch as a measuring process of its own left it
    (the parent hands its guard, stretch included, to each repeat's process and takes the stretch back when the
    process ends, so neither rule starts afresh with the next process). ``other`` arrives unpickled, so its
    readings are taken over as they are, not copied."""
    stretch.since, stretch.recent = other.since, other.recent


def slow_share(recent: Sequence[tuple[float, bool]], window: float) -> float | None:
    """The share of the last ``window`` seconds the probe read slow, from ``recent`` (``(clock, slow)`` in clock
    order; each interval between two readings split evenly between them); None while they span less than it."""
    if not recent or recent[-1][0] - recent[0][0] < window:
        return None
    start = recent[-1][0] - window
    slow = sum((t - max(t0, start)) * (s0 + s) / 2 for (t0, s0), (t, s) in zip(recent, recent[1:]) if t > start)
    return slow / window


@dataclass(frozen=True)
class Guard:
    probe: Callable[[], float]    # FLOP/s now (a module-level function or a partial of one: it is pickled)
    reference: float              # FLOP/s of the machine without contention
    limit: float = 0.2            # a probe below (1 - limit) x reference is contended
    pause_s: float = 5.0          # between probes while waiting (0: never wait)
    max_wait_s: float = 120.0     # longest wait for the probe to recover, per attempt
    retakes: int = 3              # measurements discarded at most, per item and repeat
    source: str = ""              # where the reference came from (for the reports)
    give_up_s: float | None = None  # longest run of slow probes, unbroken or nearly, before it stops (None: never)
    stretch: Stretch = field(default_factory=Stretch, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not (self.reference > 0 and 0 < self.limit < 1 and self.pause_s >= 0 and self.max_wait_s >= 0
                and self.retakes >= 0 and (self.give_up_s is None or self.give_up_s > 0)):
            raise ValueError(f"contention guard: invalid settings {self}")

    @property
    def floor(self) -> float:
        return (1.0 - self.limit) * self.reference


@dataclass
class GuardRecord:
    item: int
    repeat: int
    retakes: int = 0              # measurements discarded because the probe after them read contended
    waited_s: float = 0.0         # time spent waiting for the probe to recover
    contended: bool = False       # the kept measurement's probe still read contended (retakes spent)
    rates: list = field(default_factory=list)   # every probe's reading / reference, in order


def reading(guard: Guard, record: GuardRecord) -> float:
    """The probe now (FLOP/s), its share of the reference added to ``record``; :class:`ContendedTooLong` when
    it ends an unbroken run of slow readings as long as ``guard.give_up_s``, or one that makes :data:`MOSTLY_SLOW`
    of the last ``guard.give_up_s`` slow."""
    rate = guard.probe()
    record.rates.append(round(rate / guard.reference, 4))
    stretch, now, slow = guard.stretch, guard.stretch.clock(), rate < guard.floor
    stretch.since = (now if stretch.since is None else stretch.since) if slow else None
    if guard.give_up_s is None:
        return rate
    stretch.recent.append((now, slow))
    while len(stretch.recent) > 2 and stretch.recent[1][0] <= now - guard.give_up_s:
        del stretch.recent[0]
    share = slow_share(stretch.recent, guard.give_up_s)
    if slow and now - stretch.since >= guard.give_up_s:
        how = f"{(now - stretch.since) / 60:.0f} min without a break"
    elif slow and share is not None and share >= MOSTLY_SLOW:
        how = f"{share:.0%} of the last {guard.give_up_s / 60:.0f} min, quiet only now and then"
    else:
        return rate
    raise ContendedTooLong(
        f"the cores read slowed from outside for {how} (the guard's probe at {rate / guard.reference:.0%} of its "
        f"reference {guard.reference / 1e9:.1f} GFLOP/s, {1 - guard.limit:.0%} needed to measure); stopped after "
        f"{guard.give_up_s / 60:.0f} min rather than wait for ever: run it again when the machine is quieter")


def wait_quiet(guard: Guard, record: GuardRecord, sleep: Callable[[float], None] = time.sleep) -> bool:
    """Probe until the reading reaches the floor or the wait is spent; whether it did."""
    waited = 0.0
    while True:
        if reading(guard, record) >= guard.floor:
            return True
        if guard.pause_s <= 0 or waited + guard.pause_s > guard.max_wait_s:
            return False
        sleep(guard.pause_s)
        waited += guard.pause_s
        record.waited_s = round(record.waited_s + guard.pause_s, 3)


def until_quiet(guard: Guard, record: GuardRecord, attempt: Callable[[int], T],
                sleep: Callable[[float], None] = time.sleep) -> T:
    """``attempt(k)`` (k = 0, 1, ...: the retake) after waiting for quiet, again while the probe after it reads
    below the floor, at most ``guard.retakes`` more times; the last result, marked in ``record`` when the
    probe still read slow."""
    while True:
        wait_quiet(guard, record, sleep)
        result = attempt(record.retakes)
        quiet = reading(guard, record) >= guard.floor
        if quiet or record.retakes >= guard.retakes:
            record.contended = not quiet
            return result
        record.retakes += 1


def guarded(guard: Guard | None, measure: Callable[[bool], T], item: int, repeat: int, first: bool,
            sleep: Callable[[float], None] = time.sleep) -> tuple[T, GuardRecord | None]:
    """``measure(first)`` bracketed by the guard's probe (see the module docstring); without a guard, once.
    A retake passes ``first=False``: the warm-up has been done."""
    if guard is None:
        return measure(first), None
    record = GuardRecord(item, repeat)
    return until_quiet(guard, record, lambda k: measure(first and k == 0), sleep), record


def guarded_batches(guard: Guard | None, items: Sequence, measure: Callable[[object], T], every_s: float = 2.0,
                    tick: Callable[[int], None] | None = None, sleep: Callable[[float], None] = time.sleep,
                    clock: Callable[[], float] = time.monotonic) -> tuple[list[T], list[GuardRecord]]:
    """``measure(item)`` for every item, in order, for a long run of short measurements (a calibration's rows):
    the guard's probe is taken before the first and after every ``every_s`` seconds of measuring; a probe
    below the floor discards the batch measured since the last probe and measures it again after waiting
    for quiet (at most ``guard.retakes`` times a batch, the last kept and marked). ``tick(k)`` when a batch
    of ``k`` is kept. Without a guard: each item once, one tick each."""
    if guard is None:
        out = []
        for item in items:
            out.append(measure(item))
            if tick is not None:
                tick(1)
        return out, []
    def batch_from(start: int) -> list:
        """Items from ``start`` on, for ``every_s`` seconds (at least one)."""
        batch, t0 = [], clock()
        while start + len(batch) < len(items) and (not batch or clock() - t0 < every_s):
            batch.append(measure(items[start + len(batch)]))
        return batch

    out, records, start = [], [], 0
    while start < len(items):
        record = GuardRecord(start, 0)
        batch = until_quiet(guard, record, lambda _k: batch_from(start), sleep)
        out += batch
        records.append(record)
        if tick is not None:
            tick(len(batch))
        start += len(batch)
    return out, records


def guard_summary(guard: Guard | None, records: Sequence[GuardRecord | None]) -> dict | None:
    """What a report says of a guarded set of measurements (None without a guard)."""
    if guard is None:
        return None
    records = [r for r in records if r is not None]
    lowest = min((x for r in records for x in r.rates), default=float("nan"))
    return {"measurements": len(records), "retaken": sum(r.retakes > 0 for r in records),
            "retakes": sum(r.retakes for r in records), "kept_contended": sum(r.contended for r in records),
            "waited_s": round(sum(r.waited_s for r in records), 1), "lowest_probe": lowest,
            "reference_gflops": round(guard.reference / 1e9, 2), "limit": guard.limit, "source": guard.source,
            "records": [asdict(r) for r in records if r.retakes or r.waited_s or r.contended]}


def guard_head(summary: dict) -> str:
    """What the guard does, as a report introduces it."""
    return (f"Contention guard: each measurement bracketed by a compute-bound GEMM probe (reference "
            f"{summary['reference_gflops']:.1f} GFLOP/s, {summary['source']}; below {1 - summary['limit']:.0%} of "
            f"it the cores were slowed from outside)")


def guard_counts(summary: dict) -> str:
    """What the guard did to one set of measurements."""
    n, k = summary["measurements"], summary["retaken"]
    if k == 0 and not summary["waited_s"]:
        return f"all {n} measurements taken with the probe above the floor, none retaken"
    text = (f"{k} of {n} measurements retaken ({summary['retakes']} discarded), {summary['waited_s']:.0f} s "
            f"waited for the probe to recover, lowest probe {summary['lowest_probe']:.0%} of the reference")
    if summary["kept_contended"]:
        text += f"; {summary['kept_contended']} kept although the probe still read slow (retakes spent)"
    return text
