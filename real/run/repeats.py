"""The one measurement protocol of every timed experiment: interleaved repeats, medians.

A shared machine drifts (other processes, clocks, the cache's state): measuring configuration A
five times and then B five times puts the drift into the difference between A and B. Every
experiment of HetSpec (``run --compare``, the validation grid, the heterogeneous sweeps) therefore
measures its items in *rounds*: each repeat visits every item once per round, in an order rotated
by repeat and round, so a drift hits every item alike; results are reported as medians over
repeats.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from typing import TypeVar

from hwmodels.errors import HetSpecError

T = TypeVar("T")


def rotation(n: int, start: int) -> list[int]:
    """Items ``0..n-1`` starting at ``start`` (mod n): the visiting order of one round."""
    return [(start + k) % n for k in range(n)]


def interleaved(n: int, repeats: int, measure: Callable[[int, int, int], T], rounds: int = 1,
                tick: Callable[[], None] | None = None) -> list[list[list[T]]]:
    """Measure items ``0..n-1``, ``repeats`` times each, interleaved.

    ``measure(item, repeat, round)`` takes one measurement. In repeat ``r`` and round ``j`` the items
    are visited in :func:`rotation` order from ``r + j``. Returns ``out[item][repeat]``: the list of
    that repeat's measurements, one per round. ``tick`` is called after every measurement (a
    progress bar's ``update``).
    """
    if repeats < 1:
        raise HetSpecError(f"repeats must be >= 1, got {repeats}")
    if n < 1 or rounds < 1:
        raise HetSpecError(f"nothing to measure: {n} items, {rounds} rounds")
    out: list[list[list[T]]] = [[[] for _ in range(repeats)] for _ in range(n)]
    for rep in range(repeats):
        for j in range(rounds):
            for i in rotation(n, rep + j):
                out[i][rep].append(measure(i, rep, j))
                if tick is not None:
                    tick()
    return out


def median(values: Iterable[float]) -> float:
    """The median of ``values`` (NaN when empty)."""
    values = list(values)
    return statistics.median(values) if values else float("nan")


def median_index(values: list[float]) -> int:
    """The index of the median element (the upper one of an even count): whose trace a report shows."""
    return sorted(range(len(values)), key=lambda i: values[i])[len(values) // 2]
