"""Measured operator-latency profiles (format ``hetspec-op-profile/1``) and a device's timing backend.

A device of a platform file is priced by the roofline (default) or by a *profile*: a CSV of
measured operator latencies. The platform file selects it, every entry with its source::

    [devices.gpu.timing]
    backend = { value = "profiled", source = "..." }
    profile = { value = "profiles/vidur-a100-llama2-7b.csv", source = "..." }   # relative to the platform file
    mode = { value = "graph", source = "..." }                                     # eager | graph

The profile file: ``# key: value`` header lines, then a CSV table.

```
# format: hetspec-op-profile/1
# dtype: fp16
# device: NVIDIA A100 (Vidur's a100 profile)
# source: where the numbers come from (repository + commit + licence, or the command that measured them)
# launch_us.graph: 0
# launch_us.graph.source: why a launch costs that in graph mode
op,shape,tokens,keys,kernel_us,eager_launch_us,graph_launch_us
linear,4096x11008,1,0,58.0,-,0
```

Columns (all required; one row per operator call):

- ``op``: ``linear`` (shape ``<d_in>x<d_out>``; the call repeated on one weight, which a small one keeps
  in the device's cache), ``linear_streamed`` (the same with every call on the next of a ring of
  distinct weights several times the last-level cache: what a model larger than the cache pays, used
  for such a model where the profile has it), ``attention`` (``h<heads>kv<kv heads>d<head dim>``,
  optionally ``b<batch>``; an explicit boolean (tree) mask; ``keys`` = keys attended, cached + new),
  ``norm``, ``embedding``, ``add`` (shape ``<hidden>``), ``act_mul``, ``gelu`` (``<intermediate>``),
  ``rope`` (``h<heads>kv<kv heads>d<head dim>``), and the eager-only operators ``kv_write``
  (``kv<kv heads>d<head dim>``), ``positions``, ``rope_gather``, ``mask_build`` (``<head dim>``), and
  ``forward_rest`` (``L<layers>H<hidden>I<intermediate>h<heads>kv<kv heads>d<head dim>V<vocabulary>``,
  :func:`sim.step_graph.forward_key`): what a model's whole eager forward of ``tokens`` tokens took beyond
  the sum of its operators' rows, in ``eager_launch_us`` (``kernel_us`` 0; ``graph_launch_us`` 0 where
  graphs exist: a replayed graph runs no Python); ``draft_pass_chain``, ``draft_pass_tree`` and their
  ``_full`` kinds (the same shape key, of a draft model): each pass of a round of the real ``chain`` or
  ``draft-tree`` decode loop, whole, in ``kernel_us`` (``tokens``: the pass's index in its round, ``keys``: the
  draft's cached tokens at the round's first pass; :mod:`sim.strategies.loop_passes`); ``verify_pass_chain``,
  ``verify_pass_tree`` and their ``_full`` kinds (of a target model): the same rounds' verifications, whole
  (``tokens``: the tokens verified, ``keys``: the context);
- ``tokens``: the token (GEMM M) count of the call (b x q for linears and elementwise operators, q for
  attention), an integer >= 1;
- ``keys``: keys attended (attention; ``0`` for every other operator);
- ``kernel_us``: device time of the call's kernels (microseconds, >= 0);
- ``eager_launch_us``, ``graph_launch_us``: what the call adds on top of ``kernel_us`` when the device
  runs in that execution mode (>= 0; a ``forward_rest`` row's eager value may be negative, where the
  operator rows were timed at a slower moment than the whole forward), or ``-`` when it was not
  measured in that mode. A launch-
  inclusive measurement (CUDA events around one eager call) has its whole time in ``kernel_us``,
  ``eager_launch_us`` 0 and ``graph_launch_us`` ``-``.

Rows are sorted by (op, shape, keys, tokens), keys unique. Header keys: ``format``, ``dtype``,
``source`` (required), ``device``, ``launch_us.<mode>`` and ``launch_us.<mode>.source`` (the cost of one
kernel launch in that mode, for operators the profile does not cover). A row that contradicts the
format fails with one line naming the file, the row and the field.

This module only reads and checks; pricing (interpolation, fallback) is :mod:`sim.op_timing`.
A profiled device's roofline fields are the profile's measured efficiencies (checked here, see
:func:`measured_efficiencies`): ``bw_efficiency`` and ``compute_efficiency`` are the best bandwidth and
FLOP rate a linear row achieves against the device's peaks, ``op_overhead_us`` the profile's launch cost
in the device's mode. Operators the profile does not cover fall back to that roofline.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hwmodels.atomic_files import write_text
from hwmodels.dtypes import DTYPE_BYTES
from hwmodels.errors import HetSpecError, PresetError

FORMAT = "hetspec-op-profile/1"
COLUMNS = ("op", "shape", "tokens", "keys", "kernel_us", "eager_launch_us", "graph_launch_us")
MODES = ("eager", "graph")
BACKENDS = ("roofline", "profiled")
#: Marks a launch cell that was not measured in that mode.
NOT_MEASURED = "-"

_DIM = r"[1-9][0-9]*"
_HEADS = rf"h{_DIM}kv{_DIM}d{_DIM}"
#: op -> regular expression its shape must match.
#: Prefixes of the rows a decode loop's passes are measured as (:mod:`sim.strategies.loop_passes`).
LOOP_OPS = ("draft_pass", "verify_pass")
OP_SHAPES: dict[str, str] = {
    "linear": rf"{_DIM}x{_DIM}",
    "linear_streamed": rf"{_DIM}x{_DIM}",
    "attention": rf"{_HEADS}(b{_DIM})?",
    "norm": _DIM, "embedding": _DIM, "add": _DIM, "act_mul": _DIM, "gelu": _DIM,
    "rope": _HEADS,
    "kv_write": rf"kv{_DIM}d{_DIM}",
    "positions": _DIM, "rope_gather": _DIM, "mask_build": _DIM,
    "forward_rest": rf"L{_DIM}H{_DIM}I{_DIM}{_HEADS}V{_DIM}",
    **{f"{prefix}_{loop}{full}": rf"L{_DIM}H{_DIM}I{_DIM}{_HEADS}V{_DIM}"
       for prefix in LOOP_OPS for loop in ("chain", "tree") for full in ("", "_full")},
}
_HEADER_KEYS = ("format", "dtype", "source", "device", "launch_us.eager", "launch_us.eager.source",
                "launch_us.graph", "launch_us.graph.source")
_HEADER_LINE = re.compile(r"^#\s*([a-z_][a-z_.]*):\s?(.*)$")


@dataclass(frozen=True, eq=False)
class ProfileTable:
    """The rows of one (op, shape): per ``keys`` value, token counts and times (microseconds; NaN = ``-``)."""

    op: str
    shape: str
    lines: tuple[tuple[int, tuple[int, ...], tuple[float, ...], tuple[float, ...], tuple[float, ...]], ...]
    # (keys, tokens, kernel_us, eager_launch_us, graph_launch_us) per keys value, ascending


@dataclass(frozen=True, eq=False)
class OpProfile:
    """A parsed, checked profile file."""

    path: str
    dtype: str
    source: str
    device: str
    launch_us: Mapping[str, float]           # mode -> one kernel launch, for operators not covered
    launch_sources: Mapping[str, str]
    tables: Mapping[tuple[str, str], ProfileTable]
    first_row: Mapping[tuple[str, str], tuple[int, int]] = field(default_factory=dict)  # (row, line) of each table
    rows: int = 0

    def table(self, op: str, shape: str) -> ProfileTable | None:
        return self.tables.get((op, shape))

    def measured_in(self, mode: str) -> bool:
        """Whether every row, and the launch cost of an operator it does not cover, has a time in ``mode``."""
        return mode in self.launch_us and self.unmeasured_launch(mode) is None

    def unmeasured_launch(self, mode: str) -> tuple[int, int, str] | None:
        """(row, line, op/shape) of the first row without a launch time in ``mode``, or None."""
        col = 3 if mode == "eager" else 4
        for key, table in self.tables.items():
            for i, line in enumerate(table.lines):
                for j, value in enumerate(line[col]):
                    if math.isnan(value):
                        row, lineno = self.first_row.get(key, (0, 0))
                        return row, lineno, f"{key[0]} {key[1]} keys {line[0]} tokens {line[1][j]}"
        return None


@dataclass(frozen=True)
class DeviceTiming:
    """How a device is timed: ``backend`` ``roofline`` or ``profiled`` (with its profile and execution mode).

    ``calibrated_roofline``: the device's roofline fields are a host calibration's, not the profile's own (a
    calibrated host device timed by a CPU operator profile, :mod:`real.validation.backends`). Its fixed cost per
    operator is then a whole real forward's spread over the step graph's operators, so what the profile does
    not cover is priced as that roofline prices it: a forward the profile has no row of (a model it did not
    profile, another dtype) wholly by the roofline, an uncovered operator with the step graph's launches
    (:func:`sim.op_timing.unprofiled_forward`)."""

    backend: str = "roofline"
    mode: str = "graph"
    profile: OpProfile | None = None
    profile_file: str = ""                   # as written in the platform file
    sources: Mapping[str, str] = field(default_factory=dict)
    calibrated_roofline: bool = False

    @property
    def profiled(self) -> bool:
        return self.backend == "profiled" and self.profile is not None


# ---------------------------------------------------------------------- reading
def _fail(path: str, where: str, problem: str) -> PresetError:
    return PresetError(path, where, problem)


def _number(path: str, where: str, text: str, integer: bool = False, low: float = 0.0,
            allow_missing: bool = False) -> float:
    text = text.strip()
    if allow_missing and text == NOT_MEASURED:
        return math.nan
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        extra = f" or {NOT_MEASURED!r} (not measured)" if allow_missing else ""
        raise _fail(path, where, f"must be {kind}{extra} (got {text!r})") from None
    if not math.isfinite(value):
        raise _fail(path, where, f"must be a finite number (got {text!r})")
    if value < low:
        raise _fail(path, where, f"must be >= {low:g} (got {text})")
    return value


def read_profile(path: str | Path) -> OpProfile:
    """Parse and check a profile file; one line (file, row, field, problem) on the first contradiction."""
    p = Path(path)
    where_file = str(p)
    if not p.is_file():
        raise HetSpecError(f"profile file {p} does not exist")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise HetSpecError(f"cannot read profile file {p}: {exc.__class__.__name__}") from None
    lines = text.splitlines()
    header: dict[str, str] = {}
    body_start = None
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if line.startswith("#"):
            m = _HEADER_LINE.match(line)
            if m:
                key, value = m.group(1), m.group(2).strip()
                if key not in _HEADER_KEYS:
                    raise _fail(where_file, f"header (line {lineno})",
                                f"unknown key {key!r}; valid: {', '.join(_HEADER_KEYS)}")
                if key in header:
                    raise _fail(where_file, f"header (line {lineno})", f"key {key!r} given twice")
                header[key] = value
            continue
        body_start = lineno
        break
    for key in ("format", "dtype", "source"):
        if not header.get(key):
            raise _fail(where_file, "header", f"missing '# {key}: ...' line")
    if header["format"] != FORMAT:
        raise _fail(where_file, "header", f"format must be {FORMAT!r} (got {header['format']!r})")
    if header["dtype"] not in DTYPE_BYTES:
        raise _fail(where_file, "header", f"dtype: unknown {header['dtype']!r}; valid: {', '.join(DTYPE_BYTES)}")
    launch: dict[str, float] = {}
    launch_sources: dict[str, str] = {}
    for mode in MODES:
        key = f"launch_us.{mode}"
        if key in header:
            launch[mode] = _number(where_file, f"header: {key}", header[key])
            source = header.get(f"{key}.source", "")
            if not source:
                raise _fail(where_file, "header", f"'{key}' needs a '# {key}.source: ...' line")
            launch_sources[mode] = source
    if body_start is None:
        raise _fail(where_file, "header", f"no CSV table after the header (columns {', '.join(COLUMNS)})")
    reader = csv.reader(lines[body_start - 1:])
    columns = [c.strip() for c in next(reader)]
    for col in COLUMNS:
        if col not in columns:
            raise _fail(where_file, f"header (line {body_start}): {col}",
                        f"missing column; a profile has columns {', '.join(COLUMNS)}")
    extra = [c for c in columns if c not in COLUMNS]
    if extra:
        raise _fail(where_file, f"header (line {body_start}): {extra[0]}",
                    f"unknown column; a profile has columns {', '.join(COLUMNS)}")
    idx = {c: columns.index(c) for c in COLUMNS}
    raw: dict[tuple[str, str], dict[int, list[tuple[int, float, float, float]]]] = {}
    first_row: dict[tuple[str, str], tuple[int, int]] = {}
    last_key: tuple | None = None
    last_row = 0
    seen: dict[tuple, int] = {}
    n = 0
    for offset, cells in enumerate(reader):
        lineno = body_start + 1 + offset
        if not cells or all(not c.strip() for c in cells) or cells[0].lstrip().startswith("#"):
            continue
        n += 1
        here = f"row {n} (line {lineno})"
        if len(cells) != len(columns):
            raise _fail(where_file, f"{here}: {COLUMNS[min(len(cells), len(COLUMNS) - 1)]}",
                        f"has {len(cells)} cells, the header {len(columns)}")
        get = {c: cells[i].strip() for c, i in idx.items()}
        op = get["op"]
        if op not in OP_SHAPES:
            raise _fail(where_file, f"{here}: op", f"unknown operator {op!r}; valid: {', '.join(OP_SHAPES)}")
        shape = get["shape"]
        if not re.fullmatch(OP_SHAPES[op], shape):
            raise _fail(where_file, f"{here}: shape", f"{shape!r} is not a {op} shape ({_shape_help(op)})")
        tokens = int(_number(where_file, f"{here}: tokens", get["tokens"], integer=True, low=1))
        keys = int(_number(where_file, f"{here}: keys", get["keys"], integer=True, low=0))
        if op == "attention" and keys < 1:
            raise _fail(where_file, f"{here}: keys", "an attention row attends to at least one key (got 0)")
        if op != "attention" and not op.startswith(LOOP_OPS) and keys != 0:
            raise _fail(where_file, f"{here}: keys", f"only attention, draft_pass and verify_pass rows have keys; a {op} "
                                                     f"row has 0 (got {keys})")
        kernel = _number(where_file, f"{here}: kernel_us", get["kernel_us"])
        eager = _number(where_file, f"{here}: eager_launch_us", get["eager_launch_us"], allow_missing=True,
                        low=-math.inf if op == "forward_rest" else 0.0)
        graph = _number(where_file, f"{here}: graph_launch_us", get["graph_launch_us"], allow_missing=True)
        key = (op, shape, keys, tokens)
        if key in seen:
            raise _fail(where_file, f"{here}: tokens", f"duplicate key (op {op}, shape {shape}, keys {keys}, "
                                                       f"tokens {tokens}), first at row {seen[key]}")
        if last_key is not None and key < last_key:
            i = next(i for i, (a, b) in enumerate(zip(key, last_key)) if a != b)
            field_name = ("op", "shape", "keys", "tokens")[i]
            raise _fail(where_file, f"{here}: {field_name}",
                        f"rows must be sorted by (op, shape, keys, tokens): {field_name} {key[i]} comes after row "
                        f"{last_row}'s {last_key[i]}")
        seen[key] = n
        last_key, last_row = key, n
        raw.setdefault((op, shape), {}).setdefault(keys, []).append((tokens, kernel, eager, graph))
        first_row.setdefault((op, shape), (n, lineno))
    if not n:
        raise _fail(where_file, f"header (line {body_start})", "the table has no rows")
    tables = {}
    for (op, shape), by_keys in raw.items():
        lines_out = []
        for keys in sorted(by_keys):
            pts = by_keys[keys]
            lines_out.append((keys, tuple(t for t, *_ in pts), tuple(k for _, k, _, _ in pts),
                              tuple(e for _, _, e, _ in pts), tuple(g for _, _, _, g in pts)))
        tables[(op, shape)] = ProfileTable(op, shape, tuple(lines_out))
    return OpProfile(path=where_file, dtype=header["dtype"], source=header["source"], device=header.get("device", ""),
                     launch_us=launch, launch_sources=launch_sources, tables=tables, first_row=first_row, rows=n)


def _shape_help(op: str) -> str:
    return {"linear": "<d_in>x<d_out>, e.g. 4096x11008", "linear_streamed": "<d_in>x<d_out>, e.g. 4096x11008",
            "attention": "h<heads>kv<kv heads>d<head dim>[b<batch>], "
            "e.g. h32kv32d128", "rope": "h<heads>kv<kv heads>d<head dim>", "kv_write": "kv<kv heads>d<head dim>",
            "forward_rest": "L<layers>H<hidden>I<intermediate>h<heads>kv<kv heads>d<head dim>V<vocabulary>, "
            "e.g. L8H384I1024h6kv6d64V4096"}.get("forward_rest" if op.startswith(LOOP_OPS) else op,
                                                  "<width>, e.g. 4096")


def write_profile(path: str | Path, header: Mapping[str, str], rows, notes=()) -> Path:
    """Write a profile: ``header`` (key -> value, in :data:`_HEADER_KEYS`), free-text ``notes`` (``# Note: ...``
    lines) and rows ``(op, shape, tokens, keys, kernel_us, eager_launch_us, graph_launch_us)`` (NaN -> ``-``),
    sorted."""
    from hwmodels.datafile import output_path, writing

    path = output_path(path, "profile file")

    def cell(v) -> str:
        if isinstance(v, float):
            return NOT_MEASURED if math.isnan(v) else f"{v:.6g}"
        return str(v)

    ordered = sorted(rows, key=lambda r: (r[0], r[1], r[3], r[2]))
    out = [f"# format: {FORMAT}"]
    out += [f"# {k}: {v}" for k, v in header.items() if k != "format"]
    out += [f"# Note: {n}" for n in notes]
    out.append(",".join(COLUMNS))
    out += [",".join(cell(v) for v in (r[0], r[1], r[2], r[3], float(r[4]), float(r[5]), float(r[6])))
            for r in ordered]
    with writing(path, "profile file"):
        write_text(path, "\n".join(out) + "\n")
    read_profile(path)   # what we write must read back
    return path


# ---------------------------------------------------------------------- efficiencies and the platform file
def linear_dims(shape: str) -> tuple[int, int]:
    d_in, d_out = shape.split("x")
    return int(d_in), int(d_out)


def measured_efficiencies(profile: OpProfile, mem_bw_gbps: float, peak_tflops: float) -> dict[str, Any]:
    """The best bandwidth and FLOP rate the profile's linear rows achieve, as fractions of the device's peaks.

    A linear row of T tokens and a d_in x d_out weight moves dt*(T*(d_in + d_out) + d_in*d_out) bytes and
    does 2*T*d_in*d_out FLOPs (Medusa App. G accounting, as :func:`sim.step_graph.linear_op`) in
    ``kernel_us``. Returns ``bw_efficiency``, ``compute_efficiency`` (unrounded) and where each was reached.
    """
    dt = DTYPE_BYTES[profile.dtype]
    best_bw = best_fl = (0.0, "")
    for (op, shape), table in profile.tables.items():
        if op != "linear":
            continue
        d_in, d_out = linear_dims(shape)
        for keys, tokens, kernel, _, _ in table.lines:
            for t, k in zip(tokens, kernel):
                if k <= 0:
                    continue
                bw = dt * (t * (d_in + d_out) + d_in * d_out) / (k * 1e-6) / (mem_bw_gbps * 1e9)
                fl = 2.0 * t * d_in * d_out / (k * 1e-6) / (peak_tflops * 1e12)
                if bw > best_bw[0]:
                    best_bw = (bw, f"linear {shape} at {t} tokens")
                if fl > best_fl[0]:
                    best_fl = (fl, f"linear {shape} at {t} tokens")
    if not best_bw[1]:
        has_linear = any(op == "linear" for op, _ in profile.tables)
        found = ("every linear row's kernel time is zero (each call took no longer than the bare dispatch cost; "
                 "profile again, without --quick)" if has_linear else "no linear rows")
        raise HetSpecError(f"{profile.path}: {found}: a profiled device needs them to measure its "
                           "bandwidth and compute efficiencies")
    return {"bw_efficiency": best_bw[0], "bw_where": best_bw[1], "compute_efficiency": best_fl[0],
            "compute_where": best_fl[1]}


def read_timing(path: str, where: str, table: Any, platform_path: str) -> DeviceTiming:
    """``[devices.<name>.timing]`` of a platform file: backend, profile (relative to the file), mode."""
    if not isinstance(table, dict):
        raise PresetError(path, where.rstrip("."), "must be a table: backend, profile, mode")
    allowed = {"backend", "profile", "mode"}
    extra = sorted(set(table) - allowed)
    if extra:
        raise PresetError(path, f"{where}{extra[0]}", f"unknown field; valid: {', '.join(sorted(allowed))}")
    values: dict[str, str] = {}
    sources: dict[str, str] = {}
    for key in table:
        entry = table[key]
        if not isinstance(entry, dict) or set(entry) != {"value", "source"}:
            raise PresetError(path, f"{where}{key}", 'must be { value = "...", source = "..." }')
        if not isinstance(entry["value"], str) or not entry["value"].strip():
            raise PresetError(path, f"{where}{key}", f"value must be a string (got {entry['value']!r})")
        if not isinstance(entry["source"], str) or not entry["source"].strip():
            raise PresetError(path, f"{where}{key}", "missing source (every entry needs its source next to it)")
        values[key], sources[key] = entry["value"], entry["source"]
    backend = values.get("backend")
    if backend is None:
        raise PresetError(path, f"{where}backend", f"missing field ({' or '.join(BACKENDS)})")
    if backend not in BACKENDS:
        raise PresetError(path, f"{where}backend", f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
    mode = values.get("mode", "graph" if backend == "roofline" else None)
    if mode is None:
        raise PresetError(path, f"{where}mode", f"missing field: a profiled device declares its execution mode "
                                                f"({' or '.join(MODES)})")
    if mode not in MODES:
        raise PresetError(path, f"{where}mode", f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
    if backend == "roofline":
        if "profile" in values:
            raise PresetError(path, f"{where}profile", "only a profiled device has a profile")
        return DeviceTiming("roofline", mode, None, "", sources)
    if "profile" not in values:
        raise PresetError(path, f"{where}profile", "missing field: the profile file (relative to the platform file)")
    file = Path(values["profile"])
    if not file.is_absolute():
        file = Path(platform_path).parent / file
    profile = read_profile(file)
    return DeviceTiming("profiled", mode, profile, values["profile"], sources)


def check_profiled_device(path: str, where: str, device) -> None:
    """A profiled device's roofline fields must be its profile's measurements (they price what the profile
    does not cover): efficiencies to 3 decimals, ``op_overhead_us`` = the launch cost of its mode."""
    timing: DeviceTiming = device.timing
    profile = timing.profile
    mode = timing.mode
    if profile.dtype not in device.peak_tflops:
        raise PresetError(path, f"{where}timing.profile", f"profile dtype {profile.dtype} has no peak on this device; "
                                                          f"it has: {', '.join(device.peak_tflops)}")
    if device.gemm_efficiency_curve:
        raise PresetError(path, f"{where}gemm_efficiency_curve",
                          "a profiled device takes its compute efficiency from its profile; remove the curve")
    missing = profile.unmeasured_launch(mode)
    if missing is not None:
        row, line, what = missing
        raise PresetError(path, f"{where}timing.mode",
                          f"{mode}: {profile.path} row {row} (line {line}) has no {mode}_launch_us ({what}): "
                          f"the profile was not measured in {mode} mode")
    if mode not in profile.launch_us:
        raise PresetError(path, f"{where}timing.mode",
                          f"{mode}: {profile.path} gives no '# launch_us.{mode}:' (the launch cost of an operator it "
                          "does not cover)")
    eff = measured_efficiencies(profile, device.mem_bw_gbps, device.peak_tflops[profile.dtype])
    want = {"bw_efficiency": round(eff["bw_efficiency"], 3), "compute_efficiency": round(eff["compute_efficiency"], 3),
            "op_overhead_us": round(profile.launch_us[mode], 3)}
    for key, value in want.items():
        if value > 1.0 and key != "op_overhead_us":
            where_eff = eff["bw_where" if key == "bw_efficiency" else "compute_where"]
            raise PresetError(path, f"{where}timing.profile",
                              f"{profile.path}: {where_eff} runs at {value:.3f} of the device's peak "
                              f"({'mem_bw_gbps' if key == 'bw_efficiency' else 'peak_tflops.' + profile.dtype}): "
                              "the profile contradicts the peak")
        got = getattr(device, key)
        if abs(got - value) > 5e-4 + 1e-12:
            raise PresetError(path, f"{where}{key}",
                              f"{got:g}, but the profile measures {value:g} (a profiled device prices what its "
                              f"profile does not cover with the profile's own efficiencies; see `hetspec profile "
                              f"show {profile.path}`)")


def in_mode(device, mode: str, why: str):
    """``device`` (a :class:`hwmodels.platform.Device`) priced in execution ``mode`` (``eager`` or ``graph``): its
    profile's launch costs of that mode, and ``op_overhead_us`` that mode's launch cost, as
    :func:`check_profiled_device` asks of a profiled device; ``why`` is the mode's source. A roofline device, or
    one already in ``mode``, is returned as it is; a profile that did not measure ``mode`` is an error."""
    timing = device.timing
    if timing is None or not timing.profiled or timing.mode == mode:
        return device
    profile = timing.profile
    if not profile.measured_in(mode):
        raise HetSpecError(f"{profile.path}: the profile was not measured in {mode} mode, which this run needs ({why})")
    return replace(device, timing=replace(timing, mode=mode, sources={**timing.sources, "mode": f"{mode}: {why}"}),
                   op_overhead_us=round(profile.launch_us[mode], 3))


def timing_to_dict(timing: DeviceTiming) -> dict:
    """The ``[devices.<name>.timing]`` table of a platform file (inverse of :func:`read_timing`)."""
    out = {"backend": {"value": timing.backend, "source": timing.sources.get("backend", "unknown")}}
    if timing.profiled:
        out["profile"] = {"value": timing.profile_file or timing.profile.path,
                          "source": timing.sources.get("profile", "unknown")}
    if timing.profiled or "mode" in timing.sources:
        out["mode"] = {"value": timing.mode, "source": timing.sources.get("mode", "unknown")}
    return out
