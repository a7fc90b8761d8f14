"""The operators a measured profile times, as callables on preallocated tensors (:func:`op_callable`): the
step graph's operators by profile key (``table``, ``shape``), written as HetSpec's real model computes them,
and the ring of distinct weights behind a ``linear_streamed`` row (:func:`weight_ring`). The measurement
protocol is :mod:`real.validation.profiler.profile_device`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from hwmodels.errors import HetSpecError
from hwmodels.profile import linear_dims

#: Size of the ring of distinct weights behind a ``linear_streamed`` row, in last-level caches.
STREAM_CACHE_MULTIPLE = 4


def _rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """RMSNorm as HetSpec's model computes it (fp32 statistics)."""
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * weight


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def _heads(shape: str) -> tuple[int, int, int]:
    h, rest = shape[1:].split("kv")
    kv, d = rest.split("d")
    return int(h), int(kv), int(d.split("b")[0])


def last_level_cache_bytes(device: torch.device) -> int:
    """The device's last-level cache: the CPU's (:func:`real.validation.calibration.host_facts.llc_bytes`) or the GPU's L2."""
    if device.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)) or 50 * 2**20
    from real.validation.calibration.host_facts import llc_bytes

    return llc_bytes()[0]


def weight_ring(shape: str, device: torch.device, dtype: torch.dtype, cache_bytes: int) -> list[torch.Tensor]:
    """Distinct ``d_out x d_in`` weights totalling :data:`STREAM_CACHE_MULTIPLE` x ``cache_bytes`` (two at least)."""
    d_in, d_out = linear_dims(shape)
    nbytes = d_in * d_out * torch.finfo(dtype).bits // 8
    count = max(2, -(-STREAM_CACHE_MULTIPLE * cache_bytes // nbytes))
    g = torch.Generator(device=device).manual_seed(1)
    return [(torch.randn(d_out, d_in, generator=g, device=device) * d_in ** -0.5).to(dtype=dtype)
            for _ in range(count)]


def op_callable(table: str, shape: str, tokens: int, keys: int, vocab: int, device: torch.device,
                dtype: torch.dtype, ring: Sequence[torch.Tensor] = ()) -> Callable[[], object] | None:
    """A closure running one call of a step-graph operator of profile key (``table``, ``shape``) at
    ``tokens`` (and ``keys`` for attention), on preallocated tensors; None for an operator not profiled.
    ``linear_streamed`` takes each call's weight from ``ring`` (:func:`weight_ring`) in turn."""
    # drawn on the device itself: drawn on the host, a 7B-class row's weight costs more than the row's timing
    # (torch.randn of 45 M and 131 M values: 0.46 s and 1.9 s on a 2-core Xeon, then the copy to the GPU)
    g = torch.Generator(device=device).manual_seed(0)

    def rand(*size):
        return torch.randn(*size, generator=g, dtype=torch.float32, device=device).to(dtype=dtype)

    if table == "linear":
        d_in, d_out = (int(v) for v in shape.split("x"))
        x, w = rand(tokens, d_in), rand(d_out, d_in) * d_in ** -0.5
        return lambda: F.linear(x, w)
    if table == "linear_streamed":
        if len(ring) < 2:
            raise HetSpecError("linear_streamed: give a ring of at least two weights (weight_ring)")
        x = rand(tokens, linear_dims(shape)[0])
        turn = [0]

        def streamed():
            turn[0] = (turn[0] + 1) % len(ring)
            return F.linear(x, ring[turn[0]])
        return streamed
    if table == "attention":
        h, kv, d = _heads(shape)
        q, k, v = rand(1, h, tokens, d), rand(1, kv, keys, d), rand(1, kv, keys, d)
        mask = torch.ones(tokens, keys, dtype=torch.bool, device=device).tril(diagonal=keys - tokens)
        gqa = kv != h
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
    if table == "norm":
        x, w = rand(tokens, int(shape)), rand(int(shape))
        return lambda: _rms_norm(x, w)
    if table == "add":
        x, y = rand(tokens, int(shape)), rand(tokens, int(shape))
        return lambda: x + y
    if table == "act_mul":
        a, b = rand(tokens, int(shape)), rand(tokens, int(shape))
        return lambda: F.silu(a) * b
    if table == "gelu":
        a = rand(tokens, int(shape))
        return lambda: F.gelu(a)
    if table == "rope":
        h, kv, d = _heads(shape)
        q, k = rand(1, h, tokens, d), rand(1, kv, tokens, d)
        cos, sin = rand(tokens, d), rand(tokens, d)
        return lambda: (_rope(q, cos, sin), _rope(k, cos, sin))
    if table == "embedding":
        table_w = rand(vocab, int(shape))
        ids = torch.randint(0, vocab, (tokens,), generator=g, device=device)
        return lambda: F.embedding(ids, table_w)
    return None


def profile_keys(models) -> dict[tuple[str, str], int]:
    """(table, shape) -> vocabulary of the step-graph operators of ``models`` (ModelSpecs) that a profile
    row can hold."""
    from sim.step_graph import build_step_graph

    keys: dict[tuple[str, str], int] = {}
    for spec in models:
        for op in build_step_graph(spec, 1, 16).ops:
            if op.table:
                keys.setdefault((op.table, op.shape), spec.vocab)
    return keys
