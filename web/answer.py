"""What the page shows for one set of controls: every number comes from the simulator's own functions.

- the best configuration of each chosen method: :func:`sim.optimizer.optimize`, as ``hetspec predict``;
- tokens/s against the tree width, the draft depth and the partition ratio: the rows of that same
  search, the best of each width (depth) and, for the ratio, the best configuration's own rows;
- one step's operators on the device's roofline: :func:`sim.step_graph.build_step_graph` and
  :func:`sim.step_timing.price_step`, as ``hetspec step``;
- the simulated step as a Chrome trace: :func:`sim.engine.simulate` and :func:`sim.trace_files.to_chrome_trace`,
  as ``hetspec simulate --trace``.

The names in a query are resolved by :class:`web.catalog.Catalog` (choices only, never a path).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from hwmodels.errors import HetSpecError, UnknownNameError
from sim.commands.predict import check_positions, describe_config
from sim.optimizer import OptimizeResult, optimize
from sim.step_graph import build_step_graph
from sim.step_timing import price_step
from sim.strategies import available_methods
from sim.strategies.base import Problem
from sim.whatif import WhatIf, scale_acceptance, scale_platform
from web.catalog import Catalog

#: Decode steps of a downloaded trace (``hetspec simulate``'s default).
TRACE_STEPS = 20
#: Knobs whose curve the page draws (tokens/s against the knob, the best row of each value).
CURVE_KNOBS = ("tree_width", "draft_depth")
#: Knobs that, with the ratio left free, name one configuration's rows of the ratio curve.
STRUCTURE_KNOBS = ("tree_width", "draft_depth", "device", "draft_device", "draft_model", "tree_shape")


@dataclass(frozen=True)
class Query:
    """The page's controls: names as the CLI takes them, plus the what-if scalings."""

    model: str
    platform: str
    methods: tuple[str, ...] = ("all",)
    acceptance: str | None = None
    context: int = 256
    batch: int = 1
    dtype: str | None = None
    whatif: WhatIf = field(default_factory=WhatIf)

    @property
    def method_names(self) -> tuple[str, ...]:
        """The chosen methods (``all``: every method with a strategy); an unknown one is one line."""
        known = available_methods()
        if not self.methods:
            raise HetSpecError("choose at least one method")
        if "all" in self.methods:
            return tuple(known)
        for m in self.methods:
            if m not in known:
                raise UnknownNameError("method", m, known)
        return tuple(dict.fromkeys(self.methods))


# ---------------------------------------------------------------------- the problem
def build_problem(query: Query, catalog: Catalog) -> Problem:
    """The problem ``hetspec predict`` would price for these controls, with the what-if scalings applied."""
    model = catalog.model(query.model)
    check_positions(model, query.context, names=("context", "new tokens"))
    acceptance = scale_acceptance(catalog.acceptance(query.acceptance), query.whatif.acceptance)
    return Problem(model=model, platform=scale_platform(catalog.platform(query.platform), query.whatif),
                   acceptance=acceptance, context=query.context, batch=query.batch, dtype=query.dtype)


# ---------------------------------------------------------------------- the searches
def search(problem: Problem, methods: Sequence[str]) -> tuple[dict[str, OptimizeResult], dict[str, str]]:
    """Each method's search, and the one-line reason of each method that cannot run this problem."""
    results, reasons = {}, {}
    for method in methods:
        try:
            results[method] = optimize(problem, method)
        except HetSpecError as exc:
            reasons[method] = str(exc)
    return results, reasons


def plain(value):
    """A JSON value: numpy scalars as Python ones, NaN and infinities as None, tuples as lists."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def best_row(method: str, result: OptimizeResult) -> dict:
    b = result.best
    return {"method": method, "config": describe_config(b), "tree_width": plain(b["tree_width"]),
            "draft_depth": plain(b["draft_depth"]), "partition_ratio": plain(b["partition_ratio"]),
            "device": b["device"], "draft_device": b.get("draft_device"), "tokens_per_s": plain(b["tokens_per_s"]),
            "step_ms": plain(b["step_s"] * 1e3), "tokens_per_step": plain(b["tokens_per_step"]),
            "speedup_vs_ar": plain(b["speedup_vs_ar"]), "ar_tokens_per_s": plain(result.ar_tokens_per_s),
            "evaluated": result.rows}


def verdict(rows: Sequence[dict]) -> dict:
    """The fastest method, and whether any speculative method beats ``ar`` on its own device."""
    if not rows:
        return {"best": None, "pays": False, "text": "No chosen method can run this problem (reasons below)."}
    best = max(rows, key=lambda r: r["tokens_per_s"] or 0.0)
    spec = [r for r in rows if r["method"] != "ar" and (r["speedup_vs_ar"] or 0.0) > 1.0]
    if best["method"] == "ar" or not spec:
        return {"best": best["method"], "pays": False,
                "text": f"Speculation does not pay on this box: no chosen method beats ar "
                        f"({best['ar_tokens_per_s'] or 0.0:.2f} tokens/s on {best['device']})."}
    return {"best": best["method"], "pays": True,
            "text": f"Fastest: {best['method']} at {best['tokens_per_s']:.2f} tokens/s, "
                    f"{best['speedup_vs_ar']:.2f}x over ar on the same device."}


def curves(result: OptimizeResult) -> dict:
    """Tokens/s against each knob that varies in the search (the best row of each value), and against the
    partition ratio for the best configuration's structure; each with the optimum."""
    cols, best = result.columns, result.best
    out = {}
    for knob in CURVE_KNOBS:
        top: dict = {}
        for value, tps in zip(cols[knob], cols["tokens_per_s"]):
            if value is not None and value == value:
                top[value] = max(top.get(value, -math.inf), tps)
        if len(top) > 1:
            xs = sorted(top)
            out[knob] = {"x": plain(xs), "y": plain([top[x] for x in xs]), "best_x": plain(best[knob]),
                         "best_y": plain(best["tokens_per_s"])}
    same = [i for i in range(result.rows)
            if all(cols[k][i] == best[k] for k in STRUCTURE_KNOBS if k in cols)
            and cols["partition_ratio"][i] is not None and cols["partition_ratio"][i] == cols["partition_ratio"][i]]
    if len(same) > 1:
        points = sorted((cols["partition_ratio"][i], cols["tokens_per_s"][i]) for i in same)
        out["partition_ratio"] = {"x": plain([p[0] for p in points]), "y": plain([p[1] for p in points]),
                                  "best_x": plain(best["partition_ratio"]), "best_y": plain(best["tokens_per_s"])}
    return out


def roofline(problem: Problem, method: str, result: OptimizeResult) -> dict:
    """The best configuration's verify step on its target device, as ``hetspec step`` prices it: q = the
    tree width, each operator's intensity, attained FLOP/s, time and bound, and the device's two roofs."""
    best = result.best
    device = problem.platform.device(str(best["device"]).split(",")[0])
    tokens = int(best["tree_width"] or 1)
    graph = build_step_graph(problem.model, tokens, problem.context, problem.batch, problem.dtype)
    price = price_step(graph, device)
    ops = []
    for p in price.ops:
        d = p.to_dict()
        ops.append({"name": d["name"], "count": d["count"], "flops": d["flops"], "bytes": d["bytes"],
                    "intensity": d["intensity"], "time_ms": d["time_s"] * 1e3, "bound": d["bound"],
                    "attained_flops": d["flops"] / d["time_s"] if d["time_s"] > 0 else None})
    return {"method": method, "device": device.name, "tokens": tokens, "context": graph.context,
            "batch": graph.batch, "dtype": graph.dtype, "total_ms": price.total_s * 1e3,
            "peak_flops": device.peak_flops_per_s(graph.dtype), "mem_bw": device.mem_bw_bytes_per_s,
            "compute_efficiency": device.compute_efficiency, "bw_efficiency": device.bw_efficiency,
            "command": f"hetspec step --model {problem.model.name} --platform {problem.platform.name} "
                       f"--device {device.name} --tokens {tokens} --context {graph.context} --batch {graph.batch}",
            "ops": ops}


def answer(query: Query, catalog: Catalog) -> dict:
    """Everything the page draws for ``query``."""
    methods = query.method_names
    problem = build_problem(query, catalog)
    results, reasons = search(problem, methods)
    rows = [best_row(m, results[m]) for m in methods if m in results]
    summary = verdict(rows)
    return {"model": problem.model.name, "platform": problem.platform.name,
            "acceptance": problem.acceptance.name if problem.acceptance else None, "context": problem.context,
            "batch": problem.batch, "dtype": problem.model.dtype, "rows": rows,
            "unavailable": [{"method": m, "reason": reasons[m]} for m in methods if m in reasons],
            "verdict": summary, "curves": {m: curves(r) for m, r in results.items()},
            "roofline": best_roofline(problem, summary["best"], results)}


def best_roofline(problem: Problem, method: str | None, results: dict[str, OptimizeResult]) -> dict | None:
    """The fastest method's roofline; where its step cannot be priced on one device, the reason instead
    (the table above it stands either way)."""
    if method is None:
        return None
    try:
        return roofline(problem, method, results[method])
    except HetSpecError as exc:
        return {"method": method, "error": str(exc)}


def table_csv(query: Query, catalog: Catalog) -> str:
    """Every configuration each chosen method evaluated, one CSV (the ``method`` column tells them apart)."""
    import pandas as pd

    results, _ = search(build_problem(query, catalog), query.method_names)
    if not results:
        raise HetSpecError("no chosen method can run this problem: nothing to download")
    return pd.concat([r.table for r in results.values()], ignore_index=True).to_csv(index=False)


def platform_toml(query: Query, catalog: Catalog) -> str:
    """The platform as the what-if scaled it, as a platform file ``--platform FILE`` reads."""
    import tomli_w

    from hwmodels.loader import platform_to_dict

    return tomli_w.dumps(platform_to_dict(scale_platform(catalog.platform(query.platform), query.whatif)))


def chrome_trace(query: Query, catalog: Catalog, method: str | None = None) -> dict:
    """``hetspec simulate --trace x.json``'s trace of ``method``'s best configuration (default: the fastest)."""
    from sim.engine import simulate
    from sim.trace_files import to_chrome_trace

    problem = build_problem(query, catalog)
    methods = (method,) if method else query.method_names
    if method and method not in available_methods():
        raise UnknownNameError("method", method, available_methods())
    results, reasons = search(problem, methods)
    if not results:
        raise HetSpecError(next(iter(reasons.values())))
    chosen = max(results, key=lambda m: results[m].best["tokens_per_s"])
    sim = simulate(problem, chosen, results[chosen].best_config, steps=TRACE_STEPS)
    return to_chrome_trace(sim.run.records)

