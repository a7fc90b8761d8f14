"""Torch micro-benchmarks of this host: what ``hetspec calibrate`` measures, one function each.

Every benchmark runs its kernel a few times untimed (warm-up: first calls allocate, page in and
pick kernels), then times ``repeats`` runs and keeps the **median**, which a burst of noise from
other processes does not move. Times come from ``time.perf_counter``. Torch threads: each
function takes ``threads`` and restores the previous setting on exit.

- :func:`gemm_rates`: FLOP/s of ``F.linear`` (the real path's linear layers) over token counts M
  and weight shapes K x N.
- :func:`stream_bandwidth`: STREAM "triad" ``a = b + s*c`` bytes/s for a working-set size
  (3 arrays; bytes counted as 3 x array size, the STREAM convention).
- :func:`dispatch_overhead_s`: seconds per tiny torch operator (the framework's fixed cost).
- :func:`layer_overhead`: fixed seconds per step-graph operator of the real path's own decoder
  layer (:class:`real.model.transformer.Transformer` at a size where compute is negligible), and the aten
  operators that layer issues (counted with a dispatch mode).
- :func:`concurrent_stream`: bandwidth of ``workers`` single-thread workers streaming at once.
- :func:`handoff_latency_s`: one-way latency of handing work from one worker thread to another.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from hwmodels.errors import HetSpecError

#: Bytes per fp32 element (the real path computes in fp32).
FP32_BYTES = 4


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Run the body with ``threads`` intra-op threads, then restore the previous count."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def median_time(fn: Callable[[], object], repeats: int, warmup: int, inner: int = 1) -> float:
    """Median seconds of one call of ``fn`` over ``repeats`` timed batches of ``inner`` calls."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t) / inner)
    return statistics.median(samples)


def interleaved_medians(jobs: dict[str, Callable[[], object]], repeats: int, warmup: int) -> dict[str, float]:
    """Median seconds of one call of each job, the jobs timed in turn (batches of 3 calls) ``repeats``
    times (:func:`real.run.repeats.interleaved`) so that all see the same state of the machine."""
    from real.run.repeats import interleaved

    fns = list(jobs.values())
    for fn in fns:
        median_time(fn, 1, warmup)
    runs = interleaved(len(fns), repeats, lambda i, _rep, _round: median_time(fns[i], 1, 0, inner=3))
    return {k: statistics.median(r[0] for r in runs[i]) for i, k in enumerate(jobs)}


# ---------------------------------------------------------------------------- GEMM
@dataclass(frozen=True)
class GemmPoint:
    m: int            # token dimension (rows of the activation)
    k: int            # input features
    n: int            # output features
    seconds: float    # median time of one F.linear
    flops_per_s: float


@dataclass
class WeightPool:
    """Distinct weights, at least ``nbytes`` in all, for the streamed GEMMs: copies of one random weight in one
    buffer every shape, dtype and round reuse (drawing gigabytes afresh each time costs seconds)."""

    nbytes: int
    buffer: torch.Tensor | None = None

    def weights(self, base: torch.Tensor) -> list[torch.Tensor]:
        """Copies of ``base``, side by side, at least :attr:`nbytes` in all (one where a copy is larger)."""
        size = base.numel() * base.element_size()
        count = max(1, -(-self.nbytes // size))
        if self.buffer is None or self.buffer.numel() < count * size:
            self.buffer = None                      # the old one freed before the larger one is allocated
            self.buffer = torch.empty(max(count * size, self.nbytes * 9 // 8), dtype=torch.uint8)
        copies = self.buffer[:count * size].view(base.dtype).view(count, *base.shape)
        copies.copy_(base.expand_as(copies))
        return list(copies.unbind(0))


def gemm_rates(m_values: Sequence[int], shapes: Sequence[tuple[int, int]], threads: int, repeats: int, warmup: int,
               cold_pool: WeightPool | None = None, progress: Callable[[], None] | None = None, heads: int = 1,
               dtype: torch.dtype = torch.float32) -> tuple[GemmPoint, ...]:
    """``F.linear(x [M, K], W [N, K])`` FLOP/s (2*M*K*N per call) for every M and (K, N), in ``dtype``.

    ``heads`` > 1: the batched GEMM HetSpec's Medusa heads run instead (:mod:`real.model.medusa_heads`),
    ``torch.matmul(x [1, M, K], W [heads, N / heads, K] transposed)``: the same FLOPs and weight bytes
    in one launch over ``heads`` stacked matrices (N a multiple of ``heads``).

    ``cold_pool`` None: the same weight every call, so it stays in the cache (warm). Otherwise each call
    uses the next of the pool's distinct weights (choose several times the last-level cache), so every
    call streams its weight from DRAM (cold), as a decode step of a model larger than the cache does.
    """
    out = []
    gen = torch.Generator().manual_seed(0)
    with torch_threads(threads), torch.inference_mode():
        for k, n in shapes:
            if n % heads:
                raise HetSpecError(f"batched GEMM probe: {n} output rows do not split into {heads} heads")
            shape = (n, k) if heads == 1 else (heads, n // heads, k)
            base = torch.randn(*shape, generator=gen).to(dtype)
            weights = cold_pool.weights(base) if cold_pool is not None else [base]
            for m in m_values:
                x = (torch.randn(m, k, generator=gen) if heads == 1 else torch.randn(1, m, k, generator=gen)).to(dtype)
                # aim for >= ~1 ms per timed batch so the timer's resolution does not matter; the
                # ring of a pool continues across batches, so consecutive calls never reuse a weight
                inner = min(max(1, int(2e-3 * 50e9 / (2.0 * m * k * n))), 64)
                ring = iter(())

                def call():
                    nonlocal ring
                    w = next(ring, None)
                    if w is None:
                        ring = iter(weights)
                        w = next(ring)
                    return F.linear(x, w) if heads == 1 else torch.matmul(x, w.transpose(1, 2))
                s = median_time(call, repeats, warmup, inner=inner)
                out.append(GemmPoint(m, k, n, s, 2.0 * m * k * n / s))
                if progress:
                    progress()
            weights = None      # free the pool before the next shape
    return tuple(out)


#: The lower precisions the calibration times beside fp32 (hwmodels dtype name -> torch dtype).
LOW_PRECISION_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class DtypeRate:
    dtype: str                 # hwmodels name: bf16, fp16
    m: int
    k: int
    n: int
    flops_per_s: float | None  # None: torch has no kernel for it on this CPU
    note: str = ""             # why there is no rate
    #: (M, FLOP/s): per token count, the median over the calibration's (K, N) shapes of the rate with the
    #: weight streamed from DRAM (a decode step's linears); empty where not timed
    streamed: tuple[tuple[int, float], ...] = ()


def dtype_gemm_rates(m: int, k: int, n: int, threads: int, repeats: int, warmup: int,
                     dtypes: Sequence[str] = tuple(LOW_PRECISION_DTYPES), streamed_m: Sequence[int] = (),
                     streamed_shapes: Sequence[tuple[int, int]] = (), cold_pool: WeightPool | None = None,
                     progress: Callable[[], None] | None = None) -> tuple[DtypeRate, ...]:
    """``F.linear`` FLOP/s in each of ``dtypes`` at one shape (the weight in the cache, as the fp32
    peak's best shape), as torch runs them on this CPU: natively where the CPU has the instructions,
    converted or emulated where it does not (fp16 on most x86 CPUs), so a slow rate is the real one.

    With ``streamed_m`` and ``streamed_shapes``, also each dtype's rate at those token counts with the
    weight streamed from DRAM (the weights of ``cold_pool``, :func:`gemm_rates`): a kernel's small-M path
    differs by dtype (a one-token bf16 product can run at memory speed while the bf16 peak is far under
    fp32's, or the reverse), so fp32's token-count curve does not carry over."""
    import statistics

    out = []
    gen = torch.Generator().manual_seed(0)
    with torch_threads(threads), torch.inference_mode():
        for name in dtypes:
            dt = LOW_PRECISION_DTYPES[name]
            x = torch.randn(m, k, generator=gen).to(dt)
            w = torch.randn(n, k, generator=gen).to(dt)
            try:
                F.linear(x, w)
            except RuntimeError as exc:      # no kernel for this dtype on this build
                out.append(DtypeRate(name, m, k, n, None, str(exc).splitlines()[0][:200]))
                for _ in range(len(streamed_m) * len(streamed_shapes) if progress else 0):
                    progress()
                continue
            inner = min(max(1, int(2e-3 * 50e9 / (2.0 * m * k * n))), 64)
            s = median_time(lambda: F.linear(x, w), repeats, warmup, inner=inner)
            streamed: tuple[tuple[int, float], ...] = ()
            if streamed_m and streamed_shapes:
                points = gemm_rates(streamed_m, streamed_shapes, threads, repeats, warmup,
                                    cold_pool=cold_pool, progress=progress, dtype=dt)
                streamed = tuple((mm, statistics.median(p.flops_per_s for p in points if p.m == mm))
                                 for mm in streamed_m)
            out.append(DtypeRate(name, m, k, n, 2.0 * m * k * n / s, streamed=streamed))
    return tuple(out)


# ---------------------------------------------------------------------------- memory
def stream_bandwidth(working_set_bytes: int, threads: int, repeats: int, warmup: int) -> float:
    """STREAM triad bytes/s with three fp32 arrays totalling ``working_set_bytes``."""
    n = max(working_set_bytes // (3 * FP32_BYTES), 1024)
    with torch_threads(threads), torch.inference_mode():
        a, b, c = torch.empty(n), torch.ones(n), torch.full((n,), 2.0)
        inner = max(1, int(1e6 // n))        # small arrays: batch calls so one sample is >~ 1 ms
        s = median_time(lambda: torch.add(b, c, alpha=3.0, out=a), repeats, warmup, inner=inner)
    return 3 * n * FP32_BYTES / s


def concurrent_stream(working_set_bytes: int, workers: int, repeats: int, warmup: int) -> tuple[float, ...]:
    """Triad bytes/s of each of ``workers`` single-thread workers while all stream at once.

    Workers are Python threads (torch releases the GIL inside operators), each running with one
    intra-op thread on its own arrays, as the heterogeneous real path runs CPU workers. Each
    worker's arrays total ``working_set_bytes``; all start each repeat at a barrier, and a
    worker's rate is the median over repeats of its bytes over its own elapsed time.
    """
    n = max(working_set_bytes // (3 * FP32_BYTES), 1024)
    arrays = [(torch.empty(n), torch.ones(n), torch.full((n,), 2.0)) for _ in range(workers)]
    barrier = threading.Barrier(workers)
    samples: list[list[float]] = [[] for _ in range(workers)]

    def work(i: int) -> None:
        a, b, c = arrays[i]
        with torch.inference_mode():
            for r in range(warmup + repeats):
                barrier.wait()
                t = time.perf_counter()
                torch.add(b, c, alpha=3.0, out=a)
                if r >= warmup:
                    samples[i].append(time.perf_counter() - t)

    with torch_threads(1):
        pool = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    return tuple(3 * n * FP32_BYTES / statistics.median(s) for s in samples)


# ---------------------------------------------------------------------------- fixed costs
def dispatch_overhead_s(threads: int, repeats: int, warmup: int) -> float:
    """Seconds of one tiny torch operator (``torch.add`` of two 4-element tensors, inference mode)."""
    with torch_threads(threads), torch.inference_mode():
        a, b = torch.ones(4), torch.ones(4)
        return median_time(lambda: torch.add(a, b), repeats, warmup, inner=200)


@dataclass(frozen=True)
class LayerOverhead:
    """Fixed costs of the real path's forward pass, from probes where compute is negligible.

    ``per_layer_s`` / ``per_forward_s``: slope and intercept of a one-token step's time (no mask: ``ar``,
    draft passes) against the depth; ``per_op_s`` spreads a whole such forward of ``reference_layers`` layers
    over its step-graph operators, so the intercept (embedding, positions, final norm, LM head, the Python
    call) is priced where it matters most: shallow models, whose steps are mostly fixed costs.
    ``masked_factor``: a two-token step under a tree mask (a verification) over the one-token step at the
    reference depth, the median of ratios of the two timed back to back (at least 1); the ``*_masked_s`` fits
    are the masked step's slope and intercept.
    """

    per_op_s: float            # fixed seconds per step-graph operator (see above)
    per_layer_s: float         # fixed seconds per decoder layer
    per_forward_s: float       # fixed seconds of one forward outside the layers
    per_layer_unmasked_s: float
    per_forward_unmasked_s: float
    per_layer_masked_s: float
    per_forward_masked_s: float
    masked_factor: float       # fixed costs of a masked multi-token pass / a one-token pass's
    reference_layers: int      # depth whose whole forward defines per_op_s
    graph_ops_per_layer: int   # step-graph operator launches per layer (sim.step_graph)
    graph_ops_outside: int     # step-graph operator launches outside the layers
    aten_ops_per_layer: int    # torch (aten) operators the real path issues per layer
    hidden: int
    layers: tuple[int, int]    # the two depths timed
    context: int


#: Shape of the overhead probe: hidden 64 keeps every GEMM far below a microsecond of compute
#: (2 * 64 * 64 FLOP per token and matrix), so a forward's time is its fixed costs; 4 query heads
#: over 2 KV heads take the grouped-query path of the demo models.
PROBE_HIDDEN = 64
PROBE_HEADS = (4, 2)
PROBE_VOCAB = 64
#: Depths timed: the slope between them is the per-layer cost, the intercept the per-forward cost.
PROBE_LAYERS = (1, 5)
#: Depth whose whole forward is spread over its operators: the tiny demo target's 2 layers (the
#: shallowest model validated; deeper models' steps are dominated by the per-layer part anyway).
REFERENCE_LAYERS = 2
#: Cached tokens the probe attends to (a typical demo prompt length).
PROBE_CONTEXT = 64


#: Width of the overhead probe (see above).
PROBE_SHAPE = dict(hidden=PROBE_HIDDEN, intermediate=PROBE_HIDDEN, n_heads=PROBE_HEADS[0], n_kv_heads=PROBE_HEADS[1],
                   vocab=PROBE_VOCAB)


def _probe_spec(n_layers: int, shape: dict = PROBE_SHAPE):
    from sim.model_spec import ModelSpec

    return ModelSpec(name=f"overhead-probe-{n_layers}", n_layers=n_layers, dtype="fp32", max_position=4 * PROBE_CONTEXT,
                     **shape)


def _probe_model(n_layers: int, shape: dict = PROBE_SHAPE):
    from real.model.transformer import Transformer

    torch.manual_seed(0)
    return Transformer(_probe_spec(n_layers, shape)).eval()


def probe_specs(shape: dict = PROBE_SHAPE):
    """The shapes of the overhead probe's target and draft (for pricing, without building them); with
    ``shape=LOOP_SHAPE``, those of :func:`probe_models` (the decode-loop probe)."""
    return _probe_spec(REFERENCE_LAYERS, shape), _probe_spec(1, shape)


def prefilled_cache(model, context: int, max_len: int):
    """A KV cache of ``max_len`` slots holding ``context`` committed tokens of ``model`` (a prompt of zeros)."""
    cache = model.new_cache(max_len)
    model(torch.zeros(1, context, dtype=torch.long, device=cache.k.device), cache)
    cache.keep(range(context))
    return cache


def forward_step(model, cache, tokens: int) -> Callable[[], object]:
    """One eager forward of ``tokens`` new tokens after the cache's committed prefix, as the decoders run it:
    one token without a mask (a draft pass, ``ar``), more under a chain's tree mask with explicit positions
    (a verification); the pending tokens are dropped after it."""
    from sim.tree import TokenTree

    device = cache.k.device
    if tokens == 1:
        token = torch.zeros(1, 1, dtype=torch.long, device=device)

        def one():
            model(token, cache)
            cache.discard()
        return one
    tree = TokenTree.chain(tokens - 1)
    block = torch.zeros(1, tokens, dtype=torch.long, device=device)
    mask = torch.from_numpy(tree.attention_mask()).to(device)
    positions = cache.length + torch.tensor(tree.depths, device=device)

    def many():
        model(block, cache, positions=positions, tree_mask=mask)
        cache.discard()
    return many


def _probe_step(model, masked: bool, tokens: int = 2) -> Callable[[], object]:
    """A decode step at ``PROBE_CONTEXT`` cached tokens: one token without a mask (as ``ar`` and a
    draft pass run it) or ``tokens`` tokens (a chain, at least 2) under a tree mask with explicit positions
    (a verification)."""
    return forward_step(model, prefilled_cache(model, PROBE_CONTEXT, 2 * PROBE_CONTEXT), tokens if masked else 1)


def count_aten_ops(fn: Callable[[], object]) -> int:
    """Number of aten operators ``fn`` dispatches (views included)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Counter.calls += 1
            return func(*args, **(kwargs or {}))

    with Counter():
        fn()
    return Counter.calls


def layer_overhead(threads: int, repeats: int, warmup: int) -> LayerOverhead:
    """Fixed costs of the real path's forward, from probe depths :data:`PROBE_LAYERS`, unmasked and masked.

    Every repeat times all four probes (two depths, each as a one-token and a masked two-token step) back
    to back, so a slow moment of the machine hits them alike and the masked-to-unmasked ratio holds while
    the machine's speed moves."""
    from sim.step_graph import build_step_graph

    lo, hi = PROBE_LAYERS
    with torch_threads(threads), torch.inference_mode():
        models = {n: _probe_model(n) for n in (lo, hi)}
        steps = {(n, masked): _probe_step(m, masked) for n, m in models.items() for masked in (False, True)}
        samples: dict[tuple[int, bool], list[float]] = {key: [] for key in steps}
        for step in steps.values():
            median_time(step, 1, warmup)
        for _ in range(repeats):
            for key, step in steps.items():
                samples[key].append(median_time(step, 1, 0, inner=20))
        aten = count_aten_ops(_probe_step(models[hi], False)) - count_aten_ops(_probe_step(models[lo], False))
    fits: dict[bool, tuple[float, float]] = {}
    for masked in (False, True):
        t_lo, t_hi = statistics.median(samples[lo, masked]), statistics.median(samples[hi, masked])
        per_layer = max(t_hi - t_lo, 0.0) / (hi - lo)
        fits[masked] = (per_layer, max(t_lo - lo * per_layer, 0.0))
    # the masked pass's fixed costs over the one-token pass's, at the reference depth, from the paired samples
    # of each repeat (a ratio of two steps timed back to back)
    ratios = [((m_lo * (hi - REFERENCE_LAYERS) + m_hi * (REFERENCE_LAYERS - lo))
               / (u_lo * (hi - REFERENCE_LAYERS) + u_hi * (REFERENCE_LAYERS - lo)))
              for u_lo, u_hi, m_lo, m_hi in zip(samples[lo, False], samples[hi, False], samples[lo, True],
                                                samples[hi, True])]
    graph = build_step_graph(models[lo].spec, 1, PROBE_CONTEXT)
    in_layer = sum(op.launches for op in graph.section("layer"))
    outside = sum(op.launches for op in graph.ops if op.section != "layer")
    per_layer, per_forward = fits[False]
    reference = per_forward + REFERENCE_LAYERS * per_layer
    return LayerOverhead(
        per_op_s=reference / (REFERENCE_LAYERS * in_layer + outside), per_layer_s=per_layer,
        per_forward_s=per_forward, per_layer_unmasked_s=fits[False][0], per_forward_unmasked_s=fits[False][1],
        per_layer_masked_s=fits[True][0], per_forward_masked_s=fits[True][1],
        masked_factor=max(statistics.median(ratios), 1.0), reference_layers=REFERENCE_LAYERS,
        graph_ops_per_layer=in_layer, graph_ops_outside=outside, aten_ops_per_layer=aten // (hi - lo),
        hidden=PROBE_HIDDEN, layers=PROBE_LAYERS, context=PROBE_CONTEXT)


def handoff_latency_s(repeats: int, warmup: int) -> float:
    """One-way seconds to hand a job from one thread to another and be woken (ping-pong / 2)."""
    ping, pong = threading.Event(), threading.Event()
    rounds = warmup + repeats
    stop = threading.Event()

    def responder() -> None:
        for _ in range(rounds):
            ping.wait()
            ping.clear()
            pong.set()
        stop.set()

    samples = []
    thread = threading.Thread(target=responder)
    thread.start()
    for r in range(rounds):
        t = time.perf_counter()
        ping.set()
        pong.wait()
        pong.clear()
        if r >= warmup:
            samples.append((time.perf_counter() - t) / 2.0)
    thread.join()
    return statistics.median(samples)


# ---------------------------------------------------------------------------- decode loops
#: Probe decode runs: prompt and new tokens per run (a calibration's settings may ask for fewer new tokens:
#: :attr:`real.validation.calibration.host_facts.Settings.loop_new_tokens`).
LOOP_PROMPT_TOKENS = 48
LOOP_NEW_TOKENS = 96


@dataclass(frozen=True)
class LoopSample:
    """One real decode loop timed on the overhead probe."""

    method: str
    knob: int                 # gamma / tree budget / tree width (0 for ar)
    step_s: float             # median over repeats of decode seconds per step
    passes: float             # draft passes per step
    nodes: float              # tokens verified per step (proposed + the root)
    heads: int                # Medusa heads computed per step (medusa only)
    tokens: float = 1.0       # tokens emitted per step (dovetail: the next round's first drafter pass)
    host_s: float | None = None   # median decode seconds per step outside the forwards (DecodeResult.host_s)
    new_tokens: int = LOOP_NEW_TOKENS   # tokens each timed run decoded after the LOOP_PROMPT_TOKENS prompt
    shape: str = "wide"       # the probe it ran on (a key of LOOP_SHAPES)
    lag_tokens: float = 0.0   # draft tokens per step fed beyond one per pass (a round's lag after a full one)


#: Logit scale of the probe's LM head: makes its predictions confident (top-1 probability near 1),
#: so draft-tree rounds grow instead of falling back after one token, as a trained draft's do.
PROBE_LOGIT_SCALE = 40.0
#: Configurations timed per method (two or more, so a per-pass or per-node cost can be fitted). Dovetail's
#: loop runs on CPU workers: it is a heterogeneous probe (:mod:`real.validation.calibration.dovetail_probe`).
LOOP_CONFIGS = {"ar": (0,), "chain": (1, 3, 6), "draft-tree": (4, 8, 16), "medusa": (1, 8, 32)}
#: Medusa heads of the probe (the tiny demo preset has 3).
PROBE_MEDUSA_HEADS = 3
#: The wide decode-loop probe, the small demo target's width. A loop's work outside its forwards grows with the
#: width: it reads the logits (argmax, top-k over the vocabulary), after forwards that have swept the caches.
LOOP_SHAPE = dict(hidden=384, intermediate=1024, n_heads=6, n_kv_heads=2, vocab=4096)
#: The narrow decode-loop probe, the tiny demo target's width: its loops' host work is a half to a third of the
#: wide probe's (2-core EPYC), so a model's is interpolated by its LM head (:meth:`~hwmodels.platform.LoopCosts.costs_for`).
NARROW_LOOP_SHAPE = dict(hidden=128, intermediate=352, n_heads=4, n_kv_heads=2, vocab=512)
#: The decode-loop probes by name: :attr:`LoopSample.shape` names one.
LOOP_SHAPES = {"wide": LOOP_SHAPE, "narrow": NARROW_LOOP_SHAPE}


def probe_models(shape: dict = LOOP_SHAPE):
    """A ``REFERENCE_LAYERS``-deep probe target, a one-layer probe draft (drafts are shallower than
    their targets) that predicts what the target does, both with a confident LM head (so draft trees
    grow to their budget, as a trained draft's do), and untrained Medusa heads on the target."""
    from real.decode.common import DecodeModels
    from real.model.medusa_heads import MedusaHeads

    target, draft = _probe_model(REFERENCE_LAYERS, shape), _probe_model(1, shape)
    with torch.no_grad():
        target.lm_head.weight.mul_(PROBE_LOGIT_SCALE)
        # the draft agrees with the target, so draft trees grow round after round (a draft that
        # never agrees makes draft-tree's fallback stop every round after one pass, and its per-pass
        # cost cannot be told from its per-step one): the target's later layers add nothing to the
        # residual stream (zero output projections: the same shapes, so the same cost) and the
        # draft is the target's first layer with the target's embedding, norm and LM head
        for layer in target.model.layers[1:]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        draft.load_state_dict({k: v for k, v in target.state_dict().items() if k in draft.state_dict()})
    heads = MedusaHeads.from_target(target, PROBE_MEDUSA_HEADS).eval()
    return DecodeModels(target=target, draft=draft, heads=heads)


def loop_prompt(shape: dict = LOOP_SHAPE) -> list[int]:
    """The probe decode loops' prompt (``LOOP_PROMPT_TOKENS`` ids spread over the ``shape``'s vocabulary)."""
    return [1 + (7 * i) % (shape["vocab"] - 1) for i in range(LOOP_PROMPT_TOKENS)]


def decode_loop_samples(threads: int, repeats: int, placement=None,
                        configs: dict[str, tuple[int, ...]] | None = None,
                        new_tokens: int = LOOP_NEW_TOKENS, shapes: tuple[str, ...] = tuple(LOOP_SHAPES)
                        ) -> tuple[LoopSample, ...]:
    """Time HetSpec's real single-device decode loops (real.decode) on the probe models of each of ``shapes``
    (:data:`LOOP_SHAPES` keys): per probe, method and config the median step time, draft passes and verified
    tokens per step. ``placement`` (:class:`real.model.placement.Placement`; None: this CPU): where the probe
    models run (CUDA: the wide probe only). ``configs``: the methods and knobs (default :data:`LOOP_CONFIGS`).

    The samples carry the loops' time outside their traced forwards (``host_s``) on a CPU only: a CUDA record
    ends when its kernels are queued, so there the fit takes the step time beyond the forwards' price."""
    from real.validation.grid import GridPoint, medusa_tree, real_config

    cuda = placement is not None and placement.is_cuda
    shapes = ("wide",) if cuda else shapes
    configs = dict(LOOP_CONFIGS if configs is None else configs)
    probes = {shape: probe_models(LOOP_SHAPES[shape]) for shape in shapes}
    if placement is not None:
        from real.model.placement import place_models

        probes = {shape: place_models(m, placement, in_place=True, target_tokens=max(configs.get("medusa", (1,))))
                  for shape, m in probes.items()}
    # accuracies only shape the Medusa trees (greedy sparse trees of the demo kind)
    accuracy = [[0.6, 0.15, 0.05, 0.05], [0.5, 0.15, 0.05, 0.05], [0.4, 0.15, 0.05, 0.05]]
    jobs = [(method, knob, real_config(GridPoint(method, knob), accuracy,
                                       medusa_tree(knob, accuracy) if method == "medusa" else None), shape)
            for shape in shapes for method, knobs in configs.items() for knob in knobs]
    return time_decode_loops(probes, jobs, threads, repeats, new_tokens, host_s=not cuda)


def time_decode_loops(models, jobs, threads: int, repeats: int, new_tokens: int = LOOP_NEW_TOKENS,
                      host_s: bool = True) -> tuple[LoopSample, ...]:
    """Time ``jobs`` (``(method, knob, config)``: a real decoder of :mod:`real.decode` and its config, on the probe
    ``models``; or ``(method, knob, config, shape)`` with ``models`` a dict of probes by :data:`LOOP_SHAPES` key)
    with ``threads`` torch threads: a warm-up each, then ``repeats`` rounds that run every loop once; per job the
    median step time, draft passes and verified tokens per step, and (``host_s``) the time outside the forwards."""
    from real.decode import decoder
    from real.decode.common import Clock

    probes, jobs = (models, jobs) if isinstance(models, dict) else ({"wide": models}, [(*j, "wide") for j in jobs])
    prompts = {shape: loop_prompt(LOOP_SHAPES[shape]) for shape in probes}
    gens = [decoder(method).generate for method, _, _, _ in jobs]
    runs: list[list] = [[] for _ in jobs]
    with torch_threads(threads), torch.inference_mode():
        for (_, _, config, shape), gen in zip(jobs, gens):
            gen(probes[shape], prompts[shape], 8, config, Clock())                         # warm-up
        for _ in range(repeats):
            for i, ((_, _, config, shape), gen) in enumerate(zip(jobs, gens)):
                runs[i].append(gen(probes[shape], prompts[shape], new_tokens, config, Clock()))
    out = []
    for (method, knob, _, shape), results in zip(jobs, runs):
        run = sorted(results, key=lambda r: r.decode_s)[len(results) // 2]
        out.append(LoopSample(method, knob, statistics.median(r.decode_s / r.steps for r in results),
                              passes=run.draft_passes / run.steps, nodes=1.0 + sum(run.proposed_per_step) / run.steps,
                              heads=PROBE_MEDUSA_HEADS if method == "medusa" else 0,
                              tokens=run.mean_accepted_per_step,
                              host_s=statistics.median(r.host_s / r.steps for r in results) if host_s else None,
                              new_tokens=new_tokens, shape=shape,
                              lag_tokens=max(run.draft_tokens - run.draft_passes, 0) / run.steps))
    return tuple(out)
