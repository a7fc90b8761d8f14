"""Ghidorah's hetero-core model parallelism (HCMP) of a :class:`real.model.transformer.Transformer` on two workers.

Ghidorah §III-B (hetero-core model parallelism), as the simulator's ``hcmp``
strategy prices it (:mod:`sim.strategies.hcmp`):

- **Every linear is split by output columns** at ratio r: the primary worker (side 0) owns the
  first ``round(r * n)`` output columns of each weight, the secondary (side 1) the rest. Both read
  the whole input and write their own columns of one output buffer; no all-reduce. The slices are
  cut once, when the :class:`SplitTarget` is built (contiguous copies in each worker's memory),
  never per step. Q/K/V are one fused weight; gate and up are cut at the same intermediate
  columns so SiLU(gate) * up stays local. The embedding is cut by hidden columns, the LM head and
  the Medusa heads' output layers by vocabulary rows, their ResBlocks by hidden columns.
- **Attention is split inside every head** by affinity: the *dense* part (the q new queries
  against the committed cache) on the primary, the *sparse* tree-masked part (queries against the
  q new keys under the tree mask) on the secondary, which also writes the new K/V into the cache.
  Each side keeps its own softmax statistics (m, l); both merge the two partials with online
  softmax (:func:`real.hetero.layer_ops.merge_partials`) as the input of their output-projection
  columns, the merge fused there as in the paper.
- **Synchronisation points** (a :class:`real.hetero.workers.PairBarrier`): after the embedding, after
  Q/K/V, after attention, after the attention residual, after SiLU * up, after the MLP residual,
  after the LM head, after the heads' ResBlock and after the heads -- 5 per layer, the page syncs
  the simulator counts. Norms are computed whole on both sides from the shared residual (a
  row reduction; Ghidorah does not say how it splits them; departure, marked: redundant, tiny).

Memory: when both workers share one memory (two CPU workers) every buffer is one tensor and a
side's columns are visible to the other at the barrier (Ghidorah's zero-copy). Workers on different
devices (``cuda:0`` + ``cpu``) keep a buffer each and a side copies its columns into the other's
before the barrier (host <-> device copies; ``separate_buffers`` forces this on one device, for
tests). The KV cache lives with the dense side.

Ratio 0 or 1 runs the unsplit model (and heads) on the secondary or the primary alone: no barrier,
no merge, as the simulator prices it. The prompt pass is split like a step (causal mask, empty
dense part); Ghidorah evaluates decode only, and tokens/s counts decode steps only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from hwmodels.errors import HetSpecError
from real.hetero.layer_ops import (
    heads_to_rows,
    merge_partials,
    partial_attention,
    rms_norm,
    rotate,
)
from real.hetero.workers import PairBarrier, WorkerSession, synchronize
from real.model.transformer import KVCache

#: Synchronisation points (group names) of one split forward and of the split heads, in order.
LAYER_GROUPS = ("qkv", "attention", "o_proj", "gate_up", "down_proj")
STEP_GROUPS = ("embed",) + LAYER_GROUPS + ("lm_head",)
HEAD_GROUPS = ("medusa_resblock", "medusa_head")


def column_cut(n: int, ratio: float) -> int:
    """Output columns of the primary (the first ``round(ratio * n)``); the secondary takes the rest."""
    return int(round(ratio * n))


class Shared:
    """A buffer both sides read and each writes its own slice of (last dimension).

    One tensor when the two sides may share memory; otherwise one per side, and :meth:`publish`
    copies the writer's slice into the other side's tensor (zero-copy vs explicit copy).
    """

    def __init__(self, shape: tuple[int, ...], devices: tuple[torch.device, torch.device], separate: bool,
                 dtype: torch.dtype = torch.float32):
        first = torch.empty(shape, dtype=dtype, device=devices[0])
        self.separate = separate
        self.views = (first, torch.empty(shape, dtype=dtype, device=devices[1]) if separate else first)

    def view(self, side: int) -> Tensor:
        return self.views[side]

    def publish(self, side: int, lo: int | None = None, hi: int | None = None) -> None:
        """Make side's slice ``[..., lo:hi]`` (everything when lo is None) visible to the other side."""
        if not self.separate:
            return
        src, dst = self.views[side], self.views[1 - side]
        if lo is None:
            dst.copy_(src)
        elif hi > lo:
            dst[..., lo:hi].copy_(src[..., lo:hi])


@dataclass(frozen=True)
class LayerSlices:
    """One layer's weights of one side (``[out_cols, in]`` slices, contiguous, on its device)."""

    in_norm: Tensor
    qkv: Tensor          # rows of cat(q_proj, k_proj, v_proj)
    o: Tensor            # rows of o_proj
    gate_up: Tensor      # cat(gate rows, up rows) at the same intermediate columns
    post_norm: Tensor
    down: Tensor         # rows of down_proj


@dataclass(frozen=True)
class Cuts:
    """Column ranges ``(lo, hi)`` of side 0 and side 1 for every split dimension."""

    embed: tuple[tuple[int, int], tuple[int, int]]
    qkv: tuple[tuple[int, int], tuple[int, int]]
    o: tuple[tuple[int, int], tuple[int, int]]
    inter: tuple[tuple[int, int], tuple[int, int]]
    down: tuple[tuple[int, int], tuple[int, int]]
    vocab: tuple[tuple[int, int], tuple[int, int]]
    head_hidden: tuple[tuple[int, int], tuple[int, int]]


def _ranges(n: int, ratio: float) -> tuple[tuple[int, int], tuple[int, int]]:
    c = column_cut(n, ratio)
    return (0, c), (c, n)


class _Run:
    """Buffers and inputs of one split forward (``q`` new tokens)."""

    def __init__(self, split: "SplitTarget", q: int):
        spec, devs, sep = split.spec, split.devices, split.separate
        nq, h, hd = spec.n_heads * spec.head_dim, spec.n_heads, spec.head_dim
        self.q = q
        self.x = Shared((1, q, spec.hidden), devs, sep)                    # residual stream
        self.qkv = Shared((1, q, nq + 2 * spec.kv_dim), devs, sep)
        self.act = Shared((1, q, spec.intermediate), devs, sep)            # SiLU(gate) * up
        self.logits = Shared((1, q, spec.vocab), devs, sep)
        self.parts = [tuple(Shared(shape, devs, sep) for shape in ((1, h, q, hd), (1, h, q, 1), (1, h, q, 1)))
                      for _ in range(2)]                                    # (o, m, l) of dense, sparse
        self.hidden: Tensor | None = None
        self.tokens: list[Tensor] = []
        self.cos: list[Tensor] = []
        self.sin: list[Tensor] = []
        self.mask: Tensor | None = None
        self.cache: KVCache | None = None
        self.start = 0
        self.barrier = PairBarrier()
        self.trace: list[list | None] = [None, None]


class _HeadRun:
    def __init__(self, split: "SplitTarget"):
        k, d, v = split.n_heads, split.spec.hidden, split.spec.vocab
        self.row = Shared((1, 1, d), split.devices, split.separate)
        self.res = Shared((k, 1, d), split.devices, split.separate)
        self.logits = Shared((k, 1, v), split.devices, split.separate)
        self.barrier = PairBarrier()
        self.trace: list[list | None] = [None, None]


class SplitTarget:
    """A target (and its Medusa heads) cut once at ratio r for two workers on ``devices``.

    :meth:`forward` / :meth:`heads` run one verification pass / the heads with both workers of a
    :class:`~real.hetero.workers.WorkerSession` (side 0 on the calling thread, side 1 on its thread).
    """

    #: The two sides' synchronisation (the calibration's split probe swaps it to time the step without it).
    barrier_type = PairBarrier

    def __init__(self, target, heads, ratio: float, devices: tuple[str, str], separate_buffers: bool = False):
        if not 0.0 <= ratio <= 1.0:
            raise HetSpecError(f"hcmp: partition ratio must be in [0, 1], got {ratio}")
        self.spec = target.spec
        self.ratio = float(ratio)
        self.devices = (torch.device(devices[0]), torch.device(devices[1]))
        self.separate = separate_buffers or self.devices[0] != self.devices[1]
        self.n_heads = heads.n_heads if heads is not None else 0
        self.eps = self.spec.norm_eps
        # ratio 0 or 1: the unsplit model on one side (side 1 at 0, side 0 at 1)
        self.endpoint: int | None = 0 if ratio >= 1.0 else (1 if ratio <= 0.0 else None)
        #: index in the worker session of side 0 and side 1: at ratio 0 the session runs the secondary on
        #: the calling thread (:meth:`session_order`), so the whole step stays on that worker, no hand-off
        self.session_index = (1, 0) if self.endpoint == 1 else (0, 1)
        if self.endpoint is not None:
            dev = self.devices[self.endpoint]
            self.full = target if _device_of(target) == dev else _moved(target, dev)
            # a copy on the endpoint's device: Module.to moves in place, and the caller's heads are shared
            # (a ratio sweep cuts the same models at every ratio, the other end on the other device)
            self.full_heads = heads if heads is None or _device_of(heads) == dev else _moved(heads, dev)
            self.rope = (self.full.rope_cos, self.full.rope_sin)
            return
        spec = self.spec
        nq = spec.n_heads * spec.head_dim
        self.cuts = Cuts(embed=_ranges(spec.hidden, ratio), qkv=_ranges(nq + 2 * spec.kv_dim, ratio),
                         o=_ranges(spec.hidden, ratio), inter=_ranges(spec.intermediate, ratio),
                         down=_ranges(spec.hidden, ratio), vocab=_ranges(spec.vocab, ratio),
                         head_hidden=_ranges(spec.hidden, ratio))
        with torch.no_grad():
            self.layers = [self._cut_layer(layer) for layer in target.model.layers]
            emb = target.model.embed_tokens.weight                              # [V, d]
            self.embed = self._per_side(lambda lo, hi: emb[:, lo:hi], self.cuts.embed)
            self.final_norm = self._both(target.model.norm.weight)
            lm = target.lm_head.weight                                          # [V, d]
            self.lm = self._per_side(lambda lo, hi: lm[lo:hi], self.cuts.vocab)
            self.rope = tuple(self._both(t) for t in (target.rope_cos, target.rope_sin))
            if heads is not None:
                self.w1 = self._per_side(lambda lo, hi: heads.w1[:, lo:hi], self.cuts.head_hidden)   # [K, c, d]
                self.b1 = self._per_side(lambda lo, hi: heads.b1[:, lo:hi], self.cuts.head_hidden)   # [K, c]
                self.w2 = self._per_side(lambda lo, hi: heads.w2[:, lo:hi], self.cuts.vocab)         # [K, c, d]
        self._runs: dict[int, _Run] = {}
        self._head_run: _HeadRun | None = None

    # ------------------------------------------------------------------ pre-splitting
    def _per_side(self, take, ranges) -> tuple[Tensor, Tensor]:
        return tuple(take(lo, hi).detach().to(self.devices[s]).contiguous().clone() for s, (lo, hi) in enumerate(ranges))

    def _both(self, t: Tensor) -> tuple[Tensor, Tensor]:
        t = t.detach()
        return tuple(t.to(d) if self.separate or t.device != d else t for d in self.devices)

    def _cut_layer(self, layer) -> tuple[LayerSlices, LayerSlices]:
        a, mlp = layer.self_attn, layer.mlp
        qkv = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])          # [nq + 2 kv, d]
        qkv_s = self._per_side(lambda lo, hi: qkv[lo:hi], self.cuts.qkv)
        o_s = self._per_side(lambda lo, hi: a.o_proj.weight[lo:hi], self.cuts.o)
        gu_s = self._per_side(lambda lo, hi: torch.cat([mlp.gate_proj.weight[lo:hi], mlp.up_proj.weight[lo:hi]]),
                              self.cuts.inter)
        down_s = self._per_side(lambda lo, hi: mlp.down_proj.weight[lo:hi], self.cuts.down)
        in_n, post_n = self._both(layer.input_layernorm.weight), self._both(layer.post_attention_layernorm.weight)
        return tuple(LayerSlices(in_n[s], qkv_s[s], o_s[s], gu_s[s], post_n[s], down_s[s]) for s in (0, 1))

    def session_order(self, workers):
        """The order to start a :class:`~real.hetero.workers.WorkerSession` of (primary, secondary) ``workers`` in:
        the worker that runs the unsplit step at ratio 0 or 1 first (on the calling thread)."""
        return tuple(workers[i] for i in ((1, 0) if self.endpoint == 1 else (0, 1)))

    # ------------------------------------------------------------------ cache
    @property
    def cache_side(self) -> int:
        """The side whose device holds the KV cache (the dense side, or the endpoint's)."""
        return self.endpoint if self.endpoint is not None else 0

    def new_cache(self, max_len: int) -> KVCache:
        return KVCache(self.spec, max_len, 1, dtype=torch.float32, device=self.devices[self.cache_side])

    def prefill(self, session: WorkerSession, tokens: Tensor, cache: KVCache, trace: bool = False):
        """The prompt pass (causal), split like a verification step: ``(logits [1, n, V], hidden
        [1, n, d], spans)``; the dense part is empty on an empty cache."""
        n = tokens.shape[1]
        positions = torch.arange(cache.length, cache.length + n)
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        return self.forward(session, tokens, cache, positions, causal, trace)

    # ------------------------------------------------------------------ the split step
    def forward(self, session: WorkerSession, tokens: Tensor, cache: KVCache, positions: Tensor, tree_mask: Tensor,
                trace: bool = False):
        """One verification pass over ``tokens [1, q]`` at ``positions [q]`` under ``tree_mask [q, q]``
        (the committed cache is visible to all). Returns ``(logits [1, q, V], hidden [1, q, d])`` on
        the primary's device and, with ``trace``, each side's ``(group, start, end)`` list."""
        q = tokens.shape[1]
        if self.endpoint is not None:
            side, model = self.endpoint, self.full
            dev = self.devices[side]

            def whole():
                t0 = time.perf_counter()
                out = model(tokens.to(dev), cache, positions=positions.to(dev), tree_mask=tree_mask.to(dev),
                            return_hidden=True)
                synchronize(dev)
                return out, [("forward", t0, time.perf_counter())] if trace else None
            (logits, hidden), spans = session.run(self.session_index[side], whole)
            return logits.to(self.devices[0]), hidden.to(self.devices[0]), (spans, None) if side == 0 else (None, spans)
        if cache.pending:
            raise HetSpecError("hcmp: the split step verifies from a committed cache (no pending tokens)")
        start = cache.reserve(q)
        run = self._runs.get(q)
        if run is None:
            run = self._runs[q] = _Run(self, q)
        run.barrier = self.barrier_type()
        run.cache, run.start = cache, start
        run.tokens = [tokens.to(d) for d in self.devices]
        pos = [positions.to(self.rope[0][s].device) for s in (0, 1)]
        run.cos = [self.rope[0][s][pos[s]].view(1, 1, q, -1) for s in (0, 1)]
        run.sin = [self.rope[1][s][pos[s]].view(1, 1, q, -1) for s in (0, 1)]
        run.mask = tree_mask.to(device=self.devices[1], dtype=torch.bool)
        run.trace = [[], []] if trace else [None, None]
        self._both_sides(session, self._program, run)
        synchronize(self.devices[0])       # a GPU side's kernels have finished when the step is timed
        cache.pending += q
        return run.logits.view(0), run.hidden, tuple(run.trace)

    def _both_sides(self, session: WorkerSession, program, run) -> None:
        """Run ``program(side, run)`` on both workers at once; the first error wins, neither hangs."""
        session.submit(1, self._guarded, program, 1, run)
        error = None
        try:
            self._guarded(program, 0, run)
        except BaseException as exc:
            error = exc
        try:
            session.result(1)
        except BaseException as exc:
            if error is None or _is_broken(error):
                error = exc
        if error is not None:
            raise error

    @staticmethod
    def _guarded(program, side: int, run) -> None:
        try:
            program(side, run)
        except BaseException:
            run.barrier.abort()
            raise

    def _program(self, s: int, run: _Run) -> None:
        """Side ``s`` of one split forward (both sides run it; they meet at the barriers)."""
        spec, cuts, eps = self.spec, self.cuts, self.eps
        nq, nkv, h, hk, hd, q = spec.n_heads * spec.head_dim, spec.kv_dim, spec.n_heads, spec.n_kv_heads, \
            spec.head_dim, run.q
        spans = run.trace[s]
        now = time.perf_counter

        def sync(group: str, t0: float) -> None:
            if spans is not None:
                spans.append((group, t0, now()))
            run.barrier.wait(s)

        x, qkv, act = run.x.view(s), run.qkv.view(s), run.act.view(s)
        cache, start = run.cache, run.start
        t0 = now()
        lo, hi = cuts.embed[s]
        if hi > lo:
            x[..., lo:hi] = F.embedding(run.tokens[s], self.embed[s])            # [1, q, c]
        run.x.publish(s, lo, hi)
        sync("embed", t0)
        for i, w in enumerate(layer[s] for layer in self.layers):
            t0 = now()
            hn = rms_norm(x, w.in_norm, eps)                                     # whole row, both sides
            lo, hi = cuts.qkv[s]
            if hi > lo:
                qkv[..., lo:hi] = F.linear(hn, w.qkv)
            run.qkv.publish(s, lo, hi)
            sync("qkv", t0)

            t0 = now()
            xq = rotate(qkv[..., :nq].view(1, q, h, hd).transpose(1, 2), run.cos[s], run.sin[s])   # [1, H, q, hd]
            if s == 0 and start == 0:   # nothing committed yet (prompt pass): an empty partial
                part = (torch.zeros_like(xq), torch.full_like(xq[..., :1], float("-inf")), torch.zeros_like(xq[..., :1]))
            elif s == 0:   # dense: the new queries against the committed cache
                part = partial_attention(xq, cache.k[i, :1, :, :start], cache.v[i, :1, :, :start], None)
            else:        # sparse: against the new keys under the tree mask; the new K/V go to the cache
                xk = rotate(qkv[..., nq:nq + nkv].view(1, q, hk, hd).transpose(1, 2), run.cos[s], run.sin[s])
                xv = qkv[..., nq + nkv:].view(1, q, hk, hd).transpose(1, 2)
                cache.k[i, :1, :, start:start + q] = xk
                cache.v[i, :1, :, start:start + q] = xv
                part = partial_attention(xq, xk, xv, run.mask)
            for buf, value in zip(run.parts[s], part):
                buf.view(s).copy_(value)
                buf.publish(s)
            sync("attention", t0)

            t0 = now()
            merged = heads_to_rows(merge_partials([tuple(b.view(s) for b in run.parts[j]) for j in (0, 1)]))
            lo, hi = cuts.o[s]
            if hi > lo:
                x[..., lo:hi] += F.linear(merged, w.o)                            # residual on own columns
            run.x.publish(s, lo, hi)
            sync("o_proj", t0)

            t0 = now()
            hn = rms_norm(x, w.post_norm, eps)
            lo, hi = cuts.inter[s]
            if hi > lo:
                gate, up = F.linear(hn, w.gate_up).split(hi - lo, dim=-1)
                act[..., lo:hi] = F.silu(gate) * up
            run.act.publish(s, lo, hi)
            sync("gate_up", t0)

            t0 = now()
            lo, hi = cuts.down[s]
            if hi > lo:
                x[..., lo:hi] += F.linear(act, w.down)
            run.x.publish(s, lo, hi)
            sync("down_proj", t0)
        t0 = now()
        hn = rms_norm(x, self.final_norm[s], eps)                                # [1, q, d]
        lo, hi = cuts.vocab[s]
        if hi > lo:
            run.logits.view(s)[..., lo:hi] = F.linear(hn, self.lm[s])
        run.logits.publish(s, lo, hi)
        if s == 0:
            run.hidden = hn
        sync("lm_head", t0)

    # ------------------------------------------------------------------ the split heads
    def heads(self, session: WorkerSession, hidden_row: Tensor, trace: bool = False):
        """Medusa head logits ``[K, V]`` after one hidden state ``[d]`` (on the primary's device)."""
        if self.n_heads == 0:
            raise HetSpecError("hcmp: no Medusa heads were given")
        if self.endpoint is not None:
            side, heads = self.endpoint, self.full_heads
            dev = self.devices[side]

            def whole():
                t0 = time.perf_counter()
                out = heads(hidden_row.to(dev).view(1, 1, -1))[:, 0, 0]
                synchronize(dev)
                return out, [("heads", t0, time.perf_counter())] if trace else None
            logits, spans = session.run(self.session_index[side], whole)
            return logits.to(self.devices[0]), (spans, None) if side == 0 else (None, spans)
        run = self._head_run
        if run is None:
            run = self._head_run = _HeadRun(self)
        run.barrier = self.barrier_type()
        run.trace = [[], []] if trace else [None, None]
        run.row.view(0).copy_(hidden_row.view(1, 1, -1))
        run.row.publish(0)
        self._both_sides(session, self._heads_program, run)
        synchronize(self.devices[0])
        return run.logits.view(0)[:, 0], tuple(run.trace)

    def _heads_program(self, s: int, run: _HeadRun) -> None:
        spans = run.trace[s]
        now = time.perf_counter
        h = run.row.view(s)                                                      # [1, 1, d]
        res = run.res.view(s)                                                    # [K, 1, d]
        t0 = now()
        lo, hi = self.cuts.head_hidden[s]
        if hi > lo:   # MedusaHeads.residual on own columns: SiLU(W1 h + b1) + h
            z = torch.matmul(h, self.w1[s].transpose(1, 2)) + self.b1[s].unsqueeze(1)    # [K, 1, c]
            res[..., lo:hi] = F.silu(z) + h[..., lo:hi]
        run.res.publish(s, lo, hi)
        if spans is not None:
            spans.append(("medusa_resblock", t0, now()))
        run.barrier.wait(s)
        t0 = now()
        lo, hi = self.cuts.vocab[s]
        if hi > lo:
            run.logits.view(s)[..., lo:hi] = torch.matmul(res, self.w2[s].transpose(1, 2))   # [K, 1, c]
        run.logits.publish(s, lo, hi)
        if spans is not None:
            spans.append(("medusa_head", t0, now()))
        run.barrier.wait(s)


def _device_of(module) -> torch.device:
    return next(module.parameters()).device


def _moved(target, device: torch.device):
    """A copy of ``target`` (a model or Medusa heads) on ``device``; the original stays where it is."""
    import copy

    clone = copy.deepcopy(target)
    return clone.to(device)


def _is_broken(exc: BaseException) -> bool:
    from real.hetero.workers import BrokenBarrier

    return isinstance(exc, BrokenBarrier)
