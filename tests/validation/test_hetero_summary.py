"""The heterogeneous section's acceptance check: its regret paired within repeats, the ratio of the medians beside it."""

from __future__ import annotations

import statistics

import pytest

from real.validation.hetero.report import summary_lines
from real.validation.hetero.summary import hetero_summary, repeat_tokens_per_s


def _placement(label: str, pred_ms: float, steps_ms: list[float], tokens: float = 2.0) -> dict:
    med = statistics.median(steps_ms)
    return {"label": label, "pred_step_ms": pred_ms, "meas_step_ms": med, "pred_tokens_per_s": 1e3 * tokens / pred_ms,
            "meas_tokens_per_s": 1e3 * tokens / med, "meas_step_ms_samples": steps_ms}


def test_a_repeat_wide_drift_is_no_regret_when_the_predicted_best_wins_inside_every_repeat():
    """A is predicted best and is faster than B in two of three repeats, but the machine slowed across the run, so
    B's median step is the lower: the ratio of the medians counts a regret, the paired one none."""
    doc = {"dovetail": {"placements": [_placement("A", 9.0, [10.0, 13.0, 14.0]),
                                       _placement("B", 9.5, [10.2, 12.8, 14.2])]}}
    check = hetero_summary(doc)["methods"]["dovetail"]
    assert check["regret_paired"] and check["regret"] == 0.0 and check["measured_best"] == "A"
    assert check["regret_of_medians"] == pytest.approx(1.0 - 12.8 / 13.0)
    text = "\n".join(summary_lines({"summary": hetero_summary(doc)}))
    assert "regret of the medians" in text and "the two timed in the same repeat" in text
    assert "| 0.0 % | 1.5 % |" in text


def test_both_reports_state_their_regret_by_one_definition():
    """The acceptance check and the heterogeneous check word their regret by ``metrics.regret_definition``:
    paired within repeats (the heterogeneous one adds ALSpec's caveat), else the ratio of the medians."""
    from real.validation.hetero.report import regret_definition as hetero_definition
    from real.validation.metrics import MEDIANS_REGRET, REGRET_DEFINITION, regret_definition

    assert regret_definition(True) == REGRET_DEFINITION and regret_definition(False, "x") == MEDIANS_REGRET
    paired = hetero_definition({"dovetail": {"regret_paired": True}, "alspec": {"regret_paired": False}})
    assert paired.startswith(REGRET_DEFINITION + "; ALSpec's best configurations are chosen under its agreement floor")
    assert hetero_definition({"alspec": {"regret_paired": False}}) == MEDIANS_REGRET


def test_a_repeat_loss_is_the_median_of_the_per_repeat_ratios():
    doc = {"dovetail": {"placements": [_placement("A", 9.0, [11.0, 13.0, 15.0]),
                                       _placement("B", 9.5, [10.0, 12.0, 14.0])]}}
    check = hetero_summary(doc)["methods"]["dovetail"]
    assert check["measured_best"] == "B"
    assert check["regret"] == pytest.approx(1.0 - 12.0 / 13.0)      # the middle repeat's ratio


def test_without_aligned_repeats_the_regret_is_the_ratio_of_the_medians():
    rows = [_placement("A", 9.0, [10.0, 13.0, 14.0]), _placement("B", 9.5, [12.8, 12.9])]
    check = hetero_summary({"dovetail": {"placements": rows}})["methods"]["dovetail"]
    assert not check["regret_paired"] and check["regret"] == check["regret_of_medians"] > 0
    assert repeat_tokens_per_s([("A", 9.0, 13.0, 1.0, 150.0, None)]) is None
    assert repeat_tokens_per_s([("A", 9.0, 13.0, 1.0, 150.0, [13.0, 0.0])]) is None
    # each repeat's tokens/s: the configuration's tokens per step over that repeat's step
    assert repeat_tokens_per_s([("A", 9.0, 13.0, 1.0, 2e3 / 13.0, [10.0, 13.0])]) == [[pytest.approx(200.0),
                                                                                       pytest.approx(2e3 / 13.0)]]


def _alspec(meets_floor: bool) -> dict:
    """Two ALSpec rows, predicted within 1 %; the predicted best measured faster than the measured best (a negative
    regret), which it can only be by keeping fewer of the exact tokens."""
    rows = [{"window": 8, "lambda": lam, "pred_step_ms": p, "meas_step_ms": m, "pred_tokens_per_s": 1e3 / p,
             "meas_tokens_per_s": 1e3 / m} for lam, p, m in ((0.05, 9.9, 10.0), (0.0, 10.9, 11.0))]
    return {"alspec": {"rows": rows, "agreement_floor": 0.99, "predicted_best": "S=8, lambda=0.05",
                       "measured_best": "S=8, lambda=0.0", "regret": 1.0 - 11.0 / 10.0,
                       "predicted_best_meets_floor": meets_floor}}


def test_an_alspec_pick_below_the_agreement_floor_does_not_meet_the_targets():
    kept = hetero_summary(_alspec(True))["methods"]["alspec"]
    assert kept["meets_targets"] and not kept["predicted_best_below_floor"]
    broken = hetero_summary(_alspec(False))["methods"]["alspec"]
    assert broken["regret"] < 0 and broken["predicted_best_below_floor"] and not broken["meets_targets"]
