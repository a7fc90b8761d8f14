"""The time budget of a calibration: how long ``hetspec calibrate`` may measure, enforced between samples.

A calibration takes its benchmarks in short interleaved rounds (every round visits every benchmark once, in
an order rotated from round to round) and keeps the median over the rounds, with their spread. Each stage
of the calibration gets a share of the budget; its first round always runs, and a further round starts only
where the stage's rounds so far, plus one more round as long as its longest, stay inside that share. So a
slow machine gets fewer rounds (a wider spread, reported) instead of a longer calibration, and a stage that
cannot fit a first round says so in the record.

The clock is injected (``Budget.clock``), so the bound is tested with a fake clock, not by timing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from hwmodels.errors import HetSpecError

T = TypeVar("T")

#: Seconds of measurement of ``hetspec calibrate`` (the micro-benchmarks; the quick operator profile of the
#: CPU follows them) and of ``hetspec calibrate --quick`` (micro-benchmarks only). Start-up, the last round's
#: overrun and the quick profile come on top: with these budgets the whole commands took 98 s and 40 s on a
#: 2-core Intel Xeon VM that reports a 300 MiB last-level cache (so its cold GEMM pool is 1.2 GB), inside
#: 2 minutes and 45 s.
DEFAULT_BUDGET_S = 65.0
QUICK_BUDGET_S = 30.0


@dataclass
class Budget:
    """``seconds`` of measurement from the first :meth:`start`, on ``clock``."""

    seconds: float
    clock: Callable[[], float] = time.monotonic
    started: float | None = None
    log: list = field(default_factory=list)     # (stage, rounds taken, seconds) per stage

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise HetSpecError(f"a calibration's time budget is a positive number of seconds, got {self.seconds:g}")

    def start(self) -> None:
        if self.started is None:
            self.started = self.clock()

    def spent(self) -> float:
        self.start()
        return self.clock() - self.started

    def left(self) -> float:
        return self.seconds - self.spent()

    def share(self, fraction: float) -> float:
        """Seconds of the budget that ``fraction`` of it is, capped at what is left."""
        return max(0.0, min(fraction * self.seconds, self.left()))


def budgeted_rounds(n: int, rounds: int, measure: Callable[[int, int], T], budget: Budget, fraction: float,
                    stage: str = "") -> list[list[T]]:
    """Items ``0..n-1`` measured in up to ``rounds`` interleaved rounds inside ``fraction`` of ``budget``.

    Round ``j`` visits the items in rotation order from ``j``; ``measure(item, round)`` takes one sample.
    The first round always runs; round ``j + 1`` starts only where the time spent so far plus the longest
    round yet fits the stage's share. Returns ``out[item]``: its samples, one per round taken."""
    if n < 1 or rounds < 1:
        raise HetSpecError(f"nothing to measure: {n} items, {rounds} rounds")
    share = budget.share(fraction)
    t0 = budget.clock()
    longest = 0.0
    out: list[list[T]] = [[] for _ in range(n)]
    taken = 0
    for j in range(rounds):
        now = budget.clock()
        if j > 0 and (now - t0) + longest > share:
            break
        for i in [(j + k) % n for k in range(n)]:
            out[i].append(measure(i, j))
        longest = max(longest, budget.clock() - now)
        taken += 1
    budget.log.append((stage, taken, round(budget.clock() - t0, 3)))
    return out


def fits(budget: Budget, estimate_s: float) -> bool:
    """Whether a step expected to take ``estimate_s`` still fits what is left of ``budget``."""
    return estimate_s <= budget.left()
