"""The streaming probe of ``hetspec calibrate``: a decoder several times larger than the last-level cache
(its step against the same step's GEMMs alone: the fixed cost per operator of a model whose weights
stream from DRAM) and a draft-sized model beside it (its pass in a loop of its own against its GEMMs alone:
the fixed cost per operator of a resident model's passes in a decode loop; its first pass after a probe step
and the next ones: how the cache re-warms). Run in a fresh process (:mod:`real.validation.calibration.weight_cache`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from real.validation.calibration.microbench import (FP32_BYTES, PROBE_CONTEXT, _probe_step, interleaved_medians,
                                        torch_threads)


@dataclass(frozen=True)
class StreamingProbe:
    """One decode step of a random-weight decoder whose weights stream from DRAM."""

    spec: object              # sim.model_spec.ModelSpec
    unmasked_s: float         # one token, no mask
    masked_s: float           # STREAM_MASKED_TOKENS tokens under a tree mask
    context: int
    masked_tokens: int = 4
    gemm_unmasked_s: float = 0.0   # the same step's GEMMs alone (same weights, same order, M = 1)
    gemm_masked_s: float = 0.0     # ... with M = masked_tokens
    draft_cold_s: float = 0.0      # a draft-sized model's first pass right after a probe step
    draft_later_s: float = 0.0     # its next passes (mean of the medians of passes 2..REWARM_PASSES)
    draft_pass_s: tuple = ()       # the median of each of its REWARM_PASSES passes after a probe step, in order
    draft_warm_s: float = 0.0      # its pass in a loop of its own
    draft_gemm_s: float = 0.0      # its GEMMs alone (same weights, same order, M = 1), interleaved with that loop
    draft_spec: object = None      # that model's sim.model_spec.ModelSpec
    #: (weight bytes, bytes/s): one-token GEMVs over the first layers and the LM head of a draft-shaped
    #: model, in the forward's order, in a loop of their own (:func:`real.validation.calibration.weight_cache.weight_cache_curve`)
    weight_curve: tuple = ()
    #: the same sets in ``weight_curve_tokens``-token passes (bytes of weights per second)
    weight_curve_multi: tuple = ()
    weight_curve_tokens: int = 0

    @property
    def weight_cache(self) -> tuple[int, float] | None:
        """(bytes, bytes/s) of the largest weight set its linears still read from the cache
        (:func:`real.validation.calibration.host_facts.held_weight_set`), or None without the measurement."""
        from real.validation.calibration.host_facts import held_weight_set

        return held_weight_set(self.weight_curve, self.weight_curve_multi)

    @property
    def gemv_weight_cache(self) -> tuple[int, float] | None:
        """The same from the one-token passes alone: what a one-token pass keeps in the cache."""
        from real.validation.calibration.host_facts import held_weight_set

        return held_weight_set(self.weight_curve)

    @property
    def rewarm(self) -> float:
        """Share of the cold-to-warm gap the draft recovers on its later passes (0..1)."""
        gap = self.draft_cold_s - self.draft_warm_s
        return min(max((self.draft_cold_s - self.draft_later_s) / gap, 0.0), 1.0) if gap > 0 else 1.0

    @property
    def rewarm_gaps(self) -> tuple[float, ...]:
        """Per pass after the probe step (the first is 1 by definition): its share of the cold-to-warm gap."""
        return gap_shares(self.draft_pass_s, self.draft_warm_s)

    @property
    def rewarm_keep(self) -> float | None:
        """``keep`` of the pass-by-pass re-warming (:func:`fit_rewarm_keep` over :attr:`rewarm_gaps`), or None
        without the per-pass timings."""
        gaps = self.rewarm_gaps
        return fit_rewarm_keep(gaps[1:]) if len(gaps) > 1 else None


def gap_shares(passes, warm: float) -> tuple[float, ...]:
    """Each of ``passes`` (seconds, the first right after an eviction) as its share of the first pass's gap to
    ``warm``, within [0, 1] (the first: 1); empty when the first pass is not slower than ``warm``."""
    gap = passes[0] - warm if len(passes) else 0.0
    if gap <= 0:
        return ()
    return tuple(min(max((t - warm) / gap, 0.0), 1.0) for t in passes)


def fit_rewarm_keep(gaps) -> float:
    """The ``keep`` in [0, 1] whose powers ``keep ** j`` (j = 1, 2, ...) fit ``gaps`` (the shares of the
    cold-to-warm gap of passes 1, 2, ... after an eviction) in least squares: the cache refills by the same
    share of what is still missing on every pass."""
    import numpy as np

    g = np.asarray(gaps, dtype=float)
    if g.size == 0:
        raise ValueError("fit_rewarm_keep needs at least one pass after the first")
    keep = np.linspace(0.0, 1.0, 10001)[:, None]
    err = ((keep ** np.arange(1, g.size + 1)[None, :] - g[None, :]) ** 2).sum(axis=1)
    return float(keep[int(np.argmin(err)), 0])


#: Layer shape of the streaming probe (a narrow Llama layer, grouped-query attention, 7 MB of fp32
#: weights). The fixed cost per operator of a streaming model grows with its width (measured here:
#: about 11-16 us at hidden 384, 20-23 us at hidden 768, 8 us in the cache), so the probe takes the
#: narrow end, the small demo target's width: fixed costs matter most for narrow models, whose
#: steps have the least GEMM time to hide them in; a wide model's fixed costs are then priced a
#: little low, a few percent of its step.
STREAM_HIDDEN = 384
STREAM_INTERMEDIATE = 1536
STREAM_HEADS = (6, 2)
STREAM_VOCAB = 4096
#: Weights of the streaming probe, in multiples of the last-level cache (each step evicts them all).
STREAM_WEIGHTS_LLC = 4
#: Depth cap (a machine with a huge cache would otherwise build a very deep probe).
STREAM_MAX_LAYERS = 32
#: Draft-sized model of the re-warming measurement (2 layers, hidden 256, vocabulary 4096: 10 MB
#: of fp32 weights read per pass, a third of a desktop last-level cache), and its passes per round (a
#: chain's longest round: sim.strategies.chain.MAX_GAMMA).
REWARM_DRAFT = dict(n_layers=2, hidden=256, intermediate=704, n_heads=4, n_kv_heads=2, vocab=4096)
REWARM_PASSES = 8
#: Tokens of the masked streaming step: a typical verification; not 2, where this CPU's GEMM
#: kernels take a slow path for some shapes (measured: M = 2 slower per row than M = 1 or 4), which
#: would be mistaken for fixed cost.
STREAM_MASKED_TOKENS = 4


def linear_blocks(model) -> list[list[torch.Tensor]]:
    """The weights of ``model``'s linear layers in the forward's order, one list per block: each layer's
    attention projections (q, k, v, o), then its MLP (gate, up, down)."""
    out = []
    for layer in model.model.layers:
        a, m = layer.self_attn, layer.mlp
        out += [[a.q_proj.weight, a.k_proj.weight, a.v_proj.weight, a.o_proj.weight],
                [m.gate_proj.weight, m.up_proj.weight, m.down_proj.weight]]
    return out


def forward_weights(model) -> list[torch.Tensor]:
    """``model``'s linear weights in the forward's order: its layers' (:func:`linear_blocks`), then the LM head."""
    return [w for block in linear_blocks(model) for w in block] + [model.lm_head.weight]


def gemm_pass(weights, m: int) -> Callable[[], object]:
    """A call running ``F.linear`` of an ``m``-token activation through each of ``weights`` in turn."""
    xs = {w.shape[1]: torch.randn(1, m, w.shape[1]) for w in weights}

    def run():
        for w in weights:
            F.linear(xs[w.shape[1]], w)
    return run


def streaming_spec(llc_bytes: int):
    """The streaming probe's decoder: :data:`STREAM_WEIGHTS_LLC` x the last-level cache of fp32 layer weights."""
    from sim.model_spec import ModelSpec

    h, i = STREAM_HIDDEN, STREAM_INTERMEDIATE
    kv = h // STREAM_HEADS[0] * STREAM_HEADS[1]
    per_layer = FP32_BYTES * (2 * h * h + 2 * h * kv + 3 * h * i)
    layers = min(max(1, -(-STREAM_WEIGHTS_LLC * llc_bytes // per_layer)), STREAM_MAX_LAYERS)
    return ModelSpec(name="streaming-probe", n_layers=int(layers), hidden=h, intermediate=i, n_heads=STREAM_HEADS[0],
                     n_kv_heads=STREAM_HEADS[1], vocab=STREAM_VOCAB, dtype="fp32", max_position=4 * PROBE_CONTEXT)


def rewarm_series(evict: Callable[[], object], draft_pass: Callable[[], object], rounds: int,
                  passes: int) -> list[float]:
    """Median seconds of each of ``passes`` draft passes timed one by one right after ``evict()``, over ``rounds``
    rounds (a round: ``evict()``, then the passes)."""
    times: list[list[float]] = [[] for _ in range(passes)]
    for _ in range(rounds):
        evict()
        for j in range(passes):
            t = time.perf_counter()
            draft_pass()
            times[j].append(time.perf_counter() - t)
    return [statistics.median(t) for t in times]


def streaming_probe(threads: int, repeats: int, warmup: int, llc_bytes: int) -> StreamingProbe:
    """Time one and two-token steps of a decoder several times larger than the last-level cache."""
    from real.model.random_models import random_transformer
    from sim.model_spec import ModelSpec

    spec = streaming_spec(llc_bytes)
    model = random_transformer(spec)
    draft = random_transformer(ModelSpec(name="rewarm-draft", dtype="fp32", max_position=4 * PROBE_CONTEXT,
                                         **REWARM_DRAFT))
    with torch_threads(threads), torch.inference_mode():
        # interleaved: a forward and its GEMMs alone see the same state of the machine
        step1, weights = _probe_step(model, False), forward_weights(model)
        stepq = _probe_step(model, True, STREAM_MASKED_TOKENS)
        med = interleaved_medians({"step1": step1, "stepq": stepq,
                                   "gemm1": gemm_pass(weights, 1), "gemmq": gemm_pass(weights, STREAM_MASKED_TOKENS)},
                                  repeats, warmup)
        # the draft pass in a loop of its own, then re-warming: a round = one masked probe step of
        # STREAM_MASKED_TOKENS tokens (a verification: evicts the draft), then the draft's passes one by one.
        # What precedes the passes matters beyond the bytes it streams: on a 2-core EPYC the small demo draft's second to
        # fourth passes still paid 0.68-0.74, 0.51-0.64, 0.42-0.54 of its cold-to-warm gap after a one-token step
        # of the small target, 0.63-0.65, 0.24-0.33, 0.06-0.18 after a four-token one
        draft_pass = _probe_step(draft, False)
        warm = interleaved_medians({"pass": draft_pass, "gemm": gemm_pass(forward_weights(draft), 1)}, repeats, 5)
        passes = rewarm_series(stepq, draft_pass, repeats, REWARM_PASSES)
    return StreamingProbe(spec, med["step1"], med["stepq"], PROBE_CONTEXT, STREAM_MASKED_TOKENS,
                          gemm_unmasked_s=med["gemm1"], gemm_masked_s=med["gemmq"],
                          draft_cold_s=passes[0], draft_later_s=statistics.mean(passes[1:]), draft_pass_s=tuple(passes),
                          draft_warm_s=warm["pass"], draft_gemm_s=warm["gemm"], draft_spec=draft.spec)
