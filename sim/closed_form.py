"""Closed-form step latency without the event loop, vectorised over configurations (numpy).

The engine plays tasks; this module adds up the same roofline times directly, over arrays of
(tree width q, context s, batch b, tree-mask density), so an optimizer or a sweep prices
thousands of configurations per call.

Exactness without a second copy of the accounting: every FLOP and byte count of
:func:`sim.step_graph.build_step_graph` is a polynomial in (b, q, s) built from the monomials
:data:`BASIS` (linear layers: b*q and a constant; attention: b*q*s, b*s, b*q*q). Rather than
re-typing those formulas, :func:`step_polynomial` *recovers* each operator's coefficients by
evaluating ``build_step_graph`` at a few small integer points and solving the linear system, then
checks the fit at other points. So ``step_graph.py`` stays the one source of the accounting, and
if its formulas ever leave this polynomial family the check fails loudly instead of silently
drifting (tested against :func:`sim.step_timing.price_step`).

:func:`roofline_arrays` is :func:`hwmodels.roofline.roofline_time` on arrays (tile quantization,
sparse-kernel pricing of tree-masked work, per-token efficiency curve, launches), and
:func:`step_seconds` prices whole steps on one device at the device's standalone bandwidth
(:func:`hwmodels.contention.standalone_bw`), exactly what the engine's tasks take alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hwmodels.contention import standalone_bw
from hwmodels.errors import HetSpecError
from hwmodels.platform import Device, Platform
from sim.model_spec import ModelSpec
from sim.op_timing import forward_device, is_eager, is_profiled, profiled_seconds
from sim.step_graph import build_step_graph, weight_working_set

#: Monomials in (b, q, s) that span the step graph's FLOP and byte counts.
BASIS = ("1", "b", "q", "s", "bq", "bs", "qs", "bqs", "bqq", "qq")
#: Sample points (b, q, s) used to recover the coefficients, and points used to check them.
_FIT_B = (1, 2, 3)
_FIT_Q = (1, 2, 3, 5)
_FIT_S = (1, 4, 9)
_CHECK_POINTS = ((1, 7, 13), (4, 11, 2), (2, 64, 1000), (5, 3, 257))
#: Relative error above which the recovered polynomial is rejected (float64 round-off is ~1e-15).
_FIT_RTOL = 1e-9


def basis(b, q, s) -> np.ndarray:
    """``[..., len(BASIS)]`` monomials of broadcast (b, q, s)."""
    b, q, s = np.broadcast_arrays(np.asarray(b, float), np.asarray(q, float), np.asarray(s, float))
    return np.stack([np.ones_like(b), b, q, s, b * q, b * s, q * s, b * q * s, b * q * q, q * q], axis=-1)


@dataclass(frozen=True)
class StepPolynomial:
    """Per-operator coefficients of one model's step graph (``[n_ops, len(BASIS)]`` each).

    ``context`` tells which graph family it covers: context > 0 (dense attention over the cache
    present) or context == 0 (no cache: prefill-like, no ``attn_score``/``attn_value``).
    ``tokens`` are coefficients of the GEMM M dimension on (q, b*q).
    """

    model: ModelSpec
    dtype: str
    context: bool
    names: tuple[str, ...]
    sections: tuple[str, ...]
    flops: np.ndarray
    weight_bytes: np.ndarray
    act_bytes: np.ndarray
    kv_bytes: np.ndarray
    tokens: np.ndarray      # [n_ops, 2]: tokens = c0*q + c1*b*q
    count: np.ndarray       # [n_ops]
    launches: np.ndarray    # [n_ops]
    masked: np.ndarray      # [n_ops] bool: priced with the tree-mask density
    # profile keys (sim.op_timing; the roofline does not read them): operator and shape, the token count
    # (c0*q + c1*b*q) and the keys (c0*q + c1*s) a profile looks each operator up at, eager-model launches
    tables: tuple[str, ...] = ()
    shapes: tuple[str, ...] = ()
    profile_tokens: np.ndarray | None = None
    keys: np.ndarray | None = None
    eager_launches: np.ndarray | None = None
    rows: np.ndarray | None = None      # [n_ops] weight rows of linear layers (0 for other operators)

    def arrays(self, b, q, s) -> dict[str, np.ndarray]:
        """FLOPs, bytes and tokens of every operator, shape ``[..., n_ops]`` (per instance)."""
        X = basis(b, q, s)
        q_arr = np.asarray(q, float)[..., None]
        bq = (np.asarray(b, float) * np.asarray(q, float))[..., None]
        out = {
            "flops": X @ self.flops.T, "weight_bytes": X @ self.weight_bytes.T,
            "act_bytes": X @ self.act_bytes.T, "kv_bytes": X @ self.kv_bytes.T,
            "tokens": np.rint(self.tokens[:, 0] * q_arr + self.tokens[:, 1] * bq),
        }
        if self.profile_tokens is not None:
            s_arr = np.asarray(s, float)[..., None]
            out["profile_tokens"] = np.rint(self.profile_tokens[:, 0] * q_arr + self.profile_tokens[:, 1] * bq)
            out["keys"] = np.rint(self.keys[:, 0] * q_arr + self.keys[:, 1] * s_arr)
        return out


@lru_cache(maxsize=256)
def step_polynomial(model: ModelSpec, dtype: str | None = None, context: bool = True,
                    part: str = "ops") -> StepPolynomial:
    """Recover the polynomial form of ``build_step_graph(model, q, s, b)`` (cached per model/dtype).

    ``part="eager_ops"``: of the graph's :attr:`~sim.step_graph.StepGraph.eager_ops` instead (what the
    eager real model launches beyond the step graph; priced on a profiled device in eager mode only).
    """
    dtype = dtype or model.dtype
    s_values = _FIT_S if context else (0,)
    points = [(b, q, s) for b in _FIT_B for q in _FIT_Q for s in s_values]
    graphs = [_Part(build_step_graph(model, q, s, b, dtype), part) for b, q, s in points]
    ref = graphs[0]
    names = tuple(op.name for op in ref.ops)
    for g in graphs:
        if tuple(op.name for op in g.ops) != names:
            raise HetSpecError("closed form: the step graph's operator list changes with (b, q, s)")
    X = basis(*np.array(points, dtype=float).T)
    keep = np.ones(len(BASIS), dtype=bool)
    if not context:
        keep &= np.array(["s" not in m for m in BASIS])
    Xk = X[:, keep]

    def fit(field: str) -> np.ndarray:
        Y = np.array([[getattr(op, field) for op in g.ops] for g in graphs], dtype=float)  # [points, ops]
        coef_k, *_ = np.linalg.lstsq(Xk, Y, rcond=None)
        coef = np.zeros((len(BASIS), len(names)))
        coef[keep] = coef_k
        return coef.T  # [ops, basis]

    poly = {f: fit(f) for f in ("flops", "weight_bytes", "act_bytes", "kv_bytes")}
    # tokens: c0*q + c1*b*q
    T = np.array([[op.tokens for op in g.ops] for g in graphs], dtype=float)
    A = np.array([[q, b * q] for b, q, s in points], dtype=float)
    tok, *_ = np.linalg.lstsq(A, T, rcond=None)
    P = np.array([[op.profile_tokens or op.tokens for op in g.ops] for g in graphs], dtype=float)
    ptok, *_ = np.linalg.lstsq(A, P, rcond=None)
    K = np.array([[op.keys for op in g.ops] for g in graphs], dtype=float)
    keys, *_ = np.linalg.lstsq(np.array([[q, s] for b, q, s in points], dtype=float), K, rcond=None)
    out = StepPolynomial(
        model=model, dtype=dtype, context=context, names=names, sections=tuple(op.section for op in ref.ops),
        tokens=tok.T, count=np.array([op.count for op in ref.ops], dtype=float),
        launches=np.array([op.launches for op in ref.ops], dtype=float),
        masked=np.array([op.kind == "tree_attention" for op in ref.ops]), **poly,
        tables=tuple(op.table for op in ref.ops), shapes=tuple(op.shape for op in ref.ops),
        profile_tokens=ptok.T, keys=keys.T,
        eager_launches=np.array([op.launches if op.eager_launches is None else op.eager_launches for op in ref.ops],
                                dtype=float),
        rows=np.array([op.weight_rows for op in ref.ops], dtype=float),
    )
    _check_fit(out, model, dtype, context, part)
    return out


@dataclass(frozen=True)
class _Part:
    """The operators of one part of a step graph (``ops`` or ``eager_ops``)."""

    graph: object
    part: str

    @property
    def ops(self):
        return getattr(self.graph, self.part)


def _check_fit(poly: StepPolynomial, model: ModelSpec, dtype: str, context: bool, part: str = "ops") -> None:
    for b, q, s in _CHECK_POINTS:
        s = s if context else 0
        g = _Part(build_step_graph(model, q, s, b, dtype), part)
        arr = poly.arrays(b, q, s)
        for field in ("flops", "weight_bytes", "act_bytes", "kv_bytes", "tokens", "profile_tokens", "keys"):
            if field == "profile_tokens":
                want = np.array([op.profile_tokens or op.tokens for op in g.ops], dtype=float)
            else:
                want = np.array([getattr(op, field) for op in g.ops], dtype=float)
            got = arr[field]
            if not np.allclose(got, want, rtol=_FIT_RTOL, atol=1e-6):
                raise HetSpecError(f"closed form: step-graph field {field} is not a polynomial in {BASIS} "
                                   f"(at b={b} q={q} s={s}); update sim/closed_form.py BASIS")


def row_start_s(device: Device, tokens, rows, resident: bool = False, dtype: str | None = None) -> np.ndarray:
    """:meth:`Device.row_start_s` on arrays (tokens 0: no token dimension, no start-up)."""
    t = np.asarray(tokens, dtype=float)
    r = np.asarray(rows, dtype=float)
    curve = device.row_curve(dtype=dtype)
    if not curve or resident:
        return np.zeros(np.broadcast_shapes(t.shape, r.shape))
    return np.where(t >= 1, r * curve_at_arrays(curve, t) * 1e-9, 0.0)


def curve_at_arrays(curve: tuple[tuple[int, float], ...], tokens: np.ndarray) -> np.ndarray:
    """:func:`hwmodels.platform.curve_at` on an array of token counts."""
    counts = np.array([c for c, _ in curve], dtype=float)
    values = np.array([v for _, v in curve], dtype=float)
    return values[np.maximum(np.searchsorted(counts, tokens, side="right") - 1, 0)]


# ---------------------------------------------------------------------- roofline on arrays
def efficiency_at(device: Device, tokens: np.ndarray, resident: bool = False,
                  dtype: str | None = None) -> np.ndarray:
    """:meth:`Device.compute_efficiency_at` on an array of token counts."""
    curve = device.efficiency_curve(resident, dtype=dtype)
    t = np.maximum(np.asarray(tokens, dtype=float), 1.0)
    if not curve:
        return np.full_like(t, device.compute_efficiency)
    return curve_at_arrays(curve, t)


def roofline_arrays(device: Device, dtype: str, flops, nbytes, tokens, density=1.0, launches=1.0,
                    bw_bytes_per_s: float | np.ndarray | None = None, masked=True,
                    resident: bool = False, rows=0.0, masked_pass=False) -> dict[str, np.ndarray]:
    """:func:`hwmodels.roofline.roofline_time` elementwise over broadcast arrays.

    ``tokens`` 0 means "no token dimension" (no tile quantization, efficiency at 1 token), as in
    the scalar version; ``masked`` says which entries the tree-mask ``density`` applies to;
    ``resident`` prices cache-resident weights (cache bandwidth, in-cache GEMM efficiency);
    ``rows`` the weight rows of linear layers (their start-up when streamed, :meth:`Device.row_start_s`),
    ``masked_pass`` which entries belong to a forward of several new tokens per sequence (fixed costs times
    the device's masked-pass factor, :meth:`Device.overhead_s`).
    Returns ``time_s``, ``compute_s``, ``memory_s``, ``overhead_s`` (one instance each).
    """
    flops = np.asarray(flops, dtype=float)
    nbytes = np.asarray(nbytes, dtype=float)
    tokens = np.asarray(tokens, dtype=float)
    bw = (device.mem_bw_bytes_per_s * device.bw_efficiency) if bw_bytes_per_s is None else bw_bytes_per_s
    if resident and device.resident_bw_bytes_per_s() is not None:
        bw = device.resident_bw_bytes_per_s()
    tile = device.token_tile
    has_tok = tokens > 0
    safe_tok = np.where(has_tok, tokens, 1.0)
    quant = np.where(has_tok, np.ceil(safe_tok / tile) * tile / safe_tok, 1.0)
    eff_flops = flops * quant
    if device.sparse_attn_efficiency > 0.0:
        dens = np.asarray(density, dtype=float)
        sparse = np.minimum(eff_flops, eff_flops * dens / device.sparse_attn_efficiency)
        eff_flops = np.where(np.asarray(masked) & (dens < 1.0), sparse, eff_flops)
    compute_s = eff_flops / (device.peak_flops_per_s(dtype) * efficiency_at(device, np.where(has_tok, tokens, 1.0),
                                                                            resident, dtype))
    compute_s = compute_s + row_start_s(device, tokens, rows, resident, dtype)
    memory_s = nbytes / bw
    overhead_s = (np.asarray(launches, dtype=float) * device.overhead_s(resident)
                  * np.where(masked_pass, device.masked_factor, 1.0))
    return {"time_s": overhead_s + np.maximum(compute_s, memory_s), "compute_s": compute_s, "memory_s": memory_s,
            "overhead_s": overhead_s * np.ones_like(compute_s)}


def masked_pass(q) -> np.ndarray:
    """``[..., 1]`` bool over broadcast ``q``: whether a step of ``q`` new tokens per sequence runs under an
    attention mask (:attr:`sim.step_graph.Op.masked_pass`: more than one token)."""
    return (np.asarray(q, dtype=float) > 1)[..., None]


def chain_density(q) -> np.ndarray:
    """Mask density of a causal chain of q new tokens: (q + 1) / (2q) (as ``build_step_graph``)."""
    q = np.asarray(q, dtype=float)
    return (q + 1.0) / (2.0 * q)


def op_seconds(model: ModelSpec, platform: Platform, device: str, q, s, b=1, density=None,
               dtype: str | None = None, resident: bool | None = None) -> tuple[StepPolynomial, np.ndarray]:
    """Seconds of every operator (all instances) of a step: ``[..., n_ops]`` over broadcast (q, s, b).

    ``density`` is the tree-mask density (default: a causal chain). ``s`` must be all > 0 or all
    0 (the two graph families differ in their operators). A model whose weights fit in the
    device's last-level cache is priced cache-resident (:meth:`Device.holds`); ``resident`` overrides
    that (a strategy knows which other models share the cache during the step).
    """
    s_arr = np.asarray(s)
    if np.any(s_arr > 0) and np.any(s_arr == 0):
        raise HetSpecError("closed form: price context 0 and context > 0 in separate calls")
    poly = step_polynomial(model, dtype or model.dtype, context=bool(np.all(s_arr > 0)))
    dev, _ = forward_device(platform.device(device), model, poly.dtype)
    arr = poly.arrays(b, q, s)
    dens = chain_density(q) if density is None else np.asarray(density, dtype=float)
    nbytes = arr["weight_bytes"] + arr["act_bytes"] + arr["kv_bytes"]
    if resident is None:
        resident = dev.holds(weight_working_set(model, poly.dtype))
    if is_profiled(dev):    # measured operator latencies (sim.op_timing); the roofline below is untouched
        return _profiled_op_seconds(poly, arr, model, dev, b, q, s, dens, standalone_bw(platform, device), resident)
    t = roofline_arrays(dev, poly.dtype, arr["flops"], nbytes, arr["tokens"], np.asarray(dens)[..., None],
                        poly.launches, standalone_bw(platform, device), poly.masked, resident, poly.rows,
                        masked_pass(q))
    return poly, t["time_s"] * poly.count


def _profiled_op_seconds(poly: StepPolynomial, arr: dict, model: ModelSpec, dev: Device, b, q, s, dens, bw: float,
                         resident: bool) -> tuple[StepPolynomial, np.ndarray]:
    """:func:`op_seconds` on a profiled device; in eager mode the eager model's extra operators are appended."""
    parts = [poly]
    if is_eager(dev):
        parts.append(step_polynomial(model, poly.dtype, poly.context, part="eager_ops"))
    out = []
    for p in parts:
        arr = arr if p is poly else p.arrays(b, q, s)
        nbytes = arr["weight_bytes"] + arr["act_bytes"] + arr["kv_bytes"]
        launches = p.eager_launches if is_eager(dev) else p.launches
        fallback = roofline_arrays(dev, p.dtype, arr["flops"], nbytes, arr["tokens"], np.asarray(dens)[..., None],
                                   launches, bw, p.masked, resident, p.rows, masked_pass(q))["time_s"]
        out.append(profiled_seconds(p, dev, p.dtype, arr, b, fallback, resident) * p.count)
    if len(parts) == 1:
        return poly, out[0]
    key = (model, poly.dtype, poly.context)
    if key not in _JOINED:
        _JOINED[key] = _joined(*parts)
    return _JOINED[key], np.concatenate(out, axis=-1)


_JOINED: dict = {}


def _joined(a: StepPolynomial, b: StepPolynomial) -> StepPolynomial:
    """The operators of two polynomials as one (names, sections and per-operator arrays concatenated)."""
    cat = lambda x, y: np.concatenate([x, y])  # noqa: E731
    return StepPolynomial(
        model=a.model, dtype=a.dtype, context=a.context, names=a.names + b.names, sections=a.sections + b.sections,
        flops=cat(a.flops, b.flops), weight_bytes=cat(a.weight_bytes, b.weight_bytes),
        act_bytes=cat(a.act_bytes, b.act_bytes), kv_bytes=cat(a.kv_bytes, b.kv_bytes), tokens=cat(a.tokens, b.tokens),
        count=cat(a.count, b.count), launches=cat(a.launches, b.launches), masked=cat(a.masked, b.masked),
        tables=a.tables + b.tables, shapes=a.shapes + b.shapes, profile_tokens=cat(a.profile_tokens, b.profile_tokens),
        keys=cat(a.keys, b.keys), eager_launches=cat(a.eager_launches, b.eager_launches),
        rows=cat(a.rows, b.rows))


def step_seconds(model: ModelSpec, platform: Platform, device: str, q, s, b=1, density=None,
                 dtype: str | None = None, resident: bool | None = None) -> np.ndarray:
    """Seconds of one forward step of ``model`` on ``device`` alone, over broadcast (q, s, b, density)."""
    _, per_op = op_seconds(model, platform, device, q, s, b, density, dtype, resident)
    out = per_op.sum(axis=-1)
    return out
