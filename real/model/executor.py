"""Static-shape forwards of a :class:`real.model.transformer.Transformer`: token-count buckets,
static buffers and, on a CUDA device, CUDA graphs.

An eager forward of a decode step launches a few hundred small kernels from Python; on a GPU the
launches, not the weights, set its time (on an H100 an eager Llama-2-7B fp16 forward costs several
times a CUDA graph replay of the same step at q = 1: the eager profile and the eager step times in
hwmodels/presets/profiles/, and ``hetspec bench``). A graph replays a recorded sequence of kernels at fixed
addresses, so everything a step reads must sit in buffers allocated once, with shapes that do not
change from step to step. This module provides exactly that:

- **Buckets.** A forward of q tokens runs in the smallest bucket Q >= q of :attr:`StepExecutor.buckets`
  (default 1, 2, 4, ..., 256, plus the exact widths a decoder declares: a Medusa tree's size, chain's
  gamma + 1). Rows q..Q-1 are padding: token 0 at position 0, written to the scratch slots right
  after the real ones and attending only to themselves, so they never touch a real row (every cache
  slot holds finite values, so a masked-out slot contributes exactly zero).
- **Static buffers** per cache *slot* (one per role a decoder gives a model: ``main``, ``draft``):
  the KV cache, allocated once to the request's length rounded up (:data:`CACHE_ROUND`) plus the
  largest bucket, token ids ``[1, Qmax]``, position ids ``[1, Qmax]``, the cache slots to write
  ``[Qmax]`` and the attention mask ``[Qmax, max_len]``. Before each forward the host fills them with
  a handful of copies (Python integers only: no value is read back from the device); the K/V are
  written by index (``index_copy_``), attention runs over the whole cache under the mask.
- **Backends.** :class:`CudaGraphBackend` warms a bucket up on a side stream, captures it into a
  ``torch.cuda.CUDAGraph`` (all graphs of an executor share one memory pool) and replays it.
  :class:`EagerBackend` runs the same static forward eagerly and copies its outputs into static
  output buffers: the CPU path, and the stand-in that lets the CPU test suite exercise bucket
  selection, buffers and replay bookkeeping. Outputs are views of the bucket's output buffers,
  valid until the next forward of the same slot.

Why captured graphs rather than ``torch.compile(mode="reduce-overhead")`` (what gpt-fast uses for
its one-token decode and its speculative verify): the verify widths change with the tree (Medusa
widths, LLMCad trees of 2..budget tokens, chain's gamma), so a compiled function would recompile or
run dynamic shapes per width, each compilation taking tens of seconds for a 7B model and needing
Triton; manual capture per bucket costs one eager forward per bucket and no compiler, and the
eager model stays the one implementation (the graph records its kernels). See docs/decode-methods.md.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from hwmodels.errors import HetSpecError
from real.model.transformer import KVCache, apply_rope

#: Token-count buckets (powers of two up to the 256 the benchmark sweeps).
DEFAULT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Cache lengths are rounded up to a multiple of this, so prompts of similar length reuse one cache
#: (and the graphs captured on it).
CACHE_ROUND = 128
#: Eager runs of a bucket on a side stream before it is captured (cuBLAS and SDPA pick and
#: initialise their kernels on the first calls, which must not be recorded).
GRAPH_WARMUP = 2

Outputs = tuple[Tensor, Tensor]


def static_forward(model, cache: KVCache, tokens: Tensor, positions: Tensor, slots: Tensor, mask: Tensor) -> Outputs:
    """One forward of ``Q`` tokens through static buffers: tokens ``[1, Q]``, positions ``[1, Q]``,
    the cache slots their K/V go to ``[Q]``, mask ``[Q, max_len]`` (True = attend). Every shape is
    fixed by Q and the cache, every index is a tensor: capturable. Returns logits ``[1, Q, V]`` and the
    final normed hidden state ``[1, Q, d]``."""
    spec = model.spec
    n_q, n_kv, hd = spec.n_heads, spec.n_kv_heads, spec.head_dim
    group = n_q // n_kv
    q_len = tokens.shape[1]
    cos = model.rope_cos[positions].unsqueeze(1)                      # [1, 1, Q, hd]
    sin = model.rope_sin[positions].unsqueeze(1)
    # Grouped-query attention without copying the cache: the `group` query heads that share a KV head
    # become `group * Q` query rows of that head (query head h reads KV head h // group, as in
    # Hugging Face's repeat_kv), with the mask repeated per group.
    attend = mask.repeat(group, 1) if group > 1 else mask             # [group * Q, max_len]
    x = model.model.embed_tokens(tokens)
    for layer in model.model.layers:
        a = layer.self_attn
        h = layer.input_layernorm(x)
        xq, xk, xv = a.project(h)
        xq, xk = apply_rope(xq, cos, sin), apply_rope(xk, cos, sin)
        keys, values = cache.k[a.layer, :1], cache.v[a.layer, :1]     # [1, n_kv, max_len, hd]
        keys.index_copy_(2, slots, xk.to(keys.dtype))
        values.index_copy_(2, slots, xv.to(values.dtype))
        out = F.scaled_dot_product_attention(xq.reshape(1, n_kv, group * q_len, hd), keys, values, attn_mask=attend)
        out = out.reshape(1, n_q, q_len, hd).transpose(1, 2).reshape(1, q_len, n_q * hd)
        x = x + a.o_proj(out)
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    hidden = model.model.norm(x)
    return model.lm_head(hidden), hidden


# ---------------------------------------------------------------------------- backends
class EagerBackend:
    """Runs a bucket's static forward eagerly and copies its outputs into static output buffers
    (allocated on the first run): the CPU path, and the CPU stand-in of :class:`CudaGraphBackend`."""

    name = "eager"

    def prepare(self, run: Callable[[], Outputs], stats: "ExecutorStats") -> Callable[[], Outputs]:
        outputs: list[Tensor] = []

        def runner() -> Outputs:
            result = run()
            if not outputs:
                outputs.extend(torch.empty_like(t) for t in result)
            for buf, value in zip(outputs, result):
                buf.copy_(value)
            stats.runs += 1
            return outputs[0], outputs[1]
        return runner


class CudaGraphBackend:
    """Captures a bucket's static forward into a CUDA graph on its first run and replays it after."""

    name = "cuda-graph"

    def __init__(self, device: torch.device):
        if device.type != "cuda":
            raise HetSpecError(f"CUDA graphs need a CUDA device, not {device}")
        self.device = device
        self.pool = torch.cuda.graph_pool_handle()

    def prepare(self, run: Callable[[], Outputs], stats: "ExecutorStats") -> Callable[[], Outputs]:
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(GRAPH_WARMUP):     # writes the same K/V to the same slots as the real run
                run()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            outputs = run()
        stats.captures += 1

        def runner() -> Outputs:
            graph.replay()
            stats.replays += 1
            return outputs
        return runner


def make_backend(device: torch.device, graphs: bool):
    return CudaGraphBackend(device) if graphs else EagerBackend()


# ---------------------------------------------------------------------------- the executor
@dataclass
class ExecutorStats:
    captures: int = 0          # CUDA graphs recorded
    replays: int = 0           # CUDA graph replays
    runs: int = 0              # eager runs of a static forward (EagerBackend)
    calls: dict[int, int] = field(default_factory=dict)   # forwards per bucket

    def to_json(self) -> dict:
        return {"captures": self.captures, "replays": self.replays, "runs": self.runs,
                "calls": {str(k): v for k, v in sorted(self.calls.items())}}


class _Slot:
    """The static buffers of one cache slot and the buckets prepared on them."""

    def __init__(self, model, max_len: int, max_bucket: int, device: torch.device, dtype: torch.dtype):
        self.cache = KVCache(model.spec, max_len, 1, dtype=dtype, device=device)
        self.tokens = torch.zeros(1, max_bucket, dtype=torch.long, device=device)
        self.positions = torch.zeros(1, max_bucket, dtype=torch.long, device=device)
        self.slots = torch.zeros(max_bucket, dtype=torch.long, device=device)
        self.mask = torch.zeros(max_bucket, max_len, dtype=torch.bool, device=device)
        self.arange = torch.arange(max_bucket, dtype=torch.long, device=device)
        self.true_upto = 0                  # mask columns [0, true_upto) are True in every row
        self.runners: dict[int, Callable[[], Outputs]] = {}


class StepExecutor:
    """Runs the forwards of one model (q <= the largest bucket, batch 1) through static buffers.

    Attach with :func:`attach`; :meth:`Transformer.forward <real.model.transformer.Transformer.forward>`
    hands every forward it :meth:`handles` to :meth:`forward`, larger ones run eagerly on the same
    cache. ``graphs``: capture CUDA graphs (a CUDA model only); otherwise the :class:`EagerBackend`.
    """

    def __init__(self, model, buckets: Iterable[int] = DEFAULT_BUCKETS, graphs: bool = False, backend=None):
        buckets = sorted({int(b) for b in buckets})
        if not buckets or buckets[0] < 1:
            raise HetSpecError(f"buckets must be token counts >= 1, got {buckets}")
        param = model.lm_head.weight
        self.model = model
        self.device, self.dtype = param.device, param.dtype
        self.buckets = tuple(buckets)
        self.backend = backend or make_backend(self.device, graphs)
        self.stats = ExecutorStats()
        self.expected = 1                    # the most tokens a forward of the run will take (prefill aside)
        self._slots: dict[str, _Slot] = {}

    def __deepcopy__(self, memo):   # a copy of the model (e.g. moved to another worker) runs eagerly
        return None

    @property
    def graphs(self) -> bool:
        return isinstance(self.backend, CudaGraphBackend)

    @property
    def max_bucket(self) -> int:
        return self.buckets[-1]

    def declare(self, widths: Iterable[int]) -> None:
        """Add exact buckets for the token counts a run will use (a tree's size), so they are not
        padded to the next power of two. Buckets already prepared are kept."""
        widths = [int(w) for w in widths if 1 <= int(w)]
        self.buckets = tuple(sorted(set(self.buckets) | set(widths)))
        self.expect(max(widths, default=1))

    def expect(self, tokens: int) -> None:
        """The run's forwards take up to ``tokens`` tokens (prefill aside): :meth:`prepare_buckets` prepares
        every bucket up to the one that holds them."""
        self.expected = max(self.expected, min(int(tokens), self.max_bucket))

    def prepare_buckets(self) -> int:
        """Prepare (capture, on a GPU) every bucket up to :attr:`expected` tokens on every slot, so that no
        capture falls inside a timed run; returns how many were prepared. Each runs once on padding only
        (token 0 at position 0 written to the cache's last slots, which no real token sees)."""
        with torch.inference_mode():
            return self._prepare_buckets(self.bucket(self.expected))

    def _prepare_buckets(self, limit: int) -> int:
        done = 0
        for state in self._slots.values():
            cache, mask = state.cache, state.mask
            for size in (b for b in self.buckets if b <= limit and b not in state.runners):
                state.tokens[:, :size].zero_()
                state.positions[:, :size].zero_()
                torch.add(state.arange[:size], cache.max_len - size, out=state.slots[:size])
                mask[:size].zero_()
                mask[state.arange[:size], state.slots[:size]] = True
                state.true_upto = 0
                state.runners[size] = self.backend.prepare(
                    lambda size=size, state=state: static_forward(
                        self.model, state.cache, state.tokens[:, :size], state.positions[:, :size],
                        state.slots[:size], state.mask[:size]), self.stats)
                done += 1
        return done

    def bucket(self, q: int) -> int:
        """The smallest bucket of at least ``q`` tokens."""
        i = bisect.bisect_left(self.buckets, q)
        if i == len(self.buckets):
            raise HetSpecError(f"{q} tokens exceed the largest bucket {self.max_bucket}")
        return self.buckets[i]

    def handles(self, q: int, batch: int) -> bool:
        return batch == 1 and q <= self.max_bucket

    def new_cache(self, max_len: int, slot: str = "main") -> KVCache:
        """The persistent cache of ``slot``, reset, with room for ``max_len`` tokens plus the padding
        rows of the largest bucket; a longer request reallocates it (and prepares its buckets again)."""
        need = -(-(max_len + self.max_bucket) // CACHE_ROUND) * CACHE_ROUND
        state = self._slots.get(slot)
        if state is None or state.cache.max_len < max_len + self.max_bucket or state.tokens.shape[1] < self.max_bucket:
            state = self._slots[slot] = _Slot(self.model, need, self.max_bucket, self.device, self.dtype)
            state.cache.executor, state.cache.static = self, state
        state.cache.reset()
        return state.cache

    def forward(self, cache: KVCache, tokens: Tensor, positions: Tensor, tree_mask: Tensor | None) -> Outputs:
        """Logits ``[1, q, V]`` and hidden ``[1, q, d]`` of ``q`` new tokens (``positions [1, q]``;
        ``tree_mask [q, pending + q]`` or None for causal) written after the cache's pending block;
        the caller advances ``cache.pending``."""
        state: _Slot = cache.static
        q = tokens.shape[1]
        size = self.bucket(q)
        length, start = cache.length, cache.length + cache.pending
        state.tokens[:, :q].copy_(tokens)
        state.positions[:, :q].copy_(positions)
        if size > q:
            state.tokens[:, q:size].zero_()
            state.positions[:, q:size].zero_()
        torch.add(state.arange[:size], start, out=state.slots[:size])
        mask = state.mask
        if state.true_upto < length:
            mask[:, state.true_upto:length] = True
        state.true_upto = length
        mask[:size, length:].zero_()
        block = tree_mask if tree_mask is not None else cache.causal_block(q, cache.pending)
        mask[:q, length:start + q].copy_(block)
        if size > q:   # padding rows see only their own slot
            mask[state.arange[q:size], state.slots[q:size]] = True
        runner = state.runners.get(size)
        if runner is None:
            runner = state.runners[size] = self.backend.prepare(
                lambda: static_forward(self.model, cache, state.tokens[:, :size], state.positions[:, :size],
                                       state.slots[:size], mask[:size]), self.stats)
        self.stats.calls[size] = self.stats.calls.get(size, 0) + 1
        logits, hidden = runner()
        return logits[:, :q], hidden[:, :q]


def attach(model, graphs: bool = False, buckets: Iterable[int] = DEFAULT_BUCKETS) -> StepExecutor:
    """Run ``model``'s forwards through a new :class:`StepExecutor` (replacing any attached one)."""
    executor = StepExecutor(model, buckets, graphs)
    model.executor = executor
    return executor


def detach(model) -> None:
    """Back to eager forwards."""
    model.executor = None


def executor_of(model) -> StepExecutor | None:
    return getattr(model, "executor", None)


def declare_widths(model, widths: Iterable[int] = (), expect: int | None = None) -> None:
    """Tell ``model``'s executor (if any) the token counts a run will use: ``widths`` as exact buckets,
    ``expect`` as the most tokens of any forward (the buckets below it are prepared before timing)."""
    executor = executor_of(model)
    if executor is not None:
        executor.declare(widths)
        if expect is not None:
            executor.expect(expect)


def prepare_buckets(*models) -> int:
    """:meth:`StepExecutor.prepare_buckets` of every model given that has an executor."""
    return sum(executor_of(m).prepare_buckets() for m in models if m is not None and executor_of(m) is not None)
