"""The paired verdict of ``hetspec validate`` and ``hetspec demo`` (pure functions, no torch).

Every configuration is timed in A/B blocks with ``ar`` (:func:`real.run.repeats.paired_blocks`), one pair
per evaluation prompt, so each of its timings has an ``ar`` timing of the same prompt taken just before or
after it in the same process. Two runs back to back slow down together on a shared machine: their ratio holds
while the absolute speed moves.

For configuration ``c``, its blocks ``b`` and prompts ``p`` (decode seconds ``t``, decode tokens ``n``):

- measured speedup ``S_c = (sum n_c / sum t_c) / (sum n_ar / sum t_ar)`` over all its pairs;
- predicted speedup ``P_c = pred_tps_c / pred_tps_ar`` (both priced from the calibration alone);
- speedup error ``|P_c - S_c| / S_c``.

Per speculative method the headline is the **median speedup error** over its configurations and the
**regret** of the predicted best ``p = argmax_c P_c``: ``1 - S_p / max_c S_c``; where ``p`` is not the measured
best ``m`` (picked among many noisy speedups), ``1 - S_p|m`` of the two timed head to head in A/B blocks after
the grid (:func:`contests`; 0 where ``p`` wins), which tells their ratio closer than two speedups over ``ar``.

The **noise band** of a run is the spread of its ``ar`` timings across the run,
``(P90 - P10) / median`` of the ``ar`` seconds per token of every pair. An absolute error (step latency,
tokens/s) is judged against its target only where the band is narrower than that target; otherwise the
verdict says it cannot judge it, and by how many points the band is wider. The paired figures have a band of
their own (:func:`paired_band`): how far the noise leaves each measured speedup uncertain, the half-width of
its :data:`CONFIDENCE` interval, from a bootstrap that redraws each prompt's pairs among its blocks (a
prompt's own speedup is not noise, so prompts are never mixed); the paired figures are judged where that
half-width is under their target. A relative error above :data:`ERROR_LIMIT` is never presented as a result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from real.run.repeats import finite_median
from real.validation.metrics import relative_error
from real.validation.trust import band

#: Methods the targets are set for (``ar`` is the baseline every speedup is taken against).
SPECULATIVE = ("chain", "draft-tree", "medusa")
#: A relative error above this is shown as out of range, not as a result.
ERROR_LIMIT = 1.0
#: The share of a measured speedup's bootstrap distribution its interval covers, and the draws it takes (a
#: fixed seed: the same pairs give the same interval).
CONFIDENCE = 0.90
BOOTSTRAP_DRAWS = 2000


@dataclass(frozen=True)
class Targets:
    """What a run is judged against."""

    label: str
    speedup_error: float      # median error of the predicted speedup over ar, per speculative method
    regret: float             # regret of the predicted best configuration, per speculative method
    absolute_error: float     # median step-latency and tokens/s errors, judged only inside the noise band


QUICK_TARGETS = Targets("quick", speedup_error=0.10, regret=0.05, absolute_error=0.15)
FULL_TARGETS = Targets("full", speedup_error=0.05, regret=0.02, absolute_error=0.05)


def noise_band(rows: Sequence[dict]) -> float:
    """The band of every ``ar`` timing the run's pairs took: each pair's seconds per token of ``ar``."""
    ar = next((r["pairs"] for r in rows if r["method"] == "ar"), {"ar_decode_s": [], "ar_tokens": []})
    return band([t / n for tb, nb in zip(ar["ar_decode_s"], ar["ar_tokens"]) for t, n in zip(tb, nb) if n > 0])


def pair_tables(row: dict) -> tuple[np.ndarray, ...]:
    """``(t, n, t_ar, n_ar)`` of ``row``'s pairs, each blocks x prompts."""
    return tuple(np.asarray(row["pairs"][k], dtype=float) for k in ("decode_s", "tokens", "ar_decode_s", "ar_tokens"))


def pooled(t, n, t_ar, n_ar, axis=-1) -> np.ndarray:
    """The speedup of pairs summed over ``axis``: tokens/s over the paired ar's."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (n.sum(axis) / t.sum(axis)) / (n_ar.sum(axis) / t_ar.sum(axis))


def measured_speedup(row: dict) -> float:
    """``row``'s measured speedup over ar, from all its pairs (module docstring)."""
    return _pooled_all(pair_tables(row))


def _pooled_all(tables) -> float:
    return float(pooled(*(x.reshape(1, -1) for x in tables))[0]) if tables[0].size else float("nan")


def speedup_interval(row: dict) -> tuple[float, float]:
    """The :data:`CONFIDENCE` interval of ``row``'s measured speedup: a bootstrap that redraws, for every prompt
    apart, its ``B`` pairs among its blocks' with replacement, its reach from the measured speedup widened by
    ``sqrt(B / (B - 1))`` for ``B`` blocks (the small-sample correction of a bootstrap's spread). NaN with fewer
    than two blocks: nothing to tell noise by."""
    return _interval(pair_tables(row))[1:]


def _interval(tables) -> tuple[float, float, float]:
    """(measured speedup, low, high) of :func:`speedup_interval`."""
    centre = _pooled_all(tables)
    blocks, prompts = tables[0].shape if tables[0].ndim == 2 else (0, 0)
    if blocks < 2:
        return centre, float("nan"), float("nan")
    # each draw: for every prompt, as many of its pairs as it has blocks, drawn among them with replacement
    pick = np.random.default_rng(0).integers(0, blocks, size=(BOOTSTRAP_DRAWS, blocks, prompts))
    cols = np.arange(prompts)
    draws = pooled(*(x[pick, cols] for x in tables), axis=(-2, -1))
    lo, hi = np.quantile(draws, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])
    widen = math.sqrt(blocks / (blocks - 1))     # a bootstrap of B values reads the spread sqrt((B-1)/B) narrow
    return centre, float(centre - widen * (centre - lo)), float(centre + widen * (hi - centre))


def speedup_uncertainty(row: dict) -> float:
    """The half-width of :func:`speedup_interval`, as a share of the measured speedup."""
    s, lo, hi = _interval(pair_tables(row))
    return (hi - lo) / (2 * s) if s > 0 else float("nan")


def paired_band(rows: Sequence[dict]) -> float:
    """The median over the speculative configurations of their :func:`speedup_uncertainty`."""
    return finite_median(speedup_uncertainty(r) for r in rows if r["method"] in SPECULATIVE)


def priced(rows: Sequence[dict], pricing: str | None) -> list[dict]:
    """The rows with the predictions of ``pricing`` (None: the roofline at the row's top level; ``profiled``:
    the measured operator profile under ``row["profiled"]``) at their top level; rows it did not price left out."""
    if pricing is None:
        return [r for r in rows if not r.get("missing")]
    return [{**r, **r[pricing]} for r in rows if pricing in r and not r[pricing].get("missing")]


def method_verdicts(rows: Sequence[dict], settled: dict | None = None) -> list[dict]:
    """Per method of ``rows`` (one pricing): its speedup errors, regret, best configurations and absolute errors.
    ``settled``: per method, the head-to-head pairings of :func:`contests` (``against``: the measured best;
    ``pairs``: per predicted best, its pairs with it)."""
    ar = next((r for r in rows if r["method"] == "ar"), None)
    if ar is None:
        return []
    out = []
    for method in ("ar",) + SPECULATIVE:
        pts = [r for r in rows if r["method"] == method]
        if not pts:
            continue
        measured = [measured_speedup(r) for r in pts]
        predicted = [r["pred_tokens_per_s"] / ar["pred_tokens_per_s"] for r in pts]
        errors = [relative_error(p, m) for p, m in zip(predicted, measured)]
        p_best = max(range(len(pts)), key=lambda i: predicted[i])
        m_best = max(range(len(pts)), key=lambda i: measured[i])
        pairing = (settled or {}).get(method, {})
        duel = pairing["pairs"].get(pts[p_best]["label"]) if pairing.get("against") == pts[m_best]["label"] else None
        out.append({
            "method": method, "points": len(pts),
            "median_speedup_error": finite_median(errors),
            "regret": (max(0.0, 1.0 - measured_speedup({"pairs": duel})) if duel else
                       1.0 - measured[p_best] / measured[m_best] if measured[m_best] > 0 else float("nan")),
            "regret_head_to_head": bool(duel),
            "predicted_best": pts[p_best]["label"], "measured_best": pts[m_best]["label"],
            "predicted_best_speedup": predicted[p_best], "measured_best_speedup": measured[m_best],
            "median_step_error": finite_median(relative_error(r["pred_step_ms"], r["meas_step_ms"]) for r in pts),
            "median_tokens_per_s_error": finite_median(relative_error(r["pred_tokens_per_s"], r["meas_tokens_per_s"])
                                                 for r in pts),
            "speedups": {r["label"]: {"predicted": p, "measured": m} for r, p, m in zip(pts, predicted, measured)},
        })
    return out


def contests(verdicts: Sequence[dict]) -> dict:
    """Per speculative method whose predicted best (by any pricing) is not its measured best: ``(measured best,
    the predicted bests that are not it)``, the pairings that settle the regret (module docstring)."""
    out: dict = {}
    for m in (m for v in verdicts for m in v["methods"] if m["method"] != "ar"):
        against, rivals = out.setdefault(m["method"], (m["measured_best"], []))
        if against == m["measured_best"] and m["predicted_best"] not in (against, *rivals):
            rivals.append(m["predicted_best"])
    return {k: v for k, v in out.items() if v[1]}


def judged(band_value: float, target: float) -> dict:
    """Whether a figure with target ``target`` can be judged under ``band_value``, and by how much it cannot."""
    ok = math.isfinite(band_value) and band_value < target
    return {"judged": ok, "band": band_value, "target": target,
            "wider_by": None if ok or not math.isfinite(band_value) else band_value - target}


def verdict(rows: Sequence[dict], targets: Targets, pricing: str | None = None, settled: dict | None = None) -> dict:
    """The verdict of one pricing of a run's rows: per method, and whether its figures can be judged; ``settled``:
    :func:`method_verdicts`."""
    methods = method_verdicts(priced(rows, pricing), settled)
    absolute = judged(noise_band(rows), targets.absolute_error)
    paired = judged(paired_band(rows), targets.speedup_error)
    for m in methods:
        if m["method"] == "ar":
            continue
        m["meets_paired"] = (m["median_speedup_error"] <= targets.speedup_error and m["regret"] <= targets.regret)
        m["meets_absolute"] = (m["median_step_error"] <= targets.absolute_error
                               and m["median_tokens_per_s_error"] <= targets.absolute_error)
    return {"pricing": pricing or "roofline", "targets": asdict(targets), "methods": methods,
            "noise_band": absolute["band"], "absolute": absolute, "paired": paired}


def pct(x: float | None, limit: bool = True) -> str:
    """A share as ``12.3 %``; NaN as n/a; above :data:`ERROR_LIMIT` (with ``limit``) as out of range."""
    if x is None or not math.isfinite(x):
        return "n/a"
    if limit and x > ERROR_LIMIT:
        return f"> {100 * ERROR_LIMIT:.0f} % (not a result)"
    return f"{100 * x:.1f} %"


def headline(v: dict) -> str:
    """One line: the paired figures per speculative method, and how far the machine's noise lets them be judged."""
    t = v["targets"]
    spec = [m for m in v["methods"] if m["method"] != "ar"]
    figures = "; ".join(f"{m['method']} speedup error {pct(m['median_speedup_error'])}, regret {pct(m['regret'])}"
                        for m in spec) or "no speculative method measured"
    p, a = v["paired"], v["absolute"]
    paired = f"paired band ±{pct(p['band'], False)} ({100 * CONFIDENCE:.0f} % interval of a measured speedup)"
    if not p["judged"]:
        judgement = (f"{paired} is wider than the {pct(t['speedup_error'], False)} target"
                     + (f" by {100 * p['wider_by']:.1f} points" if p["wider_by"] is not None else "")
                     + ": too noisy to judge")
    elif spec and all(m["meets_paired"] for m in spec):
        judgement = f"{paired}: meets the {t['label']} targets ({pct(t['speedup_error'], False)}, {pct(t['regret'], False)})"
    else:
        missed = [m["method"] for m in spec if not m["meets_paired"]]
        judgement = f"{paired}: misses the {t['label']} targets: {', '.join(missed)}"
    absolute = (f"noise band {pct(a['band'], False)}: absolute errors judged against {pct(t['absolute_error'], False)}"
                if a["judged"] else
                f"noise band {pct(a['band'], False)}: absolute errors not judged (band wider than the "
                f"{pct(t['absolute_error'], False)} target"
                + (f" by {100 * a['wider_by']:.1f} points)" if a["wider_by"] is not None else ")"))
    return f"{v['pricing']}: {figures} — {judgement}; {absolute}"


def headline_figures(verdicts: Sequence[dict]) -> dict:
    """The flat dict of a run record's headline: per pricing and method, its speedup error and regret (%), and
    the noise band (%)."""
    out: dict = {}
    for v in verdicts:
        prefix = "" if v["pricing"] == "roofline" else f"{v['pricing']} "
        for m in v["methods"]:
            if m["method"] == "ar":
                continue
            for key, name in (("median_speedup_error", "speedup error %"), ("regret", "regret %")):
                out[f"{prefix}{m['method']} {name}"] = m[key]
    if verdicts:
        out |= {"noise band %": verdicts[0]["noise_band"], "paired band %": verdicts[0]["paired"]["band"]}
    return {k: round(100 * x, 2) if math.isfinite(x) else None for k, x in out.items()}


def record(kind: str, verdicts: Sequence[dict], line: str | None = None) -> dict:
    """The ``record`` object of a results.json: its kind, the headline figures and one verdict line."""
    return {"kind": kind, "headline": headline_figures(verdicts),
            "verdict": line if line is not None else (headline(verdicts[0]) if verdicts else "no verdict")}


def verdict_table(v: dict) -> list[str]:
    """The verdict of one pricing as a plain-text table, one method a row."""
    lines = [f"{'method':<11} {'speedup err':>12} {'regret':>8} {'predicted best':>16} {'measured best':>16} "
             f"{'step err':>9} {'tok/s err':>9}"]
    absolute = v["absolute"]["judged"]
    for m in v["methods"]:
        if m["method"] == "ar":
            continue
        step, tps = (pct(m["median_step_error"]), pct(m["median_tokens_per_s_error"])) if absolute else \
            ("not judged", "not judged")
        lines.append(f"{m['method']:<11} {pct(m['median_speedup_error']):>12} {pct(m['regret']):>8} "
                     f"{m['predicted_best']:>16} {m['measured_best']:>16} {step:>9} {tps:>9}")
    return lines


def verdict_lines(verdicts: Sequence[dict]) -> list[str]:
    """Every pricing's verdict as printed: its headline, then its table."""
    out = []
    for v in verdicts:
        out += ["", headline(v)] + [f"  {line}" for line in verdict_table(v)]
    return out
