"""Prediction-vs-measurement metrics of ``hetspec validate`` (pure functions, no torch).

Per configuration: the relative error of the predicted step time and tokens/s against the
measured medians, ``|pred - meas| / meas``. Per method: the median of those errors over the
method's grid points, the predicted best and the measured best grid point, and the **regret** of
following the prediction, ``1 - tps_meas(predicted best) / tps_meas(measured best)``: 0 when the
model picks the configuration that really is fastest, 0.25 when its pick runs 25 % slower.

Where every point was timed in the same interleaved repeats, the regret is **paired**
(:func:`paired_regret`): the ratio is taken between two timings of one repeat, and the median over
repeats is kept. A repeat's timings move together (the machine's speed drifts across a run by more
than near-tied configurations differ), so a ratio of medians taken from different repeats measures
that drift as much as the choice; :func:`regret` (the ratio of the medians) stays beside it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: The validation's targets: per speculative method, on ``hetspec validate --quick``.
STEP_ERROR_TARGET = 0.15
TPS_ERROR_TARGET = 0.15
REGRET_TARGET = 0.10
#: The stricter targets of a full run (``hetspec validate`` without ``--quick``) on an idle machine, checked
#: for both backends (the calibrated roofline and the measured operator profile).
FULL_STEP_ERROR_TARGET = 0.05
FULL_TPS_ERROR_TARGET = 0.05
FULL_REGRET_TARGET = 0.02

#: How the acceptance check's regret is measured (:func:`paired_regret`) and what the
#: column beside it is.
REGRET_DEFINITION = (
    "regret = 1 - measured tokens/s of the predicted best / measured tokens/s of the measured best, the two "
    "timed in the same repeat, median over repeats; the measured best is the configuration the predicted best "
    "trails most that way, itself when it trails none. A repeat's timings move together while the machine's "
    "speed drifts across the run, so the ratio is taken inside a repeat. Regret of the medians: the same ratio "
    "of each configuration's median over repeats, against the highest median")
#: The regret of a document whose rows carry no repeat-aligned timings.
MEDIANS_REGRET = "regret = 1 - measured tokens/s of the predicted best / measured tokens/s of the measured best"


def regret_definition(paired: bool, caveat: str = "") -> str:
    """The line that says how a report's regret is measured: paired within repeats (:data:`REGRET_DEFINITION`,
    ``caveat`` after it) where ``paired``, else the ratio of the medians (:data:`MEDIANS_REGRET`)."""
    if not paired:
        return MEDIANS_REGRET
    return f"{REGRET_DEFINITION}; {caveat}" if caveat else REGRET_DEFINITION


def within_full_targets(step_error: float, tps_error: float, regret: float) -> bool:
    """Within the full run's targets (:data:`FULL_STEP_ERROR_TARGET` and the two beside it); NaN is not."""
    return (step_error <= FULL_STEP_ERROR_TARGET and tps_error <= FULL_TPS_ERROR_TARGET
            and regret <= FULL_REGRET_TARGET)


def relative_error(predicted: float, measured: float) -> float:
    """``|predicted - measured| / measured`` (NaN when either is missing or measured is not > 0)."""
    if not (math.isfinite(predicted) and math.isfinite(measured)) or measured <= 0:
        return float("nan")
    return abs(predicted - measured) / measured


def signed_error(predicted: float, measured: float) -> float:
    """``(predicted - measured) / measured``: > 0 when the model predicts more than was measured."""
    if not (math.isfinite(predicted) and math.isfinite(measured)) or measured <= 0:
        return float("nan")
    return (predicted - measured) / measured


def _best(values: Sequence[float]) -> int:
    """The index of the highest value (the first of equals)."""
    return max(range(len(values)), key=lambda i: values[i])


def regret(predicted_tps: Sequence[float], measured_tps: Sequence[float]) -> tuple[float, int, int]:
    """``(regret, index of the predicted best, index of the measured best)`` over one method's grid.

    The predicted best is the point with the highest predicted tokens/s; regret compares the
    *measured* tokens/s of that point with the highest measured tokens/s.
    """
    if len(predicted_tps) != len(measured_tps) or not predicted_tps:
        raise ValueError("regret needs one predicted and one measured value per grid point")
    p_best, m_best = _best(predicted_tps), _best(measured_tps)
    return 1.0 - measured_tps[p_best] / measured_tps[m_best], p_best, m_best


def paired_regret(predicted_tps: Sequence[float],
                  measured_samples: Sequence[Sequence[float]]) -> tuple[float, int, int]:
    """``(regret, index of the predicted best, index of the measured best)`` from repeat-aligned timings.

    ``measured_samples[i][k]`` is point ``i``'s measured tokens/s in repeat ``k`` (every point timed in
    every repeat). Against each point ``c``, the predicted best ``p`` loses ``median_k(1 - s[p][k] /
    s[c][k])``; the measured best is the point it loses most to (``p`` itself, regret 0, when it loses
    to none at the median), and that loss is the regret.
    """
    if len(predicted_tps) != len(measured_samples) or not predicted_tps:
        raise ValueError("regret needs one predicted value and one row of measured repeats per grid point")
    repeats = {len(s) for s in measured_samples}
    if len(repeats) != 1 or 0 in repeats:
        raise ValueError(f"paired regret needs the same number of repeats for every grid point, got {sorted(repeats)}")
    if any(not (math.isfinite(x) and x > 0) for s in measured_samples for x in s):
        raise ValueError("paired regret needs positive measured tokens/s in every repeat")
    p_best = _best(predicted_tps)
    mine = measured_samples[p_best]
    best, loss = p_best, 0.0
    for c, theirs in enumerate(measured_samples):
        c_loss = statistics.median(1.0 - a / b for a, b in zip(mine, theirs))
        if c_loss > loss:
            best, loss = c, c_loss
    return loss, p_best, best


@dataclass(frozen=True)
class MethodSummary:
    method: str
    points: int
    median_step_error: float
    median_tps_error: float
    predicted_best: str
    measured_best: str
    regret: float
    median_tokens_per_step_error: float
    regret_of_medians: float            # 1 - median tps of the predicted best / highest median tps
    fastest_by_median: str              # the point with the highest median tokens/s
    paired: bool                        # regret from repeat-aligned timings (paired_regret)

    @property
    def passes(self) -> bool:
        return (self.median_step_error <= STEP_ERROR_TARGET and self.median_tps_error <= TPS_ERROR_TARGET
                and self.regret <= REGRET_TARGET)

    @property
    def passes_full(self) -> bool:
        return within_full_targets(self.median_step_error, self.median_tps_error, self.regret)

    def to_json(self) -> dict:
        return {"method": self.method, "points": self.points, "median_step_error": self.median_step_error,
                "median_tokens_per_s_error": self.median_tps_error,
                "median_tokens_per_step_error": self.median_tokens_per_step_error,
                "predicted_best": self.predicted_best, "measured_best": self.measured_best, "regret": self.regret,
                "regret_paired": self.paired, "regret_of_medians": self.regret_of_medians,
                "fastest_by_median": self.fastest_by_median,
                "targets": {"step_error": STEP_ERROR_TARGET, "tokens_per_s_error": TPS_ERROR_TARGET,
                            "regret": REGRET_TARGET},
                "passes": self.passes,
                "full_targets": {"step_error": FULL_STEP_ERROR_TARGET, "tokens_per_s_error": FULL_TPS_ERROR_TARGET,
                                 "regret": FULL_REGRET_TARGET},
                "passes_full": self.passes_full}


def summarize_method(method: str, labels: Sequence[str], pred_step: Sequence[float], meas_step: Sequence[float],
                     pred_tps: Sequence[float], meas_tps: Sequence[float], pred_tokens: Sequence[float],
                     meas_tokens: Sequence[float],
                     meas_tps_samples: Sequence[Sequence[float]] | None = None) -> MethodSummary:
    """Median errors, best points and regret of one method's grid (all sequences aligned). With
    ``meas_tps_samples`` (per point, its tokens/s in each repeat), the regret is :func:`paired_regret`;
    :func:`regret` of the medians is kept beside it."""
    step_err = [relative_error(p, m) for p, m in zip(pred_step, meas_step)]
    tps_err = [relative_error(p, m) for p, m in zip(pred_tps, meas_tps)]
    tok_err = [relative_error(p, m) for p, m in zip(pred_tokens, meas_tokens)]
    r_medians, p_best, fastest = regret(list(pred_tps), list(meas_tps))
    r, m_best = r_medians, fastest
    if meas_tps_samples is not None:
        r, _, m_best = paired_regret(list(pred_tps), meas_tps_samples)

    def med(xs):
        xs = [x for x in xs if math.isfinite(x)]
        return statistics.median(xs) if xs else float("nan")
    return MethodSummary(method=method, points=len(labels), median_step_error=med(step_err),
                         median_tps_error=med(tps_err), predicted_best=labels[p_best], measured_best=labels[m_best],
                         regret=r, median_tokens_per_step_error=med(tok_err), regret_of_medians=r_medians,
                         fastest_by_median=labels[fastest], paired=meas_tps_samples is not None)
