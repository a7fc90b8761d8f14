"""Operator timing: one interface, two backends (the roofline, and measured profiles).

Every operator price in the simulator goes through here: :func:`sim.step_timing.price_op` (scalar),
:func:`sim.closed_form.op_seconds` (vectorised), :func:`sim.plan.op_task` (the engine's tasks). A device
is timed by

- the **roofline** (:mod:`hwmodels.roofline`; :func:`sim.closed_form.roofline_arrays`) unless its platform
  file says otherwise. That path is untouched: roofline results are what they were;
- a **profile** (``[devices.<name>.timing] backend = "profiled"``, :mod:`hwmodels.profile`): measured
  latency per operator call, looked up by the operator's profile key (``Op.table``, ``Op.shape``: a linear
  by ``d_in x d_out``, attention by heads / KV heads / head dim, ...) at its token count (and, for
  attention, the keys it attends). A call costs ``kernel_us`` plus the launch cost of the device's
  execution mode (``eager_launch_us`` or ``graph_launch_us``).

Interpolation: piecewise linear in tokens between adjacent measured rows (exact at every measured row,
monotone between two neighbours, no smoothing across a measured step); attention also piecewise linear
in keys between the two measured key counts around it, each interpolated in tokens first. Outside the
measured range, for a shape the profile does not have, a batch it was not measured at, a share of an
operator (a column split) or another dtype, the operator **falls back** to the roofline on the device,
whose ``bw_efficiency``, ``compute_efficiency`` and ``op_overhead_us`` *are* the profile's measurements
(checked when the platform loads, :func:`hwmodels.profile.check_profiled_device`); every priced operator
says which (``source``: ``profile`` or ``fallback: <why>``). A calibrated host device timed by a profile
(:attr:`hwmodels.profile.DeviceTiming.calibrated_roofline`) falls back to the calibration's roofline instead,
as that roofline prices: a forward the profile has no row of (:func:`unprofiled_forward`) wholly, an operator
with the step graph's launches.

``forward_rest`` (what a model's whole eager forward takes beyond its operators' rows) has no FLOPs or bytes,
so its roofline is zero. Where the profile has no row for the call it is never left at zero while the profile
measured a rest at all (:func:`rest_fallback`): the model's own row at the nearest measured token count, else
the rest per layer of the profiled model nearest in hidden size, times the model's layers; the source says
which. Only a profile without any ``forward_rest`` row prices it at 0 (it measured none), and says so.

An attention call is one fused kernel: its measured time goes to the operator that launches it
(``attn_score``, or ``tree_score`` without a cache) and the fused rest of the group costs nothing;
if the call falls back, each part is priced by the roofline as usual.

Eager mode also prices :attr:`sim.step_graph.StepGraph.eager_ops` (what HetSpec's eager real model
launches beyond the step graph's operators) and, for operators the profile does not cover, the kernels
the eager model launches for each (``Op.eager_launches``). Graph mode and the roofline do neither.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from hwmodels.platform import Device
from hwmodels.profile import DeviceTiming, OpProfile
from hwmodels.roofline import OpTiming, roofline_time
from sim.step_graph import Op

PROFILE = "profile"
PROFILE_IN_CALL = "profile (in the attention call)"
#: Profile table of linears timed with their weight streamed from memory (:mod:`hwmodels.profile`).
STREAMED = "linear_streamed"


def table_for(profile: OpProfile, table: str, shape: str, resident: bool) -> str:
    """The profile table that times an operator: a linear of a model whose weights do not stay in the cache
    by the profile's streamed rows where it has them for the shape, otherwise its own table."""
    if table == "linear" and not resident and (STREAMED, shape) in profile.tables:
        return STREAMED
    return table


def timing_of(device: Device) -> DeviceTiming | None:
    """The device's profiled timing, or None for a roofline device."""
    timing = getattr(device, "timing", None)
    return timing if timing is not None and timing.profiled else None


def is_profiled(device: Device) -> bool:
    return timing_of(device) is not None


def is_eager(device: Device) -> bool:
    """Profiled and run eagerly: the extra operators and per-kernel launches of the eager model are priced."""
    timing = timing_of(device)
    return timing is not None and timing.mode == "eager"


def fallback_launches(op: Op, device: Device) -> int:
    """Launches a fallback operator pays: the eager model's kernels on an eager profiled device whose
    roofline fields are its profile's (a launch there is one kernel's); the step graph's on a calibrated
    roofline, whose fixed cost per operator is already a whole forward's (:class:`DeviceTiming`)."""
    timing = timing_of(device)
    if is_eager(device) and op.eager_launches is not None and not timing.calibrated_roofline:
        return op.eager_launches
    return op.launches


def unprofiled_forward(device: Device, model, dtype: str) -> str | None:
    """Why a profiled device whose roofline fields are a host calibration's
    (:attr:`DeviceTiming.calibrated_roofline`) prices ``model``'s whole forward by that roofline: its profile is
    of another dtype, or it profiled whole forwards (``forward_rest`` rows) but not this model's. None where the
    profile prices the forward (an operator it lacks falls back alone), or on any other device."""
    from sim.step_graph import forward_key

    timing = timing_of(device)
    if timing is None or not timing.calibrated_roofline:
        return None
    profile = timing.profile
    if dtype != profile.dtype:
        return f"dtype {dtype} (profile is {profile.dtype}): the whole forward by the calibrated roofline"
    key = forward_key(model)
    if (REST, key) not in profile.tables and any(table == REST for table, _ in profile.tables):
        return f"forward {key} not profiled: the whole forward by the calibrated roofline"
    return None


def forward_device(device: Device, model, dtype: str) -> tuple[Device, str | None]:
    """The device that prices ``model``'s forward, and why it is not ``device`` (:func:`unprofiled_forward`):
    ``device`` itself, or its calibrated roofline (its timing dropped)."""
    why = unprofiled_forward(device, model, dtype)
    return (replace(device, timing=None), why) if why else (device, None)


# ---------------------------------------------------------------------- tables as arrays
@dataclass(frozen=True)
class _Line:
    keys: int
    tokens: np.ndarray      # float, ascending
    kernel_s: np.ndarray
    launch_s: np.ndarray    # in the device's mode


@lru_cache(maxsize=64)
def _arrays(profile: OpProfile, mode: str) -> dict[tuple[str, str], tuple[_Line, ...]]:
    col = 3 if mode == "eager" else 4
    out = {}
    for key, table in profile.tables.items():
        out[key] = tuple(_Line(line[0], np.asarray(line[1], float), np.asarray(line[2], float) * 1e-6,
                               np.asarray(line[col], float) * 1e-6) for line in table.lines)
    return out


@lru_cache(maxsize=64)
def _lists(profile: OpProfile, mode: str) -> dict[tuple[str, str], tuple[tuple[int, list, list, list], ...]]:
    """The tables as Python lists (keys, tokens, kernel_s, launch_s per keys line): the scalar fast path."""
    return {key: tuple((line.keys, line.tokens.tolist(), line.kernel_s.tolist(), line.launch_s.tolist())
                       for line in lines) for key, lines in _arrays(profile, mode).items()}


def _interp(x: float, xs: list, ys: list) -> float:
    i = bisect_left(xs, x)
    if xs[i] == x:
        return ys[i]
    w = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    return (1.0 - w) * ys[i - 1] + w * ys[i]


def lookup_scalar(profile: OpProfile, mode: str, table: str, shape: str, tokens: float,
                  keys: float = 0) -> tuple[float, float] | None:
    """:func:`lookup` for one query, in plain Python: (kernel_s, launch_s), or None outside the measured range."""
    lines = _lists(profile, mode).get((table, shape))
    if not lines:
        return None
    if table != "attention" or len(lines) == 1:
        k0, tok, kern, launch = lines[0]
        if keys != k0 or not tok[0] <= tokens <= tok[-1]:
            return None
        return _interp(tokens, tok, kern), _interp(tokens, tok, launch)
    axis = [line[0] for line in lines]
    if not axis[0] <= keys <= axis[-1]:
        return None
    hi = bisect_left(axis, keys)
    lo = hi if axis[hi] == keys else hi - 1
    parts = []
    for i in {lo, hi}:
        _, tok, kern, launch = lines[i]
        if not tok[0] <= tokens <= tok[-1]:
            return None
    for i in (lo, hi):
        _, tok, kern, launch = lines[i]
        parts.append((_interp(tokens, tok, kern), _interp(tokens, tok, launch)))
    w = 0.0 if hi == lo else (keys - axis[lo]) / (axis[hi] - axis[lo])
    return ((1 - w) * parts[0][0] + w * parts[1][0], (1 - w) * parts[0][1] + w * parts[1][1])


REST = "forward_rest"
_REST_KEY = re.compile(r"^L(\d+)H(\d+)")


def rest_fallback(profile: OpProfile, mode: str, shape: str, tokens: float) -> tuple[float, str]:
    """(seconds, why) of a ``forward_rest`` call of ``shape`` (:func:`sim.step_graph.forward_key`) at ``tokens``
    that the profile's rows do not cover: its own rows at the nearest measured token count; for a model without
    rows, the rest per layer of the profiled model nearest in hidden size (then more layers) at the nearest
    token count it measured, times this model's layers; 0 only where the profile has no ``forward_rest`` rows."""
    lines = _lists(profile, mode)

    def at(key: tuple[str, str]) -> tuple[float, int]:
        _, tok, kern, launch = lines[key][0]
        near = min(max(tokens, tok[0]), tok[-1])
        return _interp(near, tok, kern) + _interp(near, tok, launch), int(near)

    own = (REST, shape)
    if own in lines:
        seconds, near = at(own)
        tok = lines[own][0][1]
        if tok[0] <= tokens <= tok[-1]:
            return seconds, f"forward_rest {shape}: its rows at {tokens:g} tokens"
        return seconds, (f"forward_rest {shape}: {tokens:g} tokens outside the profiled {tok[0]:g}..{tok[-1]:g}; "
                         f"its row at {near} tokens")
    m = _REST_KEY.match(shape)
    others = [(key, _REST_KEY.match(key[1])) for key in lines if key[0] == REST]
    others = [(key, int(o.group(1)), int(o.group(2))) for key, o in others if o]
    if not m or not others:
        return 0.0, f"forward_rest {shape} not profiled (the profile has no forward_rest rows to scale from)"
    layers, hidden = int(m.group(1)), int(m.group(2))
    key, ref_layers, _ = min(others, key=lambda o: (abs(np.log(o[2] / hidden)), -o[1], o[0][1]))
    seconds, near = at(key)
    # a negative rest says that model's rows were timed slower than it ran whole: nothing about this model
    return max(seconds, 0.0) * layers / ref_layers, (f"forward_rest {shape} not profiled; {key[1]}'s rest at "
                                                     f"{near} tokens per layer x {layers} layers")


def _profile_shape(op: Op) -> str:
    return op.shape if op.table != "attention" or op.batch == 1 else f"{op.shape}b{op.batch}"


def lookup(profile: OpProfile, mode: str, table: str, shape: str, tokens, keys=0):
    """Measured (kernel_s, launch_s, covered) of ``table``/``shape`` at broadcast ``tokens`` (and ``keys``).

    Piecewise linear in tokens on each measured keys line, then in keys between the two lines around
    the query; ``covered`` is False outside the measured range (the other two are then NaN).
    """
    lines = _arrays(profile, mode).get((table, shape))
    t = np.asarray(tokens, dtype=float)
    k = np.asarray(keys, dtype=float)
    t, k = np.broadcast_arrays(t, k)
    nan = np.full(t.shape, np.nan)
    if not lines:
        return nan, nan, np.zeros(t.shape, dtype=bool)

    def on_line(line: _Line):
        inside = (t >= line.tokens[0]) & (t <= line.tokens[-1])
        return (np.interp(t, line.tokens, line.kernel_s), np.interp(t, line.tokens, line.launch_s), inside)

    if len(lines) == 1 or table != "attention":
        line = lines[0]
        kern, launch, inside = on_line(line)
        inside = inside & (k == line.keys)
        return np.where(inside, kern, np.nan), np.where(inside, launch, np.nan), inside
    keys_axis = np.array([line.keys for line in lines], dtype=float)
    per = [on_line(line) for line in lines]
    kern_all = np.stack([p[0] for p in per])          # [lines, ...]
    launch_all = np.stack([p[1] for p in per])
    in_all = np.stack([p[2] for p in per])
    hi = np.clip(np.searchsorted(keys_axis, k, side="left"), 0, len(lines) - 1)
    lo = np.where(keys_axis[hi] == k, hi, np.maximum(hi - 1, 0))
    k0, k1 = keys_axis[lo], keys_axis[hi]
    w = np.where(k1 > k0, (k - k0) / np.where(k1 > k0, k1 - k0, 1.0), 0.0)
    take = lambda arr, i: np.take_along_axis(arr, i[None, ...], axis=0)[0]  # noqa: E731
    covered = (k >= keys_axis[0]) & (k <= keys_axis[-1]) & take(in_all, lo) & take(in_all, hi)
    kern = (1 - w) * take(kern_all, lo) + w * take(kern_all, hi)
    launch = (1 - w) * take(launch_all, lo) + w * take(launch_all, hi)
    return np.where(covered, kern, np.nan), np.where(covered, launch, np.nan), covered


def _why_not(profile: OpProfile, op: Op, tokens: int, dtype: str, scaled: bool) -> str:
    """Why ``op`` is not covered (the ``fallback: ...`` source)."""
    if scaled:
        return "a share of the operator (not a profiled call)"
    if dtype != profile.dtype:
        return f"dtype {dtype} (profile is {profile.dtype})"
    if not op.table:
        return "no profile key"
    shape = _profile_shape(op)
    lines = profile.tables.get((op.table, shape))
    if not lines:
        if op.table == "attention" and op.batch != 1:
            return f"attention at batch {op.batch} not profiled"
        return f"{op.table} {shape} not profiled"
    tok = [t for line in lines.lines for t in line[1]]
    if op.table == "attention":
        keys = [line[0] for line in lines.lines]
        return f"q {tokens} over {op.keys} keys outside the profiled q {min(tok)}..{max(tok)}, keys {min(keys)}..{max(keys)}"
    return f"{tokens} tokens outside the profiled {min(tok)}..{max(tok)}"


# ---------------------------------------------------------------------- one operator
def op_time(op: Op, device: Device, dtype: str, bw_bytes_per_s: float | None = None, resident: bool = False,
            flops_scale: float = 1.0, bytes_scale: float = 1.0) -> tuple[OpTiming, str]:
    """(timing of one instance, source) of ``op`` on ``device``: the roofline on a roofline device (source
    ``roofline``), else the profile where it covers the call and the fallback roofline where it does not."""
    flops, nbytes = op.flops * flops_scale, op.bytes * bytes_scale
    timing = timing_of(device)
    if timing is None:
        return (roofline_time(device, flops, nbytes, dtype, tokens=op.tokens or None, density=op.density,
                              launches=op.launches, bw_bytes_per_s=bw_bytes_per_s, resident=resident,
                              rows=op.weight_rows, batched=op.batched, masked_pass=op.masked_pass), "roofline")
    profile, mode = timing.profile, timing.mode
    tokens = op.profile_tokens or op.tokens
    scaled = flops_scale != 1.0 or bytes_scale != 1.0
    if not scaled and op.table and dtype == profile.dtype:
        table = table_for(profile, op.table, op.shape, resident)
        found = lookup_scalar(profile, mode, table, _profile_shape(op), tokens, op.keys)
        if found is not None:
            kern, launch = found
            if op.table == "attention" and op.launches == 0:
                return OpTiming(0.0, 0.0, 0.0, 0.0, flops), PROFILE_IN_CALL
            bw = bw_bytes_per_s or device.mem_bw_bytes_per_s * device.bw_efficiency
            return OpTiming(kern + launch, kern, min(nbytes / bw, kern), launch, flops), PROFILE
    why = _why_not(profile, op, tokens, dtype, scaled)
    if op.table == REST and not scaled:     # the roofline has nothing to price it by: never left at zero
        seconds, rest_why = rest_fallback(profile, mode, op.shape, tokens)
        why = rest_why if dtype == profile.dtype else f"{why}; {rest_why}"
        return OpTiming(seconds, 0.0, 0.0, seconds, 0.0), f"fallback: {why}"
    return (roofline_time(device, flops, nbytes, dtype, tokens=op.tokens or None, density=op.density,
                          launches=fallback_launches(op, device), bw_bytes_per_s=bw_bytes_per_s, resident=resident,
                          rows=op.weight_rows, batched=op.batched, masked_pass=op.masked_pass),
            f"fallback: {why}")


def priced_ops(graph, device: Device) -> tuple[Op, ...]:
    """The operators of ``graph`` a device prices: the step graph's, plus the eager model's extra operators
    on a profiled device in eager mode."""
    return graph.ops + graph.eager_ops if is_eager(device) else graph.ops


# ---------------------------------------------------------------------- vectorised (the closed form)
def profiled_seconds(poly, device: Device, dtype: str, arr: dict, b, fallback: np.ndarray,
                     resident: bool = False) -> np.ndarray:
    """Seconds of one instance of every operator of ``poly`` (:class:`sim.closed_form.StepPolynomial`) on a
    profiled device, ``[..., n_ops]`` over broadcast (b, q, s): :func:`op_time` on arrays. ``arr`` holds the
    operators' token counts and keys (``poly.arrays``), ``fallback`` their fallback roofline seconds (with
    :func:`fallback_launches`' launch counts), which stay where the profile does not cover a call;
    ``resident``: the model's weights stay in the cache (:func:`table_for`)."""
    timing = timing_of(device)
    profile, mode = timing.profile, timing.mode
    if dtype != profile.dtype:     # nothing is looked up; a forward_rest is still never left at zero
        return _rest_fallbacks(poly, profile, mode, arr, fallback.copy())
    b_arr = np.broadcast_to(np.asarray(b, dtype=float), fallback.shape[:-1])
    out = fallback.copy()
    if b_arr.size == 1:    # one configuration (strategies price one at a time): plain Python lookups
        flat = out.reshape(-1)
        toks, keys, bv = arr["profile_tokens"].reshape(-1), arr["keys"].reshape(-1), float(b_arr.reshape(-1)[0])
        for j, (table, shape) in enumerate(zip(poly.tables, poly.shapes)):
            if not table:
                continue
            if table == "attention" and bv != 1:
                shape = f"{shape}b{int(bv)}"
            table = table_for(profile, table, shape, resident)
            found = lookup_scalar(profile, mode, table, shape, toks[j], keys[j] if table == "attention" else 0)
            if found is not None:
                flat[j] = 0.0 if table == "attention" and poly.launches[j] == 0 else found[0] + found[1]
            elif table == REST:
                flat[j] = rest_fallback(profile, mode, shape, float(toks[j]))[0]
        return out
    attention: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    full = fallback.shape[:-1] + (len(poly.tables),)
    toks, keys_all = np.broadcast_to(arr["profile_tokens"], full), np.broadcast_to(arr["keys"], full)
    for j, (table, shape) in enumerate(zip(poly.tables, poly.shapes)):
        if not table:
            continue
        tok = toks[..., j]
        if table == "attention":
            if shape not in attention:
                total = np.full(tok.shape, np.nan)
                covered = np.zeros(tok.shape, dtype=bool)
                for bv in np.unique(b_arr):
                    sel = b_arr == bv
                    name = shape if bv == 1 else f"{shape}b{int(bv)}"
                    kern, launch, cov = lookup(profile, mode, table, name, tok, keys_all[..., j])
                    cov = cov & sel
                    total = np.where(cov, kern + launch, total)
                    covered |= cov
                attention[shape] = (total, covered)
            total, covered = attention[shape]
            value = np.zeros_like(total) if poly.launches[j] == 0 else total
        else:
            kern, launch, covered = lookup(profile, mode, table_for(profile, table, shape, resident), shape, tok, 0)
            value = kern + launch
            if table == REST and not covered.all():
                rest = np.vectorize(lambda t: rest_fallback(profile, mode, shape, float(t))[0], otypes=[float])
                value = np.where(covered, value, rest(tok))
                covered = np.ones_like(covered)
        out[..., j] = np.where(covered, value, fallback[..., j])
    return out


def _rest_fallbacks(poly, profile: OpProfile, mode: str, arr: dict, out: np.ndarray) -> np.ndarray:
    """``out`` with every ``forward_rest`` column of ``poly`` priced by :func:`rest_fallback` (another dtype than
    the profile's: nothing is looked up, but the rest of the eager forward is no roofline's to price)."""
    toks = np.broadcast_to(arr["profile_tokens"], out.shape)
    for j, (table, shape) in enumerate(zip(poly.tables, poly.shapes)):
        if table == REST:
            rest = np.vectorize(lambda t: rest_fallback(profile, mode, shape, float(t))[0], otypes=[float])
            out[..., j] = rest(toks[..., j])
    return out


def measured_or(device: Device, op: Op, dtype: str, tokens, fallback, resident: bool = False) -> np.ndarray:
    """``fallback`` seconds (one instance of ``op`` at each of ``tokens``), replaced by the measured call where
    the device's profile covers ``op`` at that token count: :func:`op_time` on an array of token counts for
    an operator whose shape does not change with them (a linear layer, an elementwise operator)."""
    timing = timing_of(device)
    fallback = np.asarray(fallback, dtype=float)
    if timing is None or not op.table or op.table == "attention" or dtype != timing.profile.dtype:
        return fallback
    table = table_for(timing.profile, op.table, op.shape, resident)
    kern, launch, covered = lookup(timing.profile, timing.mode, table, op.shape, tokens, 0)
    return np.where(covered, kern + launch, fallback)
