"""``hetspec calibrate --check``: whether the cores are quiet enough to calibrate now, before a calibration
of tens of minutes finds out that they are not.

For ``seconds`` it reads the contention guard's probe (:func:`real.validation.machine.gemm_rate`, the reading
that makes a calibration's operator profile and a validation's runs wait, retake and stop) every
``pause_s``, and sets the readings against the guard's floor: :data:`~real.validation.machine.GUARD_LIMIT`
below the GEMM rate the last calibration's reference probe read on the same thread count (the faster of its
start and its end), or below the check's fastest reading where that is higher (as the guard takes the larger
of the two). Quiet when at most :data:`SLOW_SHARE` of the readings fall below the floor (a passing dip the guard retakes
through); otherwise the cores are slowed from outside and a calibration started now would wait, retake and
likely stop. Without a calibration to compare with, only steadiness can be judged: a machine slowed for
the whole check then reads quiet (the verdict says so). Nothing is written.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

#: Share of a check's readings that may fall below the floor and the cores still count as quiet.
SLOW_SHARE = 0.25


@dataclass(frozen=True)
class QuietCheck:
    """The guard probe's readings over a check and what they say."""

    threads: int
    readings: tuple[float, ...]       # GFLOP/s, in order
    reference: float | None           # GFLOP/s of the calibration's reference probe (faster of start, end); None: none
    limit: float                      # share below the reference at which a reading is slowed
    note: str = ""                    # what to know about the reference (:func:`calibrated_reference`)

    @property
    def floor(self) -> float:
        return (1.0 - self.limit) * max(self.reference or 0.0, max(self.readings))

    @property
    def slow(self) -> int:
        return sum(r < self.floor for r in self.readings)

    @property
    def quiet(self) -> bool:
        return self.slow <= SLOW_SHARE * len(self.readings)

    def lines(self) -> list[str]:
        """What the check read, against what, and its verdict."""
        xs = self.readings
        thr = f"{self.threads} thread{'s' if self.threads > 1 else ''}"
        if not self.reference:
            against = ("the fastest reading; no calibration to compare with, so only steadiness is judged and a "
                       "machine slowed throughout reads quiet")
        elif self.reference >= max(xs):
            against = (f"{self.reference:.1f} GFLOP/s, what the last calibration's reference probe read at its start "
                       "or end")
        else:
            against = f"the fastest reading, above the last calibration's {self.reference:.1f} GFLOP/s"
        out = [f"guard probe on {thr}: {len(xs)} readings, median {statistics.median(xs):.1f} GFLOP/s "
               f"(min {min(xs):.1f}, max {max(xs):.1f}); {self.slow} below the floor of {self.floor:.1f} GFLOP/s, "
               f"{100 * (1 - self.limit):.0f} % of {against}"]
        out.append("quiet: a calibration can start now" if self.quiet else
                   f"slowed from outside: more than {100 * SLOW_SHARE:.0f} % of the readings below the floor")
        return out + ([f"note: {self.note}"] if self.note else [])

    def refusal(self) -> str:
        """The one line of a check that found the cores slowed."""
        return (f"the cores read slowed from outside ({self.slow} of {len(self.readings)} guard probe readings "
                f"below {self.floor:.1f} GFLOP/s, median {statistics.median(self.readings):.1f}): a calibration "
                "started now would wait, retake and likely stop; check again later")


def calibrated_reference(host, threads: int) -> tuple[float | None, str]:
    """(GFLOP/s the reference probe of ``host``'s calibration read on ``threads`` threads, the faster of its
    start and its end (:func:`~real.validation.machine.calibrated_gemm_rates`), None where there is none; a
    note when that calibration was itself measured on slowed cores
    (:func:`~real.validation.machine.slowed_calibration`): a check against it passes cores as slow as those).
    Both read from the calibration's raw measurements beside ``host``'s file."""
    from real.validation.host_facts import raw_record
    from real.validation.machine import calibrated_gemm_rates, slowed_calibration, slowed_cores

    record = (raw_record(host) if host is not None else None) or {}
    rate = calibrated_gemm_rates(record).get(threads)
    if not rate:
        return None, ""
    slowed = slowed_calibration(record, threads)
    if slowed is None:
        return rate[1], ""
    probe, peak = slowed
    return rate[1], (f"that calibration was itself {slowed_cores(probe / 1e9, peak / 1e9)}: this check passes cores "
                     "as slow as those, until a calibration on quiet cores")


def readings_in(seconds: float, pause_s: float) -> int:
    """Readings a check of ``seconds`` takes, one every ``pause_s`` from the start."""
    return int(seconds // pause_s) + 1


def check_quiet(seconds: float, threads: int, reference: float | None, probe: Callable[[], float] | None = None,
                pause_s: float = 2.0, clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep,
                on_reading: Callable[[float], None] | None = None, note: str = "") -> QuietCheck:
    """Read ``probe`` (GFLOP/s; default: the guard's probe on ``threads`` threads) at 0, ``pause_s``,
    2 ``pause_s``, ... up to ``seconds`` (:func:`readings_in` readings) and judge the readings against
    ``reference`` (GFLOP/s, None: no calibration; ``note``: what to know about it). ``on_reading`` sees each
    reading as it comes (a progress display)."""
    from real.validation.machine import GUARD_LIMIT, GUARD_PROBE_SAMPLES, gemm_rate

    if not seconds > 0:
        raise ValueError(f"a check lasts a positive number of seconds, not {seconds}")
    probe = probe or (lambda: gemm_rate(threads, GUARD_PROBE_SAMPLES) / 1e9)
    readings: list[float] = []
    start = clock()
    for k in range(readings_in(seconds, pause_s)):
        sleep(max(0.0, start + k * pause_s - clock()))
        readings.append(probe())
        if on_reading is not None:
            on_reading(readings[-1])
    return QuietCheck(threads, tuple(readings), reference, GUARD_LIMIT, note)
