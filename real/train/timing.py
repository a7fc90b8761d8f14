"""Forward-pass timing of the demo models: the measurement the presets were sized with.

On a CPU a one-token decode step of a small model is dominated by per-operator dispatch and by
streaming the weights; a step over q tokens (a speculative verification) costs little more
until the matrix products become compute-bound. :func:`forward_times` measures the step time at
several q over a cached context, the median over many repeats (other processes on the machine
make single runs noisy).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from hwmodels.errors import HetSpecError
from real.model.medusa_heads import MedusaHeads
from real.model.transformer import Transformer

#: Untimed repeats before measuring (allocator and cache warm-up).
WARMUP_REPEATS = 10


@dataclass(frozen=True)
class ForwardTime:
    model: str
    q: int                 # tokens per forward pass
    context: int           # committed tokens in the KV cache
    median_ms: float
    repeats: int


def forward_times(model: Transformer, qs: tuple[int, ...] = (1, 16, 64), context: int = 128,
                  repeats: int = 200, name: str = "model") -> list[ForwardTime]:
    """Median time of one forward pass of q new tokens (causal mask among them) after
    ``context`` cached tokens, under ``torch.inference_mode``."""
    if repeats <= 0 or context <= 0 or any(q <= 0 for q in qs):
        raise HetSpecError(f"forward_times: need positive repeats, context and q, got {repeats}, {context}, {qs}")
    vocab = model.spec.vocab
    gen = torch.Generator().manual_seed(0)
    cache = model.new_cache(context + max(qs))
    inputs = {q: (torch.randint(0, vocab, (1, q), generator=gen),
                  torch.ones(q, q, dtype=torch.bool).tril() if q > 1 else None) for q in qs}
    samples: dict[int, list[float]] = {q: [] for q in qs}
    with torch.inference_mode():
        model(torch.randint(0, vocab, (1, context), generator=gen), cache=cache)
        cache.keep(range(context))
        # Interleave the q values repeat by repeat, so a burst of load elsewhere on the machine
        # hits all of them alike and their ratios stay meaningful.
        for i in range(WARMUP_REPEATS + repeats):
            for q, (tokens, mask) in inputs.items():
                start = time.perf_counter()
                model(tokens, cache=cache, tree_mask=mask)
                samples[q].append(time.perf_counter() - start)
                cache.discard()
    return [ForwardTime(name, q, context, 1e3 * statistics.median(samples[q][WARMUP_REPEATS:]), repeats)
            for q in qs]


def heads_time(heads: MedusaHeads, repeats: int = 200) -> ForwardTime:
    """Median time of all Medusa heads on one hidden state (what a decode step adds)."""
    hidden = torch.randn(1, 1, heads.spec.hidden)
    samples = []
    with torch.inference_mode():
        for i in range(WARMUP_REPEATS + repeats):
            start = time.perf_counter()
            heads(hidden)
            samples.append(time.perf_counter() - start)
    return ForwardTime("medusa-heads", 1, 0, 1e3 * statistics.median(samples[WARMUP_REPEATS:]), repeats)
