"""The heterogeneous section's acceptance check: per method (hcmp, dovetail, alspec, streaming) the median
step-latency and tokens/s errors, the regret of the predicted best and the largest single error, against
the section's targets (pure functions of the section's document, no torch)."""

from __future__ import annotations

import math
import statistics

from real.validation.metrics import regret, relative_error

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


def _rows(doc: dict) -> dict[str, list[tuple[str, float, float, float, float]]]:
    """Per method: (label, predicted step ms, measured step ms, predicted tokens/s, measured tokens/s)."""
    out: dict[str, list] = {}
    h = doc.get("hcmp")
    if h and h.get("pred_step_ms"):
        out["hcmp"] = [(f"r={r}", p, m, pt, mt) for r, p, m, pt, mt in
                       zip(h["ratios"], h["pred_step_ms"], h["meas_step_ms"], h["pred_tokens_per_s"],
                           h["meas_tokens_per_s"])]
    d = doc.get("dovetail")
    if d:
        out["dovetail"] = [(r["label"], r["pred_step_ms"], r["meas_step_ms"], r["pred_tokens_per_s"],
                            r["meas_tokens_per_s"]) for r in d["placements"] if r.get("pred_step_ms") is not None]
    a = doc.get("alspec")
    if a and a.get("rows"):
        out["alspec"] = [(f"S={r['window']}, lambda={r['lambda']}", r["pred_step_ms"], r["meas_step_ms"],
                          r["pred_tokens_per_s"], r["meas_tokens_per_s"]) for r in a["rows"] if "pred_step_ms" in r]
    st = doc.get("streaming")
    if st and st.get("rows"):
        out["streaming"] = [(f"{r['resident']} resident", r["pred_step_ms"], r["meas_step_ms"], r["pred_tokens_per_s"],
                             r["meas_tokens_per_s"]) for r in st["rows"] if "pred_step_ms" in r]
    return {k: v for k, v in out.items() if v}


def method_check(method: str, rows, doc: dict) -> dict:
    """One method's errors, best configurations, regret and verdict."""
    step = [relative_error(p, m) for _, p, m, _, _ in rows]
    tps = [relative_error(pt, mt) for _, _, _, pt, mt in rows]
    if method == "alspec":       # the best under the agreement floor
        a = doc["alspec"]
        reg, p_best, m_best = a.get("regret"), a.get("predicted_best"), a.get("measured_best")
    else:
        reg, pi, mi = regret([r[3] for r in rows], [r[4] for r in rows])
        p_best, m_best = rows[pi][0], rows[mi][0]
    worst = _max(max(a, b) for a, b in zip(step, tps))
    out = {"configs": len(rows), "median_step_error": _med(step), "median_tokens_per_s_error": _med(tps),
           "max_error": worst, "predicted_best": p_best, "measured_best": m_best, "regret": reg}
    checks = [out["median_step_error"] <= STEP_TARGET, out["median_tokens_per_s_error"] <= TPS_TARGET,
              reg is not None and reg <= REGRET_TARGET]
    if method in CONFIG_LIMITED:
        checks.append(worst <= CONFIG_LIMIT)
    out["meets_targets"] = all(checks)
    return out


def hetero_summary(doc: dict) -> dict:
    """Per method with predictions: :func:`method_check`; and the targets."""
    return {"targets": {"step_error": STEP_TARGET, "tokens_per_s_error": TPS_TARGET, "regret": REGRET_TARGET,
                        "max_config_error": CONFIG_LIMIT, "max_config_error_methods": list(CONFIG_LIMITED)},
            "methods": {m: method_check(m, rows, doc) for m, rows in _rows(doc).items()}}
