"""Load and write platform preset files (TOML), checking every field.

Format (one file per platform, ``hwmodels/presets/<name>.toml``): every number is written as
``field = { value = <number>, source = "<datasheet, paper table, or command that measured it>" }``.

```toml
name = "example"
description = "..."

[devices.gpu]
kind = "gpu"                     # cpu | gpu | npu
description = "..."
mem_bw_gbps = { value = 936.0, source = "..." }
mem_capacity_gb = { value = 24.0, source = "..." }
bw_efficiency = { value = 0.8, source = "..." }
compute_efficiency = { value = 0.7, source = "..." }
op_overhead_us = { value = 5.0, source = "..." }
token_tile = { value = 16, source = "..." }
sparse_attn_efficiency = { value = 0.0, source = "..." }
cores = { value = 82, source = "..." }                        # optional
gemm_efficiency_curve = { value = [[1, 0.1], [16, 0.5]], source = "..." }   # optional
cache_gb = { value = 0.032, source = "..." }                  # optional: last-level cache
gemv_cache_gb = { value = 0.04, source = "..." }              # optional: what one-token passes keep (>= cache_gb)
cache_bw_gbps = { value = 90.0, source = "..." }              # optional: streaming from it
cache_gemm_efficiency_curve = { value = [[1, 0.4]], source = "..." }  # optional: weights in cache
cache_op_overhead_us = { value = 7.0, source = "..." }        # optional: per launch, model in cache
cache_loop_op_overhead_us = { value = 9.0, source = "..." }   # optional: the same, passes in a decode loop
masked_overhead_factor = { value = 1.2, source = "..." }     # optional: a masked multi-token pass's fixed costs / one-token
gemm_row_ns_curve = { value = [[1, 140.0], [8, 40.0]], source = "..." }  # optional: ns per streamed weight row
batched_gemm_efficiency_curve = { value = [[1, 0.2]], source = "..." }  # optional: batched GEMMs (stacked weights)
batched_gemm_row_ns_curve = { value = [[1, 35.0]], source = "..." }     # optional: their ns per streamed row
[devices.gpu.peak_tflops]
fp16 = { value = 142.0, source = "..." }
[devices.gpu.timing]             # optional: measured operator latencies instead of the roofline (hwmodels.profile)
backend = { value = "profiled", source = "..." }              # roofline | profiled
profile = { value = "profiles/x.csv", source = "..." }        # relative to this file
mode = { value = "graph", source = "..." }                    # eager | graph
[devices.cpu.derived_peak_tflops]  # optional: dtypes not measured, priced as factor x a measured peak
fp16 = { from = "fp32", factor = 1.0, source = "..." }
[devices.cpu.dtype_gemm_efficiency_curve]  # optional: a dtype's own streamed GEMM curve (rows' start-up in it)
bf16 = { value = [[1, 0.03], [16, 0.4]], source = "..." }

[[links]]
name = "pcie"
kind = "pcie"                    # pcie | unified | storage | ethernet | nvlink
src = "cpu"                      # a device, or "storage"
dst = "gpu"
bw_gbps = { value = 31.5, source = "..." }
latency_us = { value = 10.0, source = "..." }
efficiency = { value = 0.8, source = "..." }
host_share = { value = 0.0, source = "..." }    # optional: share of the receiver's compute a transfer takes

[[memory_domains]]
name = "dram"
devices = ["cpu", "gpu"]
bw_gbps = { value = 51.2, source = "..." }
capacity_gb = { value = 8.0, source = "..." }
contention_efficiency = { value = 0.85, source = "..." }

[loop_costs.cpu]        # optional (hetspec calibrate writes it): HetSpec's decode loops beyond their forwards
chain_step = { value = 40.0, source = "..." }                 # <method>_step / _pass / _node, microseconds
probe_lm_head = { value = 1572864, source = "..." }           # and a [loop_costs.cpu.narrow] table: docs
```

A bad file raises :class:`~hwmodels.errors.PresetError` naming the file, the field and the
problem, e.g. ``x.toml: devices.gpu.mem_bw_gbps: must be > 0 (got -1)``.

Names: a platform in a platform folder (the built-in presets, ``$HETSPEC_PLATFORMS_DIR``) is the
platform of its file name: ``my-box.toml`` is ``my-box`` in every listing, table and lookup. A
built-in preset must declare that name; a user file whose ``name`` differs (a copied preset, a
renamed ``host.toml``) is loaded under its file name. A file given by path keeps its declared name.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from hwmodels import env_folders
from hwmodels.atomic_files import write_text
from hwmodels.datafile import output_path, read_data_file, writing
from hwmodels.dtypes import DTYPE_BYTES
from hwmodels.errors import HetSpecError, PresetError, UnknownNameError
from hwmodels.platform import (
    COST_CURVE_FIELDS,
    CURVE_FIELDS,
    DEVICE_KINDS,
    LINK_KINDS,
    LOOP_COST_TERMS,
    STORAGE,
    Device,
    Link,
    LoopCosts,
    MemoryDomain,
    Platform,
)
from hwmodels.profile import check_profiled_device, read_timing, timing_to_dict

#: Environment variable naming an extra folder of platform files (``hetspec calibrate`` writes
#: ``host.toml`` there by default).
PLATFORMS_DIR_ENV = env_folders.PLATFORMS_DIR_ENV

# field -> (required, check); checks: "pos" > 0, "frac" in (0, 1], "unit" in [0, 1], "share" in [0, 1), "nonneg" >= 0,
# "int" integer >= 1
_DEVICE_NUMBERS = {
    "mem_bw_gbps": (True, "pos"),
    "mem_capacity_gb": (True, "pos"),
    "bw_efficiency": (True, "frac"),
    "compute_efficiency": (True, "frac"),
    "op_overhead_us": (True, "nonneg"),
    "token_tile": (True, "int"),
    "sparse_attn_efficiency": (True, "unit"),
    "cores": (False, "int"),
    "cache_gb": (False, "pos"),
    "gemv_cache_gb": (False, "pos"),
    "cache_bw_gbps": (False, "pos"),
    "cache_op_overhead_us": (False, "nonneg"),
    "cache_loop_op_overhead_us": (False, "nonneg"),
    "masked_overhead_factor": (False, "pos"),
    "cache_rewarm": (False, "unit"),
    "cache_rewarm_keep": (False, "unit"),
}
#: Optional ``[[tokens, efficiency], ...]`` fields of a device.
_DEVICE_CURVES = CURVE_FIELDS
#: Those of them whose values are costs (>= 0), not efficiencies.
_DEVICE_COST_CURVES = COST_CURVE_FIELDS
_LINK_NUMBERS = {"bw_gbps": (True, "pos"), "latency_us": (True, "nonneg"), "efficiency": (True, "frac"),
                 "host_share": (False, "share")}
_DOMAIN_NUMBERS = {"bw_gbps": (True, "pos"), "capacity_gb": (True, "pos"), "contention_efficiency": (True, "frac")}


class _Reader:
    """Validates one file; every error names ``path`` and the dotted field."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, field: str, problem: str) -> PresetError:
        return PresetError(self.path, field, problem)

    def text(self, table: dict, key: str, where: str, required: bool = True) -> str:
        if key not in table:
            if required:
                raise self.fail(f"{where}{key}", "missing field")
            return ""
        if not isinstance(table[key], str):
            raise self.fail(f"{where}{key}", f"must be a string (got {table[key]!r})")
        return table[key]

    def sourced(self, table: dict, key: str, where: str) -> tuple[Any, str]:
        """``{value = ..., source = "..."}`` -> (value, source)."""
        field = f"{where}{key}"
        entry = table[key]
        if not isinstance(entry, dict) or "value" not in entry:
            raise self.fail(field, 'must be { value = <number>, source = "..." }')
        source = entry.get("source")
        if not isinstance(source, str) or not source.strip():
            raise self.fail(field, "missing source (every number needs its source next to it)")
        extra = set(entry) - {"value", "source"}
        if extra:
            raise self.fail(field, f"unexpected key {sorted(extra)[0]!r}")
        return entry["value"], source

    def number(self, table: dict, key: str, where: str, check: str, required: bool,
               sources: dict[str, str]) -> float | int | None:
        field = f"{where}{key}"
        if key not in table:
            if required:
                raise self.fail(field, "missing field")
            return None
        value, source = self.sourced(table, key, where)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.fail(field, f"must be a number (got {value!r})")
        if check == "pos" and value <= 0:
            raise self.fail(field, f"must be > 0 (got {value})")
        if check == "nonneg" and value < 0:
            raise self.fail(field, f"must be >= 0 (got {value})")
        if check == "frac" and not 0 < value <= 1:
            raise self.fail(field, f"must be a fraction in (0, 1] (got {value})")
        if check == "unit" and not 0 <= value <= 1:
            raise self.fail(field, f"must be in [0, 1] (got {value})")
        if check == "share" and not 0 <= value < 1:
            raise self.fail(field, f"must be in [0, 1), below 1 (got {value})")
        if check == "int":
            if value != int(value) or value < 1:
                raise self.fail(field, f"must be an integer >= 1 (got {value})")
            value = int(value)
        sources[key] = source
        return value

    def unknown_keys(self, table: dict, allowed: set[str], where: str) -> None:
        extra = sorted(set(table) - allowed)
        if extra:
            raise self.fail(f"{where}{extra[0]}", f"unknown field; valid: {', '.join(sorted(allowed))}")

    def loop_costs(self, device: str, table: Any, where: str, devices: dict) -> LoopCosts:
        """A device's decode-loop costs: ``<method>_<term>``, ``probe_lm_head`` and an optional ``narrow`` table."""
        if device not in devices:
            raise self.fail(where.rstrip("."), f"loop costs of unknown device {device!r}; devices: {', '.join(devices)}")
        narrow = isinstance(table, dict) and "narrow" in table
        parts = []     # (costs, sources, probe_lm_head) of the table and of its narrow one
        for t, at in [(table, where)] + ([(table["narrow"], f"{where}narrow.")] if narrow else []):
            if not isinstance(t, dict):
                raise self.fail(at.rstrip("."), "must be a table of <method>_<step|pass|node> = { value, source }")
            costs, sources = {}, {}
            for key in (k for k in t if k not in ("probe_lm_head", "narrow")):
                if key.rsplit("_", 1)[-1] not in LOOP_COST_TERMS:
                    raise self.fail(f"{at}{key}", f"keys are <method>_<term>, term one of {', '.join(LOOP_COST_TERMS)}")
                costs[key] = float(self.number(t, key, at, "nonneg", True, sources))
            parts.append((costs, sources, self.number(t, "probe_lm_head", at, "pos", narrow, sources)))
        (costs, sources, lm_head), (narrow_us, narrow_sources, narrow_lm_head) = parts[0], (parts + [({}, {}, None)])[1]
        if narrow and not narrow_lm_head < lm_head:
            raise self.fail(f"{where}narrow.probe_lm_head", f"must be below {where}probe_lm_head ({lm_head:g}; "
                            f"got {narrow_lm_head:g})")
        return LoopCosts(device=device, costs_us=costs, sources=sources | {f"narrow.{k}": v for k, v in
                                                                            narrow_sources.items()},
                         lm_head=lm_head, narrow_us=narrow_us, narrow_lm_head=narrow_lm_head)

    def device(self, name: str, table: Any) -> Device:
        where = f"devices.{name}."
        if not isinstance(table, dict):
            raise self.fail(f"devices.{name}", "must be a table")
        allowed = set(_DEVICE_NUMBERS) | {"kind", "description", "peak_tflops", "derived_peak_tflops",
                                          "dtype_gemm_efficiency_curve", "timing"} | set(_DEVICE_CURVES)
        self.unknown_keys(table, allowed, where)
        kind = self.text(table, "kind", where)
        if kind not in DEVICE_KINDS:
            raise self.fail(f"{where}kind", f"unknown kind {kind!r}; valid: {', '.join(DEVICE_KINDS)}")
        sources: dict[str, str] = {}
        numbers = {k: self.number(table, k, where, check, req, sources) for k, (req, check) in _DEVICE_NUMBERS.items()}
        if numbers["gemv_cache_gb"] is not None and (numbers["cache_gb"] is None
                                                     or numbers["gemv_cache_gb"] < numbers["cache_gb"]):
            raise self.fail(f"{where}gemv_cache_gb", "needs cache_gb and must be >= it (one-token passes keep "
                                                     "at least what passes of more tokens keep)")
        peaks_table = table.get("peak_tflops")
        if not isinstance(peaks_table, dict) or not peaks_table:
            raise self.fail(f"{where}peak_tflops", "missing field (a table of dtype = { value, source })")
        peaks: dict[str, float] = {}
        for dtype in peaks_table:
            if dtype not in DTYPE_BYTES:
                raise self.fail(f"{where}peak_tflops.{dtype}", f"unknown dtype; valid: {', '.join(DTYPE_BYTES)}")
            peak_sources: dict[str, str] = {}
            peaks[dtype] = float(self.number(peaks_table, dtype, f"{where}peak_tflops.", "pos", True, peak_sources))
            sources[f"peak_tflops.{dtype}"] = peak_sources[dtype]
        derived = self.derived_peaks(table.get("derived_peak_tflops"), peaks, where, sources)
        curves = {}
        for key in _DEVICE_CURVES:
            if key in table:
                curves[key] = self.curve(table, key, where, key in _DEVICE_COST_CURVES, sources)
        dtype_curves = self.dtype_curves(table.get("dtype_gemm_efficiency_curve"), peaks, derived, where, sources)
        timing = read_timing(self.path, f"{where}timing.", table["timing"], self.path) if "timing" in table else None
        device = Device(
            name=name, kind=kind, peak_tflops=peaks, derived_peaks=derived, **curves,
            dtype_gemm_efficiency_curves=dtype_curves,
            description=self.text(table, "description", where, required=False), sources=sources, timing=timing,
            **numbers,
        )
        if timing is not None and timing.profiled:
            check_profiled_device(self.path, where, device)
        return device

    def curve(self, table: dict, key: str, where: str, cost: bool,
              sources: dict[str, str]) -> tuple[tuple[int, float], ...]:
        """A ``key = { value = [[tokens, x], ...], source }`` curve: efficiencies in (0, 1], or (``cost``)
        costs >= 0, at token counts >= 1; records its source under ``key``."""
        value, source = self.sourced(table, key, where)
        try:
            curve = tuple((int(t), float(e)) for t, e in value)
        except (TypeError, ValueError):
            raise self.fail(f"{where}{key}", "must be a list of [tokens, efficiency] pairs") from None
        if cost:
            if not curve or any(t < 1 or not e >= 0 for t, e in curve):
                raise self.fail(f"{where}{key}", "needs tokens >= 1 and costs >= 0")
        elif not curve or any(t < 1 or not 0 < e <= 1 for t, e in curve):
            raise self.fail(f"{where}{key}", "needs tokens >= 1 and efficiencies in (0, 1]")
        sources[key] = source
        return curve

    def dtype_curves(self, table: Any, peaks: dict[str, float], derived: dict, where: str,
                     sources: dict[str, str]) -> dict[str, tuple[tuple[int, float], ...]]:
        """``[dtype_gemm_efficiency_curve]``: ``dtype = { value = [[tokens, efficiency], ...], source }``,
        each for a dtype the device has a peak for."""
        if table is None:
            return {}
        field = f"{where}dtype_gemm_efficiency_curve"
        if not isinstance(table, dict):
            raise self.fail(field, 'must be a table of dtype = { value = [[tokens, efficiency], ...], source = "..." }')
        curves, own = {}, {}
        for dtype in table:
            if dtype not in peaks and dtype not in derived:
                raise self.fail(f"{field}.{dtype}", f"no peak for this dtype; peaks: {', '.join([*peaks, *derived])}")
            curves[dtype] = self.curve(table, dtype, f"{field}.", False, own)
            sources[f"dtype_gemm_efficiency_curve.{dtype}"] = own[dtype]
        return curves

    def derived_peaks(self, table: Any, peaks: dict[str, float], where: str,
                      sources: dict[str, str]) -> dict[str, tuple[str, float]]:
        """``[derived_peak_tflops]``: ``dtype = { from = "<measured dtype>", factor = <x>, source = "..." }``."""
        if table is None:
            return {}
        field = f"{where}derived_peak_tflops"
        if not isinstance(table, dict):
            raise self.fail(field, 'must be a table of dtype = { from = "fp32", factor = 1.0, source = "..." }')
        derived: dict[str, tuple[str, float]] = {}
        for dtype, entry in table.items():
            here = f"{field}.{dtype}"
            if dtype not in DTYPE_BYTES:
                raise self.fail(here, f"unknown dtype; valid: {', '.join(DTYPE_BYTES)}")
            if dtype in peaks:
                raise self.fail(here, f"{dtype} has a measured peak in peak_tflops; give it in one table only")
            if not isinstance(entry, dict) or set(entry) != {"from", "factor", "source"}:
                raise self.fail(here, 'must be { from = "<measured dtype>", factor = <number>, source = "..." }')
            source, factor, text = entry["from"], entry["factor"], entry["source"]
            if source not in peaks:
                raise self.fail(f"{here}.from", f"{source!r} has no measured peak; measured: {', '.join(peaks)}")
            if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) \
                    or factor <= 0:
                raise self.fail(f"{here}.factor", f"must be a number > 0 (got {factor!r})")
            if not isinstance(text, str) or not text.strip():
                raise self.fail(f"{here}.source", "missing source (why this peak may be derived)")
            derived[dtype] = (source, float(factor))
            sources[f"peak_tflops.{dtype}"] = f"derived: {float(factor):g} x the {source} peak; {text}"
            sources[f"derived_peak_tflops.{dtype}"] = text
        return derived

    def link(self, i: int, table: Any, devices: dict[str, Device]) -> Link:
        where = f"links[{i}]."
        if not isinstance(table, dict):
            raise self.fail(f"links[{i}]", "must be a table")
        self.unknown_keys(table, set(_LINK_NUMBERS) | {"name", "kind", "src", "dst", "description"}, where)
        kind = self.text(table, "kind", where)
        if kind not in LINK_KINDS:
            raise self.fail(f"{where}kind", f"unknown link kind {kind!r}; valid: {', '.join(LINK_KINDS)}")
        ends = {}
        for end in ("src", "dst"):
            value = self.text(table, end, where)
            if value not in devices and value != STORAGE:
                raise self.fail(f"{where}{end}", f"link to unknown device {value!r}; devices: {', '.join(devices)}"
                                                 f" (or {STORAGE!r})")
            ends[end] = value
        sources: dict[str, str] = {}
        numbers = {k: self.number(table, k, where, check, req, sources) for k, (req, check) in _LINK_NUMBERS.items()}
        numbers = {k: v for k, v in numbers.items() if v is not None}
        return Link(name=self.text(table, "name", where), kind=kind, description=self.text(table, "description", where, False),
                    sources=sources, **ends, **numbers)

    def domain(self, i: int, table: Any, devices: dict[str, Device]) -> MemoryDomain:
        where = f"memory_domains[{i}]."
        if not isinstance(table, dict):
            raise self.fail(f"memory_domains[{i}]", "must be a table")
        self.unknown_keys(table, set(_DOMAIN_NUMBERS) | {"name", "devices", "description"}, where)
        members = table.get("devices")
        if not isinstance(members, list) or not members:
            raise self.fail(f"{where}devices", "missing field (a list of device names)")
        for member in members:
            if member not in devices:
                raise self.fail(f"{where}devices", f"unknown device {member!r}; devices: {', '.join(devices)}")
        sources: dict[str, str] = {}
        numbers = {k: self.number(table, k, where, check, req, sources) for k, (req, check) in _DOMAIN_NUMBERS.items()}
        return MemoryDomain(name=self.text(table, "name", where), devices=tuple(members),
                            description=self.text(table, "description", where, False), sources=sources, **numbers)


def parse_platform(data: dict, path: str) -> Platform:
    """Build and check a :class:`Platform` from a parsed TOML document."""
    reader = _Reader(path)
    reader.unknown_keys(data, {"name", "description", "devices", "links", "memory_domains", "loop_costs"}, "")
    name = reader.text(data, "name", "")
    devices_table = data.get("devices")
    if not isinstance(devices_table, dict) or not devices_table:
        raise reader.fail("devices", "missing field (at least one [devices.<name>] table)")
    loop_tables = data.get("loop_costs", {})
    if not isinstance(loop_tables, dict):
        raise reader.fail("loop_costs", "must be a table of [loop_costs.<device>] tables")
    loop_tables = {d: (t, f"loop_costs.{d}.") for d, t in loop_tables.items()}
    for dev, table in devices_table.items():   # calibrations written before loop_costs kept them per device
        if isinstance(table, dict) and "host_costs_us" in table:
            table = dict(table)
            loop_tables.setdefault(dev, (table.pop("host_costs_us"), f"devices.{dev}.host_costs_us."))
            devices_table = {**devices_table, dev: table}
    devices = {n: reader.device(n, t) for n, t in devices_table.items()}
    loop_costs = {d: reader.loop_costs(d, t, where, devices) for d, (t, where) in loop_tables.items()}
    links = tuple(reader.link(i, t, devices) for i, t in enumerate(data.get("links", [])))
    domains = tuple(reader.domain(i, t, devices) for i, t in enumerate(data.get("memory_domains", [])))
    seen: dict[str, str] = {}
    for i, domain in enumerate(domains):
        for member in domain.devices:
            if member in seen:
                raise reader.fail(f"memory_domains[{i}].devices", f"device {member!r} is already in domain {seen[member]!r}")
            seen[member] = domain.name
    return Platform(name=name, description=reader.text(data, "description", "", required=False),
                    devices=devices, links=links, memory_domains=domains, path=path, loop_costs=loop_costs)


def load_platform_file(path: str | Path) -> Platform:
    """The platform of a file; one in a platform folder is named by its file (see the module docstring)."""
    path = Path(path)
    data = read_data_file(path, "platform file")
    platform = parse_platform(data, str(path))
    if platform.name != path.stem:
        if path.parent == builtin_preset_dir():
            raise PresetError(str(path), "name", f"must equal the file name {path.stem!r} (got {platform.name!r})")
        if _same_folder(path.parent, user_platform_dir()):
            platform = replace(platform, name=path.stem)
    return platform


def _same_folder(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def builtin_preset_dir() -> Path:
    return Path(str(resources.files("hwmodels").joinpath("presets")))


def user_platform_dir() -> Path:
    """Where user platforms (e.g. the calibrated ``host``) live: ``$HETSPEC_PLATFORMS_DIR`` or
    ``<user data dir>/hetspec/platforms``."""
    env = env_folders.env_folder(PLATFORMS_DIR_ENV, writable=False)
    if env is not None:
        return env
    import platformdirs

    return Path(platformdirs.user_data_dir("hetspec")) / "platforms"


def _platform_files() -> dict[str, Path]:
    files = {p.stem: p for p in sorted(builtin_preset_dir().glob("*.toml"))}
    user = user_platform_dir()
    if user.is_dir():
        for p in sorted(user.glob("*.toml")):
            files.setdefault(p.stem, p)
    return files


def platform_file(name: str) -> Path | None:
    """The file platform ``name`` loads from (the built-in presets first, then the user folder), or None."""
    return _platform_files().get(name)


def shadowed_platform_files() -> dict[str, Path]:
    """User platform files named like a built-in preset (the preset keeps the name), by that name."""
    user = user_platform_dir()
    if not user.is_dir():
        return {}
    presets = {p.stem for p in builtin_preset_dir().glob("*.toml")}
    return {p.stem: p for p in sorted(user.glob("*.toml")) if p.stem in presets}


def shadow_warning(name: str, path: Path) -> str:
    """The line that says a user file is not used because a built-in preset has its name."""
    return (f"hetspec: warning: {path} is named like the built-in platform preset {name!r}, which is used; "
            f"rename the file (e.g. {name}-mine.toml) to use it")


def platform_names() -> tuple[str, ...]:
    """Built-in presets plus platforms in the user platform folder (e.g. ``host``)."""
    return tuple(_platform_files())


def load_platforms() -> tuple[dict[str, Platform], tuple[str, ...]]:
    """Every platform of the platform folders that loads, by name, and one line per file that does not
    (``<file>: <field>: <problem>``): one bad file in the user folder does not hide the others."""
    platforms: dict[str, Platform] = {}
    problems: list[str] = []
    for name, path in _platform_files().items():
        try:
            platforms[name] = load_platform_file(path)
        except HetSpecError as exc:
            problems.append(str(exc))
    return platforms, tuple(problems)


def get_platform(name_or_path: str) -> Platform:
    """A platform by preset name, or from a ``.toml`` file path."""
    files = _platform_files()
    if name_or_path in files:
        shadowed = shadowed_platform_files().get(name_or_path)
        if shadowed is not None:
            print(shadow_warning(name_or_path, shadowed), file=sys.stderr)
        return load_platform_file(files[name_or_path])
    if name_or_path.endswith(".toml") or os.sep in name_or_path:
        return load_platform_file(name_or_path)
    hint = " (run `hetspec calibrate` to create it)" if name_or_path == "host" else ""
    declaring = _files_declaring(name_or_path, files)
    if declaring:
        hint = (f" ({declaring[0].name} declares that name; a platform in a platform folder is named by its file: "
                f"use {declaring[0].stem!r})")
    err = UnknownNameError("platform", name_or_path, files)
    if hint:
        raise HetSpecError(str(err) + hint)
    raise err


def _files_declaring(name: str, files: dict[str, Path]) -> list[Path]:
    """User platform files whose ``name`` field is ``name`` (for the hint of an unknown name)."""
    import tomllib

    found = []
    for path in files.values():
        if path.parent == builtin_preset_dir():
            continue
        try:
            declared = tomllib.loads(path.read_text()).get("name")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        if declared == name:
            found.append(path)
    return found


# ---------------------------------------------------------------------- writing
def _sourced(value: Any, sources: dict[str, str], key: str) -> dict:
    return {"value": value, "source": sources.get(key, "unknown")}


def _loop_costs_doc(c: LoopCosts) -> dict:
    doc: dict[str, Any] = {}
    if c.lm_head is not None:
        doc["probe_lm_head"] = _sourced(c.lm_head, c.sources, "probe_lm_head")
    doc |= {k: _sourced(v, c.sources, k) for k, v in c.costs_us.items()}
    if c.narrow_us:
        doc["narrow"] = {"probe_lm_head": _sourced(c.narrow_lm_head, c.sources, "narrow.probe_lm_head"),
                         **{k: _sourced(v, c.sources, f"narrow.{k}") for k, v in c.narrow_us.items()}}
    return doc


def platform_to_dict(platform: Platform) -> dict:
    """The TOML document of a platform (inverse of :func:`parse_platform`)."""
    devices = {}
    for name, d in platform.devices.items():
        entry: dict[str, Any] = {"kind": d.kind}
        if d.description:
            entry["description"] = d.description
        for key in _DEVICE_NUMBERS:
            value = getattr(d, key)
            if value is not None:
                entry[key] = _sourced(value, d.sources, key)
        for key in _DEVICE_CURVES:
            if getattr(d, key):
                entry[key] = _sourced([list(p) for p in getattr(d, key)], d.sources, key)
        entry["peak_tflops"] = {dt: _sourced(v, d.sources, f"peak_tflops.{dt}") for dt, v in d.measured_peaks.items()}
        if d.derived_peaks:
            entry["derived_peak_tflops"] = {
                dt: {"from": src, "factor": factor, "source": d.sources.get(f"derived_peak_tflops.{dt}", "unknown")}
                for dt, (src, factor) in d.derived_peaks.items()}
        if d.dtype_gemm_efficiency_curves:
            entry["dtype_gemm_efficiency_curve"] = {
                dt: _sourced([list(p) for p in c], d.sources, f"dtype_gemm_efficiency_curve.{dt}")
                for dt, c in d.dtype_gemm_efficiency_curves.items()}
        if d.timing is not None:
            entry["timing"] = timing_to_dict(d.timing)
        devices[name] = entry
    doc: dict[str, Any] = {"name": platform.name, "description": platform.description, "devices": devices}
    if platform.links:
        doc["links"] = [
            {"name": l.name, "kind": l.kind, "src": l.src, "dst": l.dst,
             **({"description": l.description} if l.description else {}),
             **{k: _sourced(getattr(l, k), l.sources, k) for k in _LINK_NUMBERS
                if k != "host_share" or l.host_share}}
            for l in platform.links
        ]
    if platform.loop_costs:
        doc["loop_costs"] = {d: _loop_costs_doc(c) for d, c in platform.loop_costs.items()}
    if platform.memory_domains:
        doc["memory_domains"] = [
            {"name": m.name, "devices": list(m.devices), **({"description": m.description} if m.description else {}),
             **{k: _sourced(getattr(m, k), m.sources, k) for k in _DOMAIN_NUMBERS}}
            for m in platform.memory_domains
        ]
    return doc


def write_platform_file(platform: Platform, path: str | Path) -> Path:
    import tomli_w

    path = output_path(path, "platform file")
    with writing(path, "platform file"):
        write_text(path, tomli_w.dumps(platform_to_dict(platform)))
    return path
