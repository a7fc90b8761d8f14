"""Acceptance models from files and names: the paper-table presets (``sim/presets/acceptance/<name>.json``,
format :data:`sim.acceptance.PRESET_FORMAT`), a real-path profile JSON file, or ``alpha:<a>`` for a draft chain
(:func:`load_acceptance` takes any of them). The models themselves are :mod:`sim.acceptance`.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

from hwmodels.datafile import read_data_file
from hwmodels.errors import HetSpecError, PresetError, UnknownNameError
from sim.acceptance import (
    ALPHA_PREFIX,
    PRESET_FORMAT,
    AcceptanceModel,
    LengthCurve,
    TauEntry,
    acceptance_names,
    from_profile,
    preset_dir,
)
from sim.acceptance_profile import FORMAT as PROFILE_FORMAT
from sim.acceptance_profile import AcceptanceProfile


def _number(value, where: str, field_: str, lo: float | None = None, hi: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PresetError(where, field_, f"must be a number (got {value!r})")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise PresetError(where, field_, f"must be in [{lo}, {hi}] (got {value})")
    return float(value)


def parse_preset(data: dict, where: str) -> AcceptanceModel:
    """Build and check an acceptance model from a preset document (see ``docs/simulator.md``)."""
    if not isinstance(data, dict) or data.get("format") != PRESET_FORMAT:
        raise PresetError(where, "format", f"expected {PRESET_FORMAT!r}")
    allowed = {"format", "name", "source", "notes", "acceptance_length", "length_curve", "medusa_accuracy",
               "draft_alpha", "draft_rank_accuracy", "alspec_hit_rates", "alspec_default_lambda", "tau_entries"}
    extra = sorted(set(data) - allowed)
    if extra:
        raise PresetError(where, extra[0], f"unknown field; valid: {', '.join(sorted(allowed))}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise PresetError(where, "name", "missing field")
    src = data.get("source")
    if not isinstance(src, dict) or not all(isinstance(src.get(k), str) and src[k] for k in ("paper", "table", "page")):
        raise PresetError(where, "source", "needs paper, table and page (strings)")
    source = f"{src['paper']}, {src['table']}, {src['page']}"
    kwargs: dict = {}
    if "acceptance_length" in data:
        table = data["acceptance_length"]
        if not isinstance(table, dict) or len(table) < 2:
            raise PresetError(where, "acceptance_length", "needs at least two width: length entries")
        rows = []
        for k, v in table.items():
            try:
                w = int(k)
            except ValueError:
                raise PresetError(where, f"acceptance_length.{k}", "width must be an integer") from None
            if w < 1:
                raise PresetError(where, f"acceptance_length.{k}", "width must be >= 1")
            length = _number(v, where, f"acceptance_length.{k}", 1.0, float(w))
            rows.append((w, length))
        rows.sort()
        if any(b[1] < a[1] for a, b in zip(rows, rows[1:])):
            raise PresetError(where, "acceptance_length", "lengths must not decrease with width")
        kwargs["length_table"] = tuple(rows)
    if "length_curve" in data:
        c = data["length_curve"]
        if not isinstance(c, dict) or set(c) != {"intercept", "slope", "min_width", "max_width"}:
            raise PresetError(where, "length_curve", "needs intercept, slope, min_width, max_width")
        lo, hi = int(_number(c["min_width"], where, "length_curve.min_width", 1)), \
            int(_number(c["max_width"], where, "length_curve.max_width", 1))
        if hi < lo:
            raise PresetError(where, "length_curve", "max_width < min_width")
        kwargs["length_curve"] = LengthCurve(_number(c["intercept"], where, "length_curve.intercept"),
                                             _number(c["slope"], where, "length_curve.slope", 0.0), lo, hi)
    if "medusa_accuracy" in data:
        try:
            AcceptanceProfile(name=name, source=source, medusa_accuracy=data["medusa_accuracy"])
        except HetSpecError as exc:
            raise PresetError(where, "medusa_accuracy", str(exc)) from None
        kwargs["medusa_accuracy"] = tuple(tuple(float(v) for v in row) for row in data["medusa_accuracy"])
    if "draft_alpha" in data:
        kwargs["draft_alpha"] = _number(data["draft_alpha"], where, "draft_alpha", 0.0, 0.999999)
    if "alspec_hit_rates" in data:
        rates = data["alspec_hit_rates"]
        if not isinstance(rates, dict) or not rates:
            raise PresetError(where, "alspec_hit_rates", "needs task: {lambda: rate} entries")
        parsed: dict[str, dict[float, float]] = {}
        for task, row in rates.items():
            if not isinstance(row, dict) or not row:
                raise PresetError(where, f"alspec_hit_rates.{task}", "needs lambda: rate entries")
            parsed[task] = {_number(float(k), where, f"alspec_hit_rates.{task}", 0.0):
                            _number(v, where, f"alspec_hit_rates.{task}.{k}", 0.0, 1.0) for k, v in row.items()}
        kwargs["alspec_hit_rates"] = parsed
        kwargs["alspec_default_lambda"] = _number(data.get("alspec_default_lambda", 0.10), where,
                                                  "alspec_default_lambda", 0.0)
    if "tau_entries" in data:
        entries = []
        for i, e in enumerate(data["tau_entries"]):
            f = f"tau_entries[{i}]"
            if not isinstance(e, dict) or not {"drafter", "width", "temperature", "tau"} <= set(e):
                raise PresetError(where, f, "needs drafter, blocks, width, temperature, tau")
            blocks = e.get("blocks")
            entries.append(TauEntry(
                drafter=str(e["drafter"]), blocks=None if blocks is None else int(_number(blocks, where, f"{f}.blocks", 1)),
                width=int(_number(e["width"], where, f"{f}.width", 1)),
                temperature=_number(e["temperature"], where, f"{f}.temperature", 0.0),
                tau=_number(e["tau"], where, f"{f}.tau", 1.0),
                speedup=None if e.get("speedup") is None else _number(e["speedup"], where, f"{f}.speedup", 0.0)))
        kwargs["tau_entries"] = tuple(entries)
    meta = {"notes": data.get("notes", "")}
    if "draft_rank_accuracy" in data:      # per-rank acceptance of a draft's candidates (sim.strategies.draft_tree)
        ranks = data["draft_rank_accuracy"]
        if not isinstance(ranks, list) or not ranks:
            raise PresetError(where, "draft_rank_accuracy", "needs a list of per-rank probabilities")
        meta["draft_rank_accuracy"] = [_number(v, where, f"draft_rank_accuracy[{i}]", 0.0, 1.0)
                                       for i, v in enumerate(ranks)]
    if len(kwargs) == 0:
        raise PresetError(where, "acceptance", "holds no acceptance data")
    return AcceptanceModel(name=name, source=source, meta=meta, **kwargs)


@lru_cache(maxsize=None)
def _load_preset(path: str) -> AcceptanceModel:
    model = parse_preset(read_data_file(path, "acceptance preset"), path)
    if model.name != Path(path).stem:
        raise PresetError(path, "name", f"must equal the file name {Path(path).stem!r} (got {model.name!r})")
    return model


def load_acceptance_file(path: str | Path) -> AcceptanceModel:
    """A preset-format or real-path profile JSON file."""
    path = Path(path)
    data = read_data_file(path, "acceptance file")
    if isinstance(data, dict) and data.get("format") == PROFILE_FORMAT:
        return from_profile(AcceptanceProfile.from_json(data, str(path)))
    if isinstance(data, dict) and data.get("format") == PRESET_FORMAT:
        return parse_preset(data, str(path))
    raise PresetError(str(path), "format", f"expected {PROFILE_FORMAT!r} or {PRESET_FORMAT!r}")


def load_acceptance(spec: str) -> AcceptanceModel:
    """A preset by name, a JSON file by path, or ``alpha:<a>`` (a draft chain's acceptance rate)."""
    if spec.startswith(ALPHA_PREFIX):
        try:
            alpha = float(spec[len(ALPHA_PREFIX):])
        except ValueError:
            raise HetSpecError(f"acceptance {spec!r}: expected alpha:<number in [0, 1)>") from None
        if not 0.0 <= alpha < 1.0:
            raise HetSpecError(f"acceptance {spec!r}: alpha must be in [0, 1)")
        return AcceptanceModel(name=spec, source="given on the command line", draft_alpha=alpha)
    names = acceptance_names()
    if spec in names:
        return _load_preset(str(preset_dir() / f"{spec}.json"))
    if spec.endswith(".json") or "/" in spec:
        return load_acceptance_file(spec)
    raise UnknownNameError("acceptance model", spec, list(names) + ["alpha:<a>", "<file.json>"])
