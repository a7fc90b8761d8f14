"""The one measurement protocol of every timed experiment: interleaved repeats, medians.

A shared machine drifts (other processes, clocks, the cache's state): measuring configuration A
five times and then B five times puts the drift into the difference between A and B. Every
experiment of HetSpec (``run --compare``, the heterogeneous sweeps) therefore measures its items in
*rounds*: each repeat visits every item once per round, in an order rotated by repeat and round, so a
drift hits every item alike; results are reported as medians over repeats.

:func:`paired_blocks` (the validation grid, :mod:`real.validation.measure`) times every item in A/B pairs
with a baseline instead, one evaluation prompt a pair: two runs back to back slow down together, so their
ratio holds while the machine's speed moves. :func:`real.run.repeat_processes.interleaved_repeats` can run each
repeat in a process of its own, and can bracket each measurement with the contention guard
(:mod:`real.run.contention`), which retakes a measurement the cores were slowed under (the heterogeneous sweeps).
"""

from __future__ import annotations

import math
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
    check_counts(n, repeats, rounds)
    out: list[list[list[T]]] = [[[] for _ in range(repeats)] for _ in range(n)]
    for rep in range(repeats):
        for j in range(rounds):
            for i in rotation(n, rep + j):
                out[i][rep].append(measure(i, rep, j))
                if tick is not None:
                    tick()
    return out


def paired_blocks(n: int, baseline: int, repeats: int, measure: Callable[[int, int, bool], T], parts: int = 1,
                  tick: Callable[[], None] | None = None, max_repeats: int | None = None,
                  more: Callable[[int, list, list], bool] | None = None,
                  ) -> tuple[list[list[list[T]]], list[list[list[T]]]]:
    """Every item but ``baseline`` timed ``repeats`` times in an A/B block with ``baseline``.

    A block is ``parts`` pairs (the validation: one per evaluation prompt); a pair is the baseline and the item
    measured back to back in this process, in an order that alternates from pair to pair and block to block
    (so a drift favours neither), and a part is measured in both before the next. The tighter a pair, the more
    of the machine's drift its two runs share. In repeat ``r`` the items are visited in :func:`rotation` order
    from ``r``. ``measure(item, part, first)`` takes one measurement; ``first`` says this item has not been
    measured before (a warm-up is due). Returns ``(own, paired)``: ``own[i][block][part]`` the item's
    measurements, ``paired[i][block][part]`` the baseline's of the same pairs; the baseline's own row holds its
    every block of the run, in order, and ``paired[baseline]`` the same. ``tick`` after every block.

    ``repeats`` is the least number of repeats; up to ``max_repeats`` (default ``repeats``) are taken while
    ``more(repeats done, own, paired)`` says so (asked after every repeat but the last possible one; its
    answer counts from the ``repeats``-th on): a measurement that stops once it is precise enough, or once its
    time is spent.
    """
    check_counts(n, repeats, parts)
    max_repeats = repeats if max_repeats is None else max_repeats
    if max_repeats < repeats:
        raise HetSpecError(f"paired blocks: at most {max_repeats} repeats is fewer than the least, {repeats}")
    if not 0 <= baseline < n:
        raise HetSpecError(f"paired blocks: baseline {baseline} is not one of the {n} items")
    own: list[list[list[T]]] = [[] for _ in range(n)]
    paired: list[list[list[T]]] = [[] for _ in range(n)]
    others = [i for i in range(n) if i != baseline]
    seen: set[int] = set()

    def take(j: int, part: int) -> T:
        result = measure(j, part, j not in seen)
        seen.add(j)
        return result

    block = 0
    for rep in range(max_repeats if others else repeats):
        if rep > 0:
            go_on = more(rep, own, paired) if more is not None else False
            if rep >= repeats and not go_on:
                break
        for k in rotation(len(others), rep) if others else []:
            i = others[k]
            mine, base = [], []
            for part in range(parts):
                got = {j: take(j, part) for j in ((baseline, i) if (block + part) % 2 == 0 else (i, baseline))}
                mine.append(got[i])
                base.append(got[baseline])
            own[i].append(mine)
            paired[i].append(base)
            own[baseline].append(base)
            block += 1
            if tick is not None:
                tick()
    if not others:                     # the baseline alone: its own repeats
        for _ in range(repeats):
            own[baseline].append([take(baseline, part) for part in range(parts)])
    paired[baseline] = list(own[baseline])
    return own, paired


def check_counts(n: int, repeats: int, rounds: int) -> None:
    if repeats < 1:
        raise HetSpecError(f"repeats must be >= 1, got {repeats}")
    if n < 1 or rounds < 1:
        raise HetSpecError(f"nothing to measure: {n} items, {rounds} rounds (or parts)")


def median(values: Iterable[float]) -> float:
    """The median of ``values`` (NaN when empty)."""
    values = list(values)
    return statistics.median(values) if values else float("nan")


def finite_median(values: Iterable[float | None]) -> float:
    """The median of the finite ones of ``values`` (NaN when none)."""
    return median(x for x in values if x is not None and math.isfinite(x))


def median_index(values: list[float]) -> int:
    """The index of the median element (the upper one of an even count): whose trace a report shows."""
    return sorted(range(len(values)), key=lambda i: values[i])[len(values) // 2]
