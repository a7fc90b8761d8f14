"""The heterogeneous section's acceptance check: per method (hcmp, dovetail, alspec, streaming) the median
step-latency and tokens/s errors, the regret of the predicted best and the largest single error, against
the section's targets (pure functions of the section's document, no torch)."""

from __future__ import annotations

import math
import statistics

from real.validation.metrics import paired_regret, regret, relative_error

#: Targets of the heterogeneous section: median errors, regret of the predicted best, and (hcmp,
#: dovetail) the largest error of a single configuration.
STEP_TARGET = 0.10
TPS_TARGET = 0.10
REGRET_TARGET = 0.05
CONFIG_LIMIT = 0.20
#: Methods whose every configuration must be within :data:`CONFIG_LIMIT`.
CONFIG_LIMITED = ("hcmp", "dovetail")


def _med(xs) -> float:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return statistics.median(xs) if xs else float("nan")


def _max(xs) -> float:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return max(xs) if xs else float("nan")


def _rows(doc: dict) -> dict[str, list[tuple]]:
    """Per method: (label, predicted step ms, measured step ms, predicted tokens/s, measured tokens/s, the measured
    step ms of each repeat or None)."""
    out: dict[str, list] = {}
    h = doc.get("hcmp")
    if h and h.get("pred_step_ms"):
        reps = h.get("meas_step_ms_samples") or [None] * len(h["ratios"])
        out["hcmp"] = [(f"r={r}", p, m, pt, mt, k) for r, p, m, pt, mt, k in
                       zip(h["ratios"], h["pred_step_ms"], h["meas_step_ms"], h["pred_tokens_per_s"],
                           h["meas_tokens_per_s"], reps)]
    d = doc.get("dovetail")
    if d:
        out["dovetail"] = [(r["label"], r["pred_step_ms"], r["meas_step_ms"], r["pred_tokens_per_s"],
                            r["meas_tokens_per_s"], r.get("meas_step_ms_samples"))
                           for r in d["placements"] if r.get("pred_step_ms") is not None]
    a = doc.get("alspec")
    if a and a.get("rows"):
        out["alspec"] = [(f"S={r['window']}, lambda={r['lambda']}", r["pred_step_ms"], r["meas_step_ms"],
                          r["pred_tokens_per_s"], r["meas_tokens_per_s"], r.get("meas_step_ms_samples"))
                         for r in a["rows"] if "pred_step_ms" in r]
    st = doc.get("streaming")
    if st and st.get("rows"):
        out["streaming"] = [(f"{r['resident']} resident", r["pred_step_ms"], r["meas_step_ms"], r["pred_tokens_per_s"],
                             r["meas_tokens_per_s"], r.get("meas_step_ms_samples"))
                            for r in st["rows"] if "pred_step_ms" in r]
    return {k: v for k, v in out.items() if v}


def repeat_tokens_per_s(rows) -> list[list[float]] | None:
    """Each configuration's tokens/s in each repeat: its measured tokens/s times its median step over that repeat's
    step (greedy decoding emits the same tokens in every repeat, so a repeat's tokens/s is the configuration's
    tokens per step over that repeat's step). None where a row has no repeats or the rows' repeats differ in number
    or hold a step that is not positive."""
    reps = [r[5] for r in rows]
    if any(not k for k in reps) or len({len(k) for k in reps}) != 1:
        return None
    if any(not (math.isfinite(x) and x > 0) for k in reps for x in k) or any(not (r[2] > 0 and r[4] > 0) for r in rows):
        return None
    return [[r[4] * r[2] / x for x in r[5]] for r in rows]


def method_check(method: str, rows, doc: dict) -> dict:
    """One method's errors, best configurations, regret and verdict. The regret is paired
    (:func:`real.validation.metrics.paired_regret` on :func:`repeat_tokens_per_s`) where every configuration
    was timed in every repeat, the ratio of the medians otherwise; the ratio of the medians is kept beside it.
    ALSpec's best configurations are chosen under its agreement floor (its section's own regret), and its verdict
    fails where the predicted best falls below the floor on the evaluation prompts."""
    step = [relative_error(r[1], r[2]) for r in rows]
    tps = [relative_error(r[3], r[4]) for r in rows]
    paired = False
    if method == "alspec":       # the best under the agreement floor
        a = doc["alspec"]
        reg, p_best, m_best = a.get("regret"), a.get("predicted_best"), a.get("measured_best")
        medians = reg
    else:
        medians, pi, mi = regret([r[3] for r in rows], [r[4] for r in rows])
        reg = medians
        samples = repeat_tokens_per_s(rows)
        if samples is not None:
            reg, pi, mi = paired_regret([r[3] for r in rows], samples)
            paired = True
        p_best, m_best = rows[pi][0], rows[mi][0]
    worst = _max(max(a, b) for a, b in zip(step, tps))
    out = {"configs": len(rows), "median_step_error": _med(step), "median_tokens_per_s_error": _med(tps),
           "max_error": worst, "predicted_best": p_best, "measured_best": m_best, "regret": reg,
           "regret_of_medians": medians, "regret_paired": paired}
    checks = [out["median_step_error"] <= STEP_TARGET, out["median_tokens_per_s_error"] <= TPS_TARGET,
              reg is not None and reg <= REGRET_TARGET]
    if method in CONFIG_LIMITED:
        checks.append(worst <= CONFIG_LIMIT)
    if method == "alspec":
        # a predicted best that keeps the floor on the calibration prompts but not on the evaluation prompts is
        # not a pick the user could keep: whatever its speed, it does not meet the targets
        out["predicted_best_below_floor"] = doc["alspec"].get("predicted_best_meets_floor") is False
        checks.append(not out["predicted_best_below_floor"])
    out["meets_targets"] = all(checks)
    return out


def hetero_summary(doc: dict) -> dict:
    """Per method with predictions: :func:`method_check`; and the targets."""
    return {"targets": {"step_error": STEP_TARGET, "tokens_per_s_error": TPS_TARGET, "regret": REGRET_TARGET,
                        "max_config_error": CONFIG_LIMIT, "max_config_error_methods": list(CONFIG_LIMITED)},
            "methods": {m: method_check(m, rows, doc) for m, rows in _rows(doc).items()}}
