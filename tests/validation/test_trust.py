"""Machine-state trust (real/validation/trust.py): the spread of a calibration's rounds, the noise band of a
run's baseline timings, and the guard's reference."""

from __future__ import annotations

import math

import pytest

from real.validation.trust import SPREAD_LIMIT, band, percentile, spread, spread_problems


def test_spread_is_max_over_min_of_the_rounds():
    assert spread([10.0, 12.0, 11.0]) == pytest.approx(0.2)
    assert spread([5.0]) == 0.0 and spread([0.0, 1.0]) == math.inf


def test_spread_problems_name_each_quantity_beyond_the_limit():
    rob = {"spread": {"2 threads (cpu)": {"gemm_cache": 0.3, "triad_dram": 1.4},
                      "1 thread (cpu0, cpu1, ...)": {"op_overhead": float("nan")}}}
    problems = spread_problems(rob)
    assert problems == ["2 threads (cpu): DRAM triad bandwidth spread 140 % over its rounds (limit 100 %)",
                        "1 thread (cpu0, cpu1, ...): fixed cost per operator spread nan % over its rounds "
                        "(limit 100 %)"]
    assert spread_problems(rob, limit=2.0)[0].startswith("1 thread") and SPREAD_LIMIT == 1.0
    assert spread_problems({}) == []


def test_the_noise_band_is_the_p10_to_p90_spread_over_the_median():
    values = [10.0] * 8 + [5.0, 20.0]
    assert percentile(values, 0.5) == 10.0 and percentile([1.0, 2.0, 3.0], 0.25) == pytest.approx(1.5)
    assert band(values) == pytest.approx((percentile(values, 0.9) - percentile(values, 0.1)) / 10.0)
    assert band([7.0]) == 0.0 and math.isnan(band([])) and math.isnan(percentile([float("nan")], 0.5))


def test_the_guard_reference_is_the_rate_given_or_one_timed_now(monkeypatch):
    from real.validation import trust

    monkeypatch.setattr(trust, "gemm_rate", lambda threads, *a: 4e10)
    assert trust.contention_guard(2).reference == 4e10
    guard = trust.contention_guard(1, 9e10, give_up_s=None)
    assert guard.reference == 9e10 and guard.give_up_s is None and "1 thread" in guard.source
