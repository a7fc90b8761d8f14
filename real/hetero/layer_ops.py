"""Pieces of one decoder layer of :class:`real.model.transformer.Transformer`, to place them on different workers.

The split methods need a layer cut where the model's ``DecoderLayer.forward`` does it in one go:

- :func:`rms_norm` and :func:`rotate` repeat the model's RMSNorm and RoPE with the same operators
  in the same order, so a piece run on its own gives bit-identical results;
- :func:`project_qkv`, :func:`write_kv`, :func:`exact_attention` and :func:`post_attention` are
  ``Attention.forward`` / ``DecoderLayer.forward`` cut before and after attention (ALSpec runs the
  attention and the rest of the layer on two workers; on a miss the exact path equals the model's
  own forward bit for bit);
- :func:`partial_attention` and :func:`merge_partials`: attention over a subset of the keys that
  also returns the online-softmax statistics (row max m, row sum l), and the merge of such
  partials (FlashAttention / Ring Attention; Ghidorah §IV-B): with ``a_i = exp(m_i - m) l_i``,
  ``O = sum_i a_i O_i / sum_i a_i`` where ``O_i`` is already normalised by ``l_i``.

Shapes: b batch, q new tokens, H query heads, Hk key/value heads, hd head size, n keys.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from real.model.transformer import apply_rope


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """``real.model.transformer.RMSNorm`` with an explicit weight (same operators, same order)."""
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE of ``x [b, heads, q, hd]`` (``real.model.transformer.apply_rope``)."""
    return apply_rope(x, cos, sin)


def project_qkv(attn, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``Attention.forward`` up to the cache write: normed input ``x [b, q, d]`` -> roped
    ``xq [b, H, q, hd]``, roped ``xk [b, Hk, q, hd]``, ``xv [b, Hk, q, hd]``."""
    b, q, _ = x.shape
    xq = attn.q_proj(x).view(b, q, attn.n_heads, attn.hd).transpose(1, 2)
    xk = attn.k_proj(x).view(b, q, attn.n_kv, attn.hd).transpose(1, 2)
    xv = attn.v_proj(x).view(b, q, attn.n_kv, attn.hd).transpose(1, 2)
    return apply_rope(xq, cos, sin), apply_rope(xk, cos, sin), xv


def write_kv(cache, layer: int, start: int, xk: Tensor, xv: Tensor) -> int:
    """Write the new tokens' K/V at slots ``[start, start + q)`` of ``layer``; returns the end slot."""
    b, _, q, _ = xk.shape
    end = start + q
    cache.k[layer, :b, :, start:end] = xk
    cache.v[layer, :b, :, start:end] = xv
    return end


def exact_attention(attn, xq: Tensor, cache, layer: int, end: int, mask: Tensor | None) -> Tensor:
    """Attention of ``xq`` over cache slots ``[0, end)`` exactly as ``Attention.forward`` computes it,
    before the output projection: ``[b, q, H * hd]``."""
    b, _, q, _ = xq.shape
    keys, values = cache.k[layer, :b, :, :end], cache.v[layer, :b, :, :end]
    out = F.scaled_dot_product_attention(xq, keys, values, attn_mask=mask, is_causal=False,
                                         enable_gqa=attn.n_kv != attn.n_heads)
    return out.transpose(1, 2).reshape(b, q, attn.n_heads * attn.hd)


def post_attention(layer_module, x: Tensor, attn_out: Tensor) -> Tensor:
    """The rest of ``DecoderLayer.forward`` after attention: ``x + o_proj(attn)``, then the MLP block."""
    x = x + layer_module.self_attn.o_proj(attn_out)
    return x + layer_module.mlp(layer_module.post_attention_layernorm(x))


# ---------------------------------------------------------------------------- online softmax
def partial_attention(xq: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """Attention of ``xq [b, H, q, hd]`` over ``keys``/``values [b, Hk, n, hd]`` (grouped-query:
    query head h reads key head h // (H / Hk)) with ``mask [q, n]`` (True = attend; None = all).

    Returns ``(o [b, H, q, hd]`` normalised by its own row sum, ``m [b, H, q, 1]`` row max of the
    scaled scores, ``l [b, H, q, 1]`` sum of ``exp(score - m))``. Every row must see a key.
    """
    b, h, q, hd = xq.shape
    hk = keys.shape[1]
    g = h // hk
    qg = xq.reshape(b, hk, g * q, hd)                                   # row g_i*q + i = head hk*g+g_i, token i
    scores = torch.matmul(qg, keys.transpose(-1, -2)) * (hd ** -0.5)    # [b, Hk, g*q, n]
    if mask is not None:
        scores = scores.masked_fill(~mask.repeat(g, 1), float("-inf"))
    m = scores.amax(-1, keepdim=True)                                   # [b, Hk, g*q, 1]
    p = torch.exp(scores - m)
    l = p.sum(-1, keepdim=True)
    o = torch.matmul(p, values) / l                                     # [b, Hk, g*q, hd]
    return o.reshape(b, h, q, hd), m.reshape(b, h, q, 1), l.reshape(b, h, q, 1)


def merge_partials(parts: list[tuple[Tensor, Tensor, Tensor]]) -> Tensor:
    """Online-softmax merge of partial attentions ``(o, m, l)`` over disjoint key sets -> ``[b, H, q, hd]``."""
    if len(parts) == 1:
        return parts[0][0]
    m = parts[0][1]
    for _, mi, _ in parts[1:]:
        m = torch.maximum(m, mi)
    weights = [torch.exp(mi - m) * li for _, mi, li in parts]           # a_i = exp(m_i - m) l_i
    total = weights[0]
    out = weights[0] * parts[0][0]
    for (oi, _, _), wi in zip(parts[1:], weights[1:]):
        total = total + wi
        out = out + wi * oi
    return out / total


def heads_to_rows(o: Tensor) -> Tensor:
    """``[b, H, q, hd]`` -> ``[b, q, H * hd]`` (the layout the output projection reads)."""
    b, h, q, hd = o.shape
    return o.transpose(1, 2).reshape(b, q, h * hd)
