"""Llama-architecture decoder in plain torch, with a KV cache that verifies token trees.

RMSNorm, rotary position embeddings, SwiGLU MLP and grouped-query attention, built from a
:class:`sim.model_spec.ModelSpec` (``arch="llama"``). Module names follow Hugging Face's
``LlamaForCausalLM`` so checkpoints load by name (see :mod:`real.model.checkpoint`).

KV cache, gpt-fast style: allocated once, written by slot. Slots ``[0, length)`` hold the
*committed* prefix. A forward pass appends its q new tokens as *pending* slots after any
pending slots already there, attending to the whole committed prefix, to the pending slots and
to one another as the mask allows. :meth:`KVCache.keep` then commits a chosen subset of the
pending tokens (the accepted path of a tree, in order) by copying their K/V down to
``[length, length + n)``; :meth:`KVCache.discard` drops them. Rejected tokens are never
"rolled back": their slots are simply overwritten later.

No forward reads a value back from its device: position bounds are checked in Python integers, the
attention mask is a view of rows the cache keeps (prefix columns set as the cache grows, the tree
block copied in). The eager forward here is the reference; :mod:`real.model.executor` runs the same
layers through static buffers and token-count buckets (CUDA graphs on a GPU) when attached.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hwmodels.errors import HetSpecError
from sim.model_spec import ModelSpec


class KVCache:
    """Keys and values of every layer: ``[n_layers, batch, n_kv_heads, max_len, head_dim]``."""

    def __init__(self, spec: ModelSpec, max_len: int, batch: int = 1,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"):
        shape = (spec.n_layers, batch, spec.n_kv_heads, max_len, spec.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.max_len = max_len
        self.length = 0    # committed tokens
        self.pending = 0   # tokens written after ``length`` by forwards since the last keep/discard
        #: the :class:`real.model.executor.StepExecutor` whose static buffers (``static``) own this
        #: cache (None: eager forwards)
        self.executor = None
        self.static = None
        self._attend: Tensor | None = None   # [rows, max_len] bool: mask rows reused by every forward
        self._true_upto = 0                  # columns [0, _true_upto) of _attend are True in every row
        self._blocks: dict[tuple[int, int], Tensor] = {}   # causal blocks by (q, pending)

    def reset(self) -> None:
        self.length = 0
        self.pending = 0

    def attention_mask(self, q: int, tree_mask: Tensor | None) -> Tensor | None:
        """``[q, end]`` bool mask of ``q`` new tokens written after the pending block (True = attend):
        the committed prefix, then ``tree_mask [q, pending + q]`` (causal when None). None for one
        token without a tree mask (it sees every slot). A view into rows kept with the cache: the
        prefix columns are set once as the cache grows, the block columns copied per call; nothing
        of size ``q x length`` is allocated per step."""
        if tree_mask is None and q == 1:
            return None
        start = self.length + self.pending
        end = start + q
        rows = self._attend
        if rows is None or rows.shape[0] < q:
            rows = self._attend = torch.zeros(max(q, 64), self.max_len, dtype=torch.bool, device=self.k.device)
            self._true_upto = 0
        if self._true_upto < self.length:
            rows[:, self._true_upto:self.length] = True
        self._true_upto = self.length     # block columns (>= length) are overwritten below
        block = rows[:q, self.length:end]
        block.copy_(tree_mask if tree_mask is not None else self.causal_block(q, self.pending))
        return rows[:q, :end]

    def causal_block(self, q: int, pending: int) -> Tensor:
        """``[q, pending + q]`` bool: new token i sees the pending block and new tokens ``<= i``."""
        key = (q, pending)
        block = self._blocks.get(key)
        if block is None:
            block = torch.ones(q, pending + q, dtype=torch.bool, device=self.k.device).tril(diagonal=pending)
            if q <= 256:
                self._blocks[key] = block
        return block

    def reserve(self, q: int) -> int:
        """Slot of the first of ``q`` new tokens; raises if the cache would overflow."""
        start = self.length + self.pending
        if start + q > self.max_len:
            raise HetSpecError(f"KV cache full: {start} + {q} tokens > max_len {self.max_len}")
        return start

    def keep(self, accepted: Sequence[int] | Tensor, index: Tensor | None = None) -> None:
        """Commit the pending tokens ``accepted`` (indices into the pending block, in order).
        ``index``: the same indices as a long tensor on the cache's device, when the caller has them
        there (no host-to-device copy)."""
        idx = [int(i) for i in accepted]
        if any(not 0 <= i < self.pending for i in idx):
            raise HetSpecError(f"keep({idx}): pending block has {self.pending} tokens")
        n = len(idx)
        if idx != list(range(n)):  # not already contiguous at the front: gather, then write
            src = (index if index is not None else index_tensor(idx, self.k.device)) + self.length
            dst = slice(self.length, self.length + n)
            self.k[:, :, :, dst] = self.k[:, :, :, src]
            self.v[:, :, :, dst] = self.v[:, :, :, src]
        self.length += n
        self.pending = 0

    def discard(self) -> None:
        """Drop every pending token."""
        self.pending = 0

    def truncate(self, length: int) -> None:
        """Forget committed tokens beyond ``length`` (e.g. a draft model's rejected proposals)."""
        if not 0 <= length <= self.length:
            raise HetSpecError(f"truncate({length}): cache holds {self.length} tokens")
        self.length = length
        self.pending = 0


def index_tensor(values: Sequence[int], device) -> Tensor:
    """A long tensor of ``values`` on ``device``; to a CUDA device through pinned memory without
    blocking (a plain host-to-device copy waits for every kernel queued before it)."""
    host = torch.tensor(list(values), dtype=torch.long)
    if torch.device(device).type == "cuda":
        return host.pin_memory().to(device, non_blocking=True)
    return host.to(device)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope_inv_freq(spec: ModelSpec) -> Tensor:
    """Inverse frequencies ``[head_dim / 2]`` (float64) of the spec's RoPE variant, computed as
    Hugging Face transformers computes them (``modeling_rope_utils``): ``default``; ``linear``
    (divided by ``factor``); ``llama3`` (Llama 3.1's scaling: wavelengths longer than
    ``original_max_position_embeddings / low_freq_factor`` divided by ``factor``, shorter than
    ``... / high_freq_factor`` kept, smoothly interpolated between)."""
    d = spec.head_dim
    inv_freq = 1.0 / (spec.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    params = spec.rope_parameters
    kind = params["rope_type"]
    if kind == "default":
        return inv_freq
    if kind == "linear":
        return inv_freq / params["factor"]
    if kind == "llama3":
        factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
        old_context = params["original_max_position_embeddings"]
        low_freq_wavelen, high_freq_wavelen = old_context / low, old_context / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_context / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
        return torch.where(medium, smoothed, scaled)
    raise HetSpecError(f"model {spec.name}: rope_type {kind!r} is not implemented")


def rope_tables(spec: ModelSpec, max_len: int) -> tuple[Tensor, Tensor]:
    """cos, sin of shape ``[max_len, head_dim]`` (Hugging Face's rotate-half layout)."""
    inv_freq = rope_inv_freq(spec)
    angles = torch.outer(torch.arange(max_len, dtype=torch.float64), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x: ``[b, heads, q, head_dim]``; cos/sin: ``[b or 1, 1, q, head_dim]``."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, layer: int):
        super().__init__()
        self.layer, self.n_heads, self.n_kv, self.hd = layer, spec.n_heads, spec.n_kv_heads, spec.head_dim
        self.q_proj = nn.Linear(spec.hidden, spec.q_dim, bias=False)
        self.k_proj = nn.Linear(spec.hidden, spec.kv_dim, bias=False)
        self.v_proj = nn.Linear(spec.hidden, spec.kv_dim, bias=False)
        self.o_proj = nn.Linear(spec.q_dim, spec.hidden, bias=False)
        self.qkv = None     # q, k, v as one projection (real.model.packing); None: the three modules above

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries ``[b, heads, q, hd]``, keys and values ``[b, kv_heads, q, hd]`` of ``x`` (before RoPE)."""
        b, q, _ = x.shape
        if self.qkv is not None:
            nq, nkv = self.n_heads * self.hd, self.n_kv * self.hd
            xq, xk, xv = self.qkv(x).split((nq, nkv, nkv), dim=-1)
        else:
            xq, xk, xv = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return (xq.view(b, q, self.n_heads, self.hd).transpose(1, 2),
                xk.view(b, q, self.n_kv, self.hd).transpose(1, 2),
                xv.view(b, q, self.n_kv, self.hd).transpose(1, 2))

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache: KVCache | None, start: int,
                mask: Tensor | None) -> Tensor:
        b, q, _ = x.shape
        xq, xk, xv = self.project(x)
        xq, xk = apply_rope(xq, cos, sin), apply_rope(xk, cos, sin)
        if cache is None:
            # Cache-free causal pass (training, scoring): no in-place writes, so autograd can run
            # backward through it (every layer writing one shared cache tensor in place cannot).
            keys, values, causal = xk, xv, q > 1
        else:
            end = start + q
            cache.k[self.layer, :b, :, start:end] = xk
            cache.v[self.layer, :b, :, start:end] = xv
            keys, values, causal = cache.k[self.layer, :b, :, :end], cache.v[self.layer, :b, :, :end], False
        # mask: [q, end] bool (True = attend); None only for a single token, which sees every slot,
        # or for the cache-free pass, which is causal.
        out = F.scaled_dot_product_attention(xq, keys, values, attn_mask=mask, is_causal=causal,
                                             enable_gqa=self.n_kv != self.n_heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, q, self.n_heads * self.hd))


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.gate_proj = nn.Linear(spec.hidden, spec.intermediate, bias=False)
        self.up_proj = nn.Linear(spec.hidden, spec.intermediate, bias=False)
        self.down_proj = nn.Linear(spec.intermediate, spec.hidden, bias=False)
        self.gate_up = None   # gate and up as one projection (real.model.packing); None: the two modules above

    def forward(self, x: Tensor) -> Tensor:
        if self.gate_up is not None:
            gate, up = self.gate_up(x).chunk(2, dim=-1)
            return self.down_proj(F.silu(gate) * up)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, spec: ModelSpec, layer: int):
        super().__init__()
        self.input_layernorm = RMSNorm(spec.hidden, spec.norm_eps)
        self.self_attn = Attention(spec, layer)
        self.post_attention_layernorm = RMSNorm(spec.hidden, spec.norm_eps)
        self.mlp = MLP(spec)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache: KVCache | None, start: int,
                mask: Tensor | None) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, start, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBody(nn.Module):
    """``model.*`` of Hugging Face's LlamaForCausalLM: embedding, layers, final norm."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.embed_tokens = nn.Embedding(spec.vocab, spec.hidden)
        self.layers = nn.ModuleList(DecoderLayer(spec, i) for i in range(spec.n_layers))
        self.norm = RMSNorm(spec.hidden, spec.norm_eps)


class Transformer(nn.Module):
    """A Llama-architecture causal LM. ``forward`` returns logits (and the final hidden state)."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        if spec.arch != "llama":
            raise HetSpecError(f"model {spec.name}: the real path runs llama-architecture models, not {spec.arch}")
        self.spec = spec
        self.model = LlamaBody(spec)
        self.lm_head = nn.Linear(spec.hidden, spec.vocab, bias=False)
        if spec.tie_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        cos, sin = rope_tables(spec, spec.max_position)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def new_cache(self, max_len: int, batch: int = 1, slot: str = "main") -> KVCache:
        """A KV cache of ``max_len`` slots. With a :class:`real.model.executor.StepExecutor` attached
        (``self.executor``), the executor's persistent cache of ``slot`` (one per role a decoder gives
        this model, e.g. ``main`` and ``draft`` when a model drafts for itself), reset."""
        if self.executor is not None and batch == 1:
            return self.executor.new_cache(max_len, slot)
        p = self.lm_head.weight
        return KVCache(self.spec, max_len, batch, dtype=p.dtype, device=p.device)

    #: A :class:`real.model.executor.StepExecutor` running forwards through static buffers (CUDA
    #: graphs on a GPU); None runs every forward eagerly (the reference path).
    executor = None

    def forward(self, tokens: Tensor, cache: KVCache | None = None, positions: Tensor | int | None = None,
                tree_mask: Tensor | None = None, last_only: bool = False, return_hidden: bool = False,
                position_bound: int | None = None):
        """Run q new tokens.

        tokens: ``[b, q]`` ids. cache: their K/V are written as pending slots (when None: a plain
        causal LM pass over ``tokens`` that autograd can train through). positions: ``[q]`` or ``[b, q]``
        position ids; an int p means ``p + arange(q)``; None continues the sequence,
        ``length + pending + arange(q)``. position_bound: 1 + the largest id in a ``positions``
        tensor when the caller knows it (a tree's depth): the bound is then checked in Python
        integers, without reading the tensor back from its device (a CUDA tensor without a bound is
        read back, a host synchronisation).
        tree_mask: ``[q, pending + q]`` bool, True where new token i may attend to pending or
        new token j (the committed prefix is always visible); None means causal.
        Returns logits ``[b, q, vocab]`` (``[b, 1, vocab]`` with ``last_only``), plus the final
        normed hidden state ``[b, q, hidden]`` when ``return_hidden``. Through an executor the
        outputs are views of its static buffers, valid until the next forward of that cache.
        """
        b, q = tokens.shape
        if cache is None and tree_mask is not None:
            p = self.lm_head.weight
            cache = KVCache(self.spec, q, b, dtype=p.dtype, device=p.device)
        start = cache.reserve(q) if cache is not None else 0
        if positions is None or isinstance(positions, int):
            first = start if positions is None else positions
            bound = first + q
            positions = torch.arange(first, first + q, device=tokens.device)
        elif position_bound is not None:
            bound = position_bound
        else:
            bound = int(positions.max()) + 1
        if bound > self.spec.max_position:
            raise HetSpecError(f"position {bound - 1} exceeds max_position {self.spec.max_position}")
        if positions.dim() == 1:
            positions = positions.unsqueeze(0)
        if tree_mask is not None and tree_mask.shape != (q, cache.pending + q):
            raise HetSpecError(f"tree_mask shape {tuple(tree_mask.shape)} != ({q}, {cache.pending + q})")
        if cache is not None and cache.executor is not None and cache.executor.handles(q, b):
            logits, hidden = cache.executor.forward(cache, tokens, positions, tree_mask)
            cache.pending += q
            if last_only:
                logits, hidden = logits[:, -1:], hidden[:, -1:]
            return (logits, hidden) if return_hidden else logits
        cos = self.rope_cos[positions].unsqueeze(1)  # [b or 1, 1, q, head_dim]
        sin = self.rope_sin[positions].unsqueeze(1)
        if cache is None:
            mask = None
        else:
            mask = cache.attention_mask(q, None if tree_mask is None else tree_mask.to(device=tokens.device,
                                                                                        dtype=torch.bool))
        x = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            x = layer(x, cos, sin, cache, start, mask)
        if cache is not None:
            cache.pending += q
        hidden = self.model.norm(x[:, -1:] if last_only else x)
        logits = self.lm_head(hidden)
        return (logits, hidden) if return_hidden else logits
