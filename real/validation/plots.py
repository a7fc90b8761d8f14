"""PNG plots of ``hetspec validate`` (matplotlib, through :mod:`sim.plots`): they read the result rows only.

Each row is a dict of :func:`real.validation.validate.point_rows` (method, knob, value, label, predicted and
measured step ms and tokens/s, measured min/max over repeats).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from real.validation.grid import KNOB_OF, SPECULATIVE_METHODS
from real.validation.verdict import QUICK_TARGETS
from sim.plots import GRID_ALPHA, finish_axes, new_figure, save_figure

KNOB_AXIS = {"chain": "draft tokens per step γ", "draft-tree": "tree budget M (tokens per round)",
             "medusa": "tree width w (tokens verified per step)"}
PRED_STYLE = {"color": "tab:blue", "marker": "s", "linestyle": "-", "label": "predicted (simulator)"}
MEAS_STYLE = {"color": "tab:orange", "marker": "o", "linestyle": "none", "label": "measured (median, min-max)"}


def _methods(rows) -> list[str]:
    return [m for m in SPECULATIVE_METHODS if any(r["method"] == m for r in rows)]


def _ar(rows):
    return next((r for r in rows if r["method"] == "ar"), None)


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


def _panel(ax, rows, method, y_pred, y_meas, y_lo, y_hi, ylabel, mark_best: bool, ar, measured_best=None):
    pts = sorted((r for r in rows if r["method"] == method), key=lambda r: r["value"])
    xs = [r["value"] for r in pts]
    meas = [r[y_meas] for r in pts]
    err = [[m - r[y_lo] for m, r in zip(meas, pts)], [r[y_hi] - m for m, r in zip(meas, pts)]]
    ax.errorbar(xs, meas, yerr=err, capsize=3, **MEAS_STYLE)
    pred = [r[y_pred] for r in pts]
    if any(_finite(p) for p in pred):
        ax.plot(xs, pred, **PRED_STYLE)
    if ar is not None:
        ax.axhline(ar[y_meas], color="tab:orange", linestyle=":", linewidth=1, label="ar measured")
        if _finite(ar[y_pred]):
            ax.axhline(ar[y_pred], color="tab:blue", linestyle=":", linewidth=1, label="ar predicted")
    if mark_best and pts:
        # the report's measured best (paired within repeats) where it names one of these points, else the highest median
        labels = [r.get("label") for r in pts]
        paired = measured_best in labels
        i_m = labels.index(measured_best) if paired else max(range(len(pts)), key=lambda i: meas[i])
        how = "paired within repeats" if paired else "highest median"
        ax.plot([xs[i_m]], [meas[i_m]], marker="o", markersize=16, markerfacecolor="none",
                markeredgecolor="tab:red", linestyle="none",
                label=f"measured optimum, {how} ({KNOB_OF[method][1]}={xs[i_m]})")
        if any(_finite(p) for p in pred):
            i_p = max((i for i in range(len(pts)) if _finite(pred[i])), key=lambda i: pred[i])
            ax.plot([xs[i_p]], [meas[i_p]], marker="*", markersize=16, color="tab:green", linestyle="none",
                    label=f"predicted optimum, as measured ({KNOB_OF[method][1]}={xs[i_p]})")
    if method == "medusa":
        ax.set_xscale("log", base=2)
    ax.set_xticks(xs)
    ax.set_xticklabels([str(x) for x in xs])
    finish_axes(ax, title=method, xlabel=KNOB_AXIS[method], ylabel=ylabel)


def plot_metric(rows: Sequence[dict], path: Path, title: str, y_pred: str, y_meas: str, y_lo: str, y_hi: str,
                ylabel: str, mark_best: bool, measured_best: dict[str, str] | None = None) -> Path:
    """One panel per speculative method; ``measured_best``: method -> the label of its measured best (the
    acceptance check's, paired within repeats), which ``mark_best`` circles (else the highest median)."""
    methods = _methods(rows)
    fig, axes = new_figure(1, max(len(methods), 1), figsize=(5.2 * max(len(methods), 1), 4.2), squeeze=False)
    for ax, method in zip(axes[0], methods):
        _panel(ax, rows, method, y_pred, y_meas, y_lo, y_hi, ylabel, mark_best, _ar(rows),
               (measured_best or {}).get(method))
    fig.suptitle(title)
    return save_figure(fig, path)


def plot_step_latency(rows, path: Path, subtitle: str) -> Path:
    return plot_metric(rows, path, f"Step latency, predicted vs measured ({subtitle})", "pred_step_ms", "meas_step_ms",
                       "meas_step_ms_min", "meas_step_ms_max", "step latency (ms per decode step)", False)


def plot_tokens_per_s(rows, path: Path, subtitle: str, measured_best: dict[str, str] | None = None) -> Path:
    return plot_metric(rows, path, f"Decode throughput, predicted vs measured ({subtitle})", "pred_tokens_per_s",
                       "meas_tokens_per_s", "meas_tokens_per_s_min", "meas_tokens_per_s_max",
                       "throughput (tokens/s)", True, measured_best)


def plot_errors(rows, path: Path, subtitle: str) -> Path:
    """Signed relative errors per method: step latency and tokens/s, with the ±target band."""
    methods = ["ar"] + _methods(rows)
    fig, ax = new_figure(figsize=(7.5, 4.2))
    for j, (key, label, color) in enumerate((("step_error_signed", "step latency", "tab:blue"),
                                             ("tps_error_signed", "tokens/s", "tab:orange"))):
        for i, method in enumerate(methods):
            vals = [100 * r[key] for r in rows if r["method"] == method and _finite(r[key])]
            xs = [i + (j - 0.5) * 0.3] * len(vals)
            ax.plot(xs, vals, marker="o", linestyle="none", color=color, alpha=0.7,
                    label=label if i == 0 else None)
    ax.axhspan(-100 * QUICK_TARGETS.absolute_error, 100 * QUICK_TARGETS.absolute_error, color="tab:green", alpha=0.12,
               label=f"±{100 * QUICK_TARGETS.absolute_error:.0f} % (target for the medians)")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(methods)))
    ax.set_xticklabels(methods)
    finish_axes(ax, title=f"Prediction error per grid point ({subtitle})",
                ylabel="(predicted − measured) / measured (%)", legend_fontsize=8, grid="y")
    return save_figure(fig, path)


def plot_random_weight(rows: Sequence[dict], path: Path, subtitle: str) -> Path:
    """Step latency against tokens per step for the random-weight timing models (log-log)."""
    models = sorted({r["model"] for r in rows})
    fig, ax = new_figure(figsize=(6.5, 4.5))
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
    for color, model in zip(colors, models):
        pts = sorted((r for r in rows if r["model"] == model), key=lambda r: r["tokens"])
        xs = [r["tokens"] for r in pts]
        ax.plot(xs, [r["meas_ms"] for r in pts], marker="o", linestyle="none", color=color,
                label=f"{model} measured")
        ax.plot(xs, [r["pred_ms"] for r in pts], marker="s", linestyle="-", color=color, alpha=0.6,
                label=f"{model} predicted")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=GRID_ALPHA)   # log-log: minor ticks too
    finish_axes(ax, title=f"Random-weight timing run: one forward step ({subtitle})",
                xlabel="tokens in the step q (a verification of q − 1 drafts)", ylabel="step latency (ms)", grid=None)
    return save_figure(fig, path)
