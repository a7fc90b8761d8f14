"""The optimizer: the fastest configuration of a method for a model, platform and acceptance model.

It takes the strategy's search space (:meth:`Strategy.search_space`), lets the caller narrow or
widen any knob (``space``: knob name -> values), evaluates every combination of the discrete
knobs with the closed form (vectorised per strategy, :meth:`Strategy.estimate_many`), and for a
continuous knob (the partition ratio) evaluates a coarse grid (:meth:`Strategy.ratio_pricer`)
and then refines the best grid cell of the most promising configurations with a bounded scalar
minimisation of the step time (``scipy.optimize.minimize_scalar``, method ``bounded``). The
objective is tokens per second (per sequence): expected tokens per step / step seconds.

The result is the best configuration and the whole table (pandas) with one row per configuration
evaluated: the knobs, ``step_s``, ``tokens_per_step``, ``tokens_per_s``, ``speedup_vs_ar``
(against ``ar`` on the row's own device, so ``ar``'s rows are 1x; against the best ``ar``
placement where the model does not fit that device, e.g. ``offload``), ``refined`` (row produced
by the refinement). Combinations the strategy rejects (e.g. a width beyond what a depth budget
allows) are skipped and counted; if every combination is rejected, the first reason is raised.

A knob the caller sets must be one the method declares (its strategy's ``knob_help``, which
covers its search space) and must show in the configurations evaluated: a knob the method does
not use, or a value it replaces (a depth a Medusa choice list ignores, a shape the acceptance
model cannot build), is an :class:`UnusedKnobError` naming the flag and the method, never
silently ignored. A strategy lists in ``budget_knobs`` (class attribute, default none) the knobs
that are caps rather than values: a resolved config may come out below the value asked (Medusa's
depth budget; draft-tree's tree budget under a chain shape).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from hwmodels.errors import HetSpecError
from sim.knobs import flag
from sim.strategies import get_strategy
from sim.strategies.base import CONFIG_KNOBS, Knob, Problem, Strategy, StrategyConfig
from sim.tree import TokenTree

#: Continuous knobs the optimizer refines (and the only continuous knob in the contract).
CONTINUOUS_KNOBS = ("partition_ratio",)
#: How many structural configurations get the ratio refinement (best by their grid value):
#: the grid already ranks them; refining all of a wide width x depth search would cost seconds.
REFINE_TOP = 8
#: Ratio tolerance of the refinement (1e-3 = 0.1 % of the work moved between devices).
RATIO_XATOL = 1e-3

#: Command-line flag of each knob (messages name the flag the user typed); options: ``--option NAME=...``.
KNOB_FLAGS = {**{k: flag(k) for k in ("tree_width", "draft_depth", "partition_ratio")},
              "device": "--device", "draft_device": "--draft-device", "draft_model": "--draft-model",
              "tree_shape": "--tree-shape", "tree": "--tree-choices"}

TABLE_COLUMNS = ("method", "tree_width", "draft_depth", "partition_ratio", "device", "draft_device", "draft_model",
                 "tree_shape", "step_s", "tokens_per_step", "proposed_per_step", "tokens_per_s", "speedup_vs_ar",
                 "refined")


@dataclass(frozen=True)
class OptimizeResult:
    """The best configuration and every configuration evaluated.

    ``columns`` holds the table as lists; ``table`` is the same as a pandas DataFrame, built on
    first use (so a JSON answer does not pay for importing pandas). ``ar_tokens_per_s`` is the
    baseline of the best row's ``speedup_vs_ar`` (``ar`` on the best row's device).
    """

    method: str
    best: dict
    best_config: StrategyConfig
    columns: dict
    ar_tokens_per_s: float
    skipped: int
    skip_reason: str = ""

    @cached_property
    def table(self):
        import pandas as pd

        return pd.DataFrame(self.columns)

    @property
    def rows(self) -> int:
        return len(self.columns["step_s"])

    def records(self) -> list[dict]:
        names = list(self.columns)
        return [dict(zip(names, values)) for values in zip(*(self.columns[n] for n in names))]

    def to_json(self, with_table: bool = True) -> dict:
        best = dict(self.best)
        tree = self.best_config.tree
        if tree is not None:
            best["tree_choices"] = [list(c) for c in tree.choices]
        out = {"method": self.method, "best": _jsonable(best), "ar_tokens_per_s": _jsonable({"v": self.ar_tokens_per_s})["v"],
               "evaluated": self.rows, "skipped": self.skipped}
        if self.skip_reason:
            out["skip_reason"] = self.skip_reason
        if with_table:
            out["table"] = [_jsonable(r) for r in self.records()]
        return out


def _jsonable(row: Mapping) -> dict:
    out = {}
    for k, v in row.items():
        if isinstance(v, (np.integer,)):
            v = int(v)
        elif isinstance(v, (np.floating, float)):
            v = None if not math.isfinite(float(v)) else float(v)
        elif isinstance(v, np.bool_):
            v = bool(v)
        elif isinstance(v, tuple):
            v = list(v)
        out[k] = v
    return out


class UnusedKnobError(HetSpecError):
    """A knob given to a method that does not use it (or whose value the method replaces)."""


def knob_flag(name: str) -> str:
    """The flag that sets knob ``name`` (``--option name=...`` for a method's own options)."""
    return KNOB_FLAGS.get(name, f"--option {name}")


def declared_knobs(strategy: Strategy) -> tuple[str, ...]:
    """The knobs ``strategy`` takes: those its ``knob_help`` describes (its search space is among them)."""
    return tuple(strategy.knob_help)


def check_knob_names(strategy: Strategy, space: Mapping[str, Any] | None) -> None:
    """One line naming the first knob of ``space`` that ``strategy`` does not declare."""
    given = [name for name, value in (space or {}).items() if value is not None]
    extra = [name for name in given if name not in declared_knobs(strategy)]
    if extra:
        takes = ", ".join(knob_flag(k) for k in declared_knobs(strategy)) or "none"
        raise UnusedKnobError(f"{knob_flag(extra[0])} does not apply to method {strategy.name} (its knobs: {takes})")


def _shown(value) -> str:
    if isinstance(value, TokenTree):
        return f"a {value.size}-token tree"
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    return str(value)


def check_knobs_used(strategy: Strategy, space: Mapping[str, Any] | None, configs: Sequence[StrategyConfig]) -> None:
    """One line if a knob the caller fixed did not shape the resolved ``configs``: the method replaced its
    value (a Medusa choice list fixes the depth; an acceptance table without accuracies builds only list
    trees) or dropped it everywhere.

    Some config must carry a value asked for; no config may come out with another value, except None
    (the knob does not apply to that part of the search, e.g. ALSpec's receiver without speculation) and,
    for a budget knob (:attr:`Strategy.budget_knobs`), a value below the largest one asked. An option
    counts as used when some config keeps it."""
    if not configs:
        return
    budgets = getattr(strategy, "budget_knobs", ())
    for name, value in (space or {}).items():
        if value is None:
            continue
        if name in CONTINUOUS_KNOBS and isinstance(value, tuple) and len(value) == 2:
            continue                                     # a range to search, not a value
        wanted = tuple(value) if isinstance(value, (list, tuple, range, np.ndarray)) else (value,)
        if name not in CONFIG_KNOBS and name != "tree":
            if not any(name in c.options for c in configs):
                raise UnusedKnobError(f"{knob_flag(name)} has no effect on method {strategy.name} here "
                                      "(its configurations drop it)")
            continue
        got = [getattr(c, name) for c in configs]
        if name in budgets:
            off = [g for g in got if g is not None and g > max(wanted)]
        else:
            off = [g for g in got if g is not None and g not in wanted]
        if not off and any(g in wanted for g in got):
            continue
        seen = sorted({_shown(g) for g in (off or got)}, key=lambda t: (len(t), t))
        raise UnusedKnobError(f"{knob_flag(name)} {_shown(value)} has no effect on method {strategy.name} here: "
                              f"its configurations come out with {name} {', '.join(seen[:6])}"
                              f"{', ...' if len(seen) > 6 else ''}")


# ---------------------------------------------------------------------- search space
def effective_space(strategy: Strategy, problem: Problem, space: Mapping[str, Any] | None = None) -> list[Knob]:
    """The strategy's knobs with the caller's overrides (a value, a sequence, or (low, high) for a ratio)."""
    knobs = {k.name: k for k in strategy.search_space(problem)}
    for name, value in (space or {}).items():
        if value is None:
            continue
        if name in CONTINUOUS_KNOBS and isinstance(value, tuple) and len(value) == 2 and name in knobs \
                and knobs[name].continuous:
            knobs[name] = Knob(name, low=float(value[0]), high=float(value[1]), grid=knobs[name].grid)
            continue
        values = tuple(value) if isinstance(value, (list, tuple, range, np.ndarray)) else (value,)
        knobs[name] = Knob(name, values)
    return list(knobs.values())


def _config_key(c: StrategyConfig) -> tuple:
    tree = (c.tree.parents, c.tree.ranks) if c.tree is not None else None
    return (c.tree_width, c.draft_depth, c.partition_ratio, c.device, c.draft_device, c.draft_model, c.tree_shape,
            tree, tuple(sorted(c.options.items())))


def resolve_space(strategy: Strategy, problem: Problem, knobs: Sequence[Knob]):
    """Every valid, distinct resolved config of the discrete knobs (continuous ones at their midpoint).

    Returns ``(configs, skipped, first_reason)``.
    """
    discrete = [k for k in knobs if not k.continuous]
    continuous = [k for k in knobs if k.continuous]
    base = {k.name: (k.low + k.high) / 2.0 for k in continuous}
    configs, seen = [], set()
    skipped, reason = 0, ""
    for combo in itertools.product(*(k.values for k in discrete)):
        knob_values = dict(zip((k.name for k in discrete), combo), **base)
        try:
            config = strategy.resolve(problem, StrategyConfig(method=strategy.name).with_knobs(**knob_values))
        except HetSpecError as exc:
            skipped += 1
            reason = reason or str(exc)
            continue
        key = _config_key(config)
        if key in seen:
            continue
        seen.add(key)
        configs.append(config)
    return configs, skipped, reason


# ---------------------------------------------------------------------- evaluation
def evaluate_space(problem: Problem, method: str, space: Mapping[str, Any] | None = None, refine: bool = True,
                   refine_top: int = REFINE_TOP) -> tuple[dict[str, list], list[StrategyConfig], int, str]:
    """Every configuration of ``method`` evaluated: ``(columns, configs, skipped, reason)``.

    ``columns`` maps each table column to a list (one entry per row, ``configs`` in the same order);
    ``speedup_vs_ar`` is left to the caller (it needs the AR baseline).
    """
    strategy = get_strategy(method)
    check_knob_names(strategy, space)
    knobs = effective_space(strategy, problem, space)
    configs, skipped, reason = resolve_space(strategy, problem, knobs)
    if not configs:
        raise HetSpecError(reason or f"method {method}: the search space is empty")
    check_knobs_used(strategy, space, configs)
    ratio_knob = next((k for k in knobs if k.continuous), None)
    rows_cfg: list[StrategyConfig] = []
    step: list[float] = []
    tokens: list[float] = []
    proposed: list[float] = []
    refined: list[bool] = []
    if ratio_knob is None:
        est = strategy.estimate_many(problem, configs)
        rows_cfg = list(configs)
        step, tokens, proposed = list(est.step_s), list(est.tokens_per_step), list(est.proposed_per_step)
        refined = [False] * len(configs)
    else:
        grid = np.linspace(ratio_knob.low, ratio_knob.high, max(ratio_knob.grid, 2))
        tokens_of, proposed_of = strategy.acceptance_many(problem, configs)
        pricers = [strategy.ratio_pricer(problem, config) for config in configs]
        scored = []
        for i, config in enumerate(configs):
            steps = np.asarray(pricers[i](grid), dtype=float)
            for r, s in zip(grid, steps):
                rows_cfg.append(replace(config, partition_ratio=float(r)))
                step.append(float(s))
                tokens.append(float(tokens_of[i]))
                proposed.append(float(proposed_of[i]))
                refined.append(False)
            j = int(np.argmin(steps))
            scored.append((tokens_of[i] / steps[j], i, j))
        if refine:
            for _, i, j in sorted(scored, reverse=True)[:refine_top]:
                r, s = _refine_ratio(pricers[i], grid, j)
                rows_cfg.append(replace(configs[i], partition_ratio=r))
                step.append(s)
                tokens.append(float(tokens_of[i]))
                proposed.append(float(proposed_of[i]))
                refined.append(True)
    columns: dict[str, list] = {c: [] for c in TABLE_COLUMNS if c != "speedup_vs_ar"}
    option_names = sorted({k for c in rows_cfg for k in c.options})
    for name in option_names:
        columns[name] = []
    for c in rows_cfg:
        kv = c.knob_values()
        for name in ("method", "tree_width", "draft_depth", "partition_ratio", "device", "draft_device",
                     "draft_model", "tree_shape"):
            columns[name].append(kv[name])
        for name in option_names:
            value = c.options.get(name)
            columns[name].append(tuple(value) if isinstance(value, list) else value)
    columns["step_s"] = step
    columns["tokens_per_step"] = tokens
    columns["proposed_per_step"] = proposed
    columns["tokens_per_s"] = [t / s for t, s in zip(tokens, step)]
    columns["refined"] = refined
    return columns, rows_cfg, skipped, reason


def _refine_ratio(price, grid: np.ndarray, j: int):
    """Bounded scalar minimisation of the step time (``price``: seconds at an array of ratios) in the grid cells
    around grid point ``j``."""
    from scipy.optimize import minimize_scalar

    def objective(r: float) -> float:
        return float(price(np.array([float(r)]))[0])

    lo = grid[max(j - 1, 0)]
    hi = grid[min(j + 1, len(grid) - 1)]
    if hi <= lo:
        r = float(grid[j])
        return r, objective(r)
    res = minimize_scalar(objective, bounds=(float(lo), float(hi)), method="bounded",
                          options={"xatol": RATIO_XATOL})
    r, s = float(res.x), float(res.fun)
    edge = float(grid[j])
    s_edge = objective(edge)
    return (edge, s_edge) if s_edge < s else (r, s)


def ar_by_device(problem: Problem) -> dict[str, float]:
    """Tokens/s of ``ar`` on each device the model fits on (empty if it fits on none)."""
    try:
        columns, _, _, _ = evaluate_space(problem, "ar")
    except HetSpecError:
        return {}
    return {d: float(t) for d, t in zip(columns["device"], columns["tokens_per_s"])}


def speedups_vs_ar(problem: Problem, devices: Sequence[str], tokens_per_s: Sequence[float],
                   by_device: Mapping[str, float] | None = None) -> tuple[list[float], list[float]]:
    """Each row's speedup over ``ar`` on the row's device, and that baseline (tokens/s): ``ar``'s own rows
    are 1x. Where ``ar`` cannot run on the row's device (a model that does not fit it, as ``offload``
    runs it), the baseline is ``ar``'s best placement; NaN if ``ar`` fits nowhere."""
    by_device = ar_by_device(problem) if by_device is None else by_device
    best = max(by_device.values()) if by_device else float("nan")
    bases = [by_device.get(d, best) for d in devices]
    return [t / b if b == b else float("nan") for t, b in zip(tokens_per_s, bases)], bases


def optimize(problem: Problem, method: str, space: Mapping[str, Any] | None = None, refine: bool = True,
             refine_top: int = REFINE_TOP) -> OptimizeResult:
    """Search ``method``'s knobs for the highest tokens/s; return the best configuration and the table."""
    columns, configs, skipped, reason = evaluate_space(problem, method, space, refine, refine_top)
    columns["speedup_vs_ar"], bases = speedups_vs_ar(problem, columns["device"], columns["tokens_per_s"])
    ordered = [c for c in TABLE_COLUMNS if c in columns] + [c for c in columns if c not in TABLE_COLUMNS]
    columns = {c: columns[c] for c in ordered}
    best_i = int(np.argmax(columns["tokens_per_s"]))
    best = {c: values[best_i] for c, values in columns.items()}
    return OptimizeResult(method=method, best=best, best_config=configs[best_i], columns=columns,
                          ar_tokens_per_s=bases[best_i], skipped=skipped, skip_reason=reason)
