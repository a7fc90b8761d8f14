"""Prediction-vs-measurement metrics (pure functions, no torch): relative errors and regret, which the
heterogeneous section judges its sweeps by; the main grid's paired verdict is :mod:`real.validation.verdict`.

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
