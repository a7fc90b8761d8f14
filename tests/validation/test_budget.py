"""The calibration's time budget (real/validation/calibration/budget.py), tested with a fake clock."""

from __future__ import annotations

import pytest

from hwmodels.errors import HetSpecError
from real.validation.calibration.budget import Budget, budgeted_rounds


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_rounds_stop_where_the_next_one_would_overrun_the_share():
    clock = FakeClock()
    budget = Budget(100.0, clock=clock)
    visits = []

    def measure(item, rnd):
        visits.append((rnd, item))
        clock.now += 4.0          # every sample takes 4 s: a round of 3 items 12 s
        return rnd

    out = budgeted_rounds(3, 10, measure, budget, 0.5, "stage")
    # a 50 s share: rounds end at 12, 24, 36, 48 s; a fifth would end at 60 s
    assert [len(samples) for samples in out] == [4, 4, 4] and clock.now == 48.0 <= 0.5 * budget.seconds
    assert [item for rnd, item in visits if rnd == 1] == [1, 2, 0]       # rotated from round to round
    assert budget.log == [("stage", 4, 48.0)]


def test_the_first_round_always_runs_and_later_stages_get_what_is_left():
    clock = FakeClock()
    budget = Budget(10.0, clock=clock)

    def slow(item, rnd):
        clock.now += 30.0
        return item

    assert budgeted_rounds(2, 5, slow, budget, 0.4) == [[0], [1]]    # over the budget already: one round
    assert budget.left() == -50.0 and budget.share(0.3) == 0.0
    assert budgeted_rounds(1, 5, slow, budget, 0.3) == [[0]]


def test_a_budget_is_positive():
    with pytest.raises(HetSpecError, match="positive"):
        Budget(0.0)
