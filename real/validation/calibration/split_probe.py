"""What Ghidorah's split step costs on two worker threads beyond its operators: ``hetspec calibrate``'s hcmp probe.

The real split step (:class:`real.hetero.split_model.SplitTarget`) runs one side of every operator on
each of two single-thread workers. Timed phase by phase on the calibration's overhead probe (hidden 64,
so compute is negligible and a step's time is its fixed costs), at two depths so that a per-layer cost
is told from a per-step one, with the tree of the validation (16 tokens) and Medusa heads, ratio 0.5:

- ``unsplit``: the whole step (forward + heads) on the calling worker alone (ratio 1): the fixed costs
  the step graph's operators stand for (``cache_op_overhead_us`` prices them);
- ``side``: one side of the split step alone on the calling worker, its barriers skipped: what one
  worker's half of a split layer costs in fixed costs (the norms and RoPE both sides compute whole,
  the partial attention in pieces, the partials' copies, the online-softmax merge, the column slices);
- ``pair``: both sides at once on their two workers, the barriers skipped: the same fixed costs when the
  two workers' Python runs at the same time (the interpreter lock lets one thread run Python at a time);
- ``full``: the split step as it runs, with the :class:`~real.hetero.workers.PairBarrier` after every
  synchronised group;
- ``handoff``: an empty call handed to the other worker and back (the split forward and the split heads
  are each one such hand-off);
- ``merge``: one side's copies of its partial attention into the shared buffers plus the merge of the two
  partials (:func:`real.hetero.layer_ops.merge_partials`), timed alone;
- ``barrier``: one bare round of the :class:`~real.hetero.workers.PairBarrier`, the two workers doing nothing
  else (:func:`real.hetero.workers.barrier_round_trip_s`): what a barrier costs without the other side's Python.

The costs the ``hcmp`` strategy reads (:func:`split_costs`, written as the single-thread workers' loop
costs): per barrier ``(full - pair)`` per layer over its barriers; per split layer and side
``side - unsplit - merge`` and the merge; per layer of both sides at once ``pair``; per step two hand-offs;
the bare barrier. The probe's threads run nothing but Python; the ``hcmp`` strategy pays the barrier beyond its
bare round trip and the turn-taking only in the share of a real step's time spent in Python
(:func:`sim.strategies.hcmp_threads.python_share`).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

#: Depths of the split probe (the per-layer cost is the slope between them).
SPLIT_LAYERS = (1, 5)
#: Tree tokens of the probe's split step: the heterogeneous validation's Medusa tree (16 tokens).
SPLIT_TOKENS = 16
#: Medusa heads of the probe (the tiny demo preset's 3).
SPLIT_HEADS = 3
#: Steps timed per sample (the median of the samples over the rounds is kept).
SPLIT_STEPS = 10
#: Head accuracies that shape the probe's tree (a greedy Medusa tree of the demo kind).
SPLIT_ACCURACY = ((0.6, 0.15, 0.05, 0.05), (0.5, 0.15, 0.05, 0.05), (0.4, 0.15, 0.05, 0.05))


@dataclass(frozen=True)
class SplitProbe:
    """Seconds per step of the probe's split step, phase by phase, at the two depths ``layers``."""

    layers: tuple[int, int]
    tokens: int
    context: int
    hidden: int
    heads: int
    unsplit_s: tuple[float, float]
    side_s: tuple[tuple[float, float], tuple[float, float]]   # side 0, side 1
    pair_s: tuple[float, float]
    full_s: tuple[float, float]
    handoff_s: float
    merge_s: float
    barrier_s: float
    syncs_per_layer: int
    workers: tuple[str, str]

    def _slope(self, values) -> float:
        return (values[1] - values[0]) / (self.layers[1] - self.layers[0])

    @property
    def unsplit_layer_s(self) -> float:
        return self._slope(self.unsplit_s)

    @property
    def side_layer_s(self) -> float:
        """One side's fixed cost per split layer, alone (the mean of the two sides)."""
        return 0.5 * (self._slope(self.side_s[0]) + self._slope(self.side_s[1]))

    @property
    def pair_layer_s(self) -> float:
        return self._slope(self.pair_s)

    @property
    def full_layer_s(self) -> float:
        return self._slope(self.full_s)

    @property
    def sync_s(self) -> float:
        """One barrier as the split step meets it: the step's per-layer time with barriers minus without, per barrier."""
        return max(self.full_layer_s - self.pair_layer_s, 0.0) / self.syncs_per_layer


class _NoBarrier:
    """A barrier that does not wait (the ``side`` and ``pair`` phases)."""

    broken = False

    def wait(self, party: int) -> None:
        pass

    def abort(self) -> None:
        pass


def _probe_heads(spec, n_heads: int):
    from real.model.medusa_heads import MedusaHeads

    torch.manual_seed(1)
    heads = MedusaHeads(spec, n_heads)
    with torch.no_grad():
        heads.w1.normal_(0.0, 0.02)
    return heads.eval().requires_grad_(False)


def _split_steps(n_layers: int, session):
    """The four step functions (unsplit, side 0, side 1, pair, full) of a ``n_layers``-deep probe."""
    from real.hetero.split_model import SplitTarget
    from real.validation.calibration.microbench import PROBE_CONTEXT, _probe_model
    from sim.tree import TokenTree

    model = _probe_model(n_layers)
    heads = _probe_heads(model.spec, SPLIT_HEADS)
    tree = TokenTree.greedy([list(a) for a in SPLIT_ACCURACY], SPLIT_TOKENS)
    mask = torch.from_numpy(tree.attention_mask())
    depths = torch.tensor(tree.depths)
    block = torch.zeros(1, tree.size, dtype=torch.long)
    row = torch.zeros(model.spec.hidden)

    def make(ratio: float, variant: str):
        split = SplitTarget(model, heads, ratio, ("cpu", "cpu"))
        if variant in ("side0", "side1", "pair"):
            split.barrier_type = _NoBarrier
        if variant in ("side0", "side1"):
            side = int(variant[-1])
            split._both_sides = lambda _session, program, run, side=side: program(side, run)
        cache = split.new_cache(PROBE_CONTEXT + 2 * tree.size)
        split.prefill(session, torch.zeros(1, PROBE_CONTEXT, dtype=torch.long), cache)
        cache.keep(range(PROBE_CONTEXT))

        def step():
            split.forward(session, block, cache, cache.length + depths, mask)
            split.heads(session, row)        # the row's values do not change the heads' cost
            cache.discard()
        return step

    return {"unsplit": make(1.0, "full"), "side0": make(0.5, "side0"), "side1": make(0.5, "side1"),
            "pair": make(0.5, "pair"), "full": make(0.5, "full")}


def _merge_seconds(repeats: int) -> float:
    """One side's partials copied into the shared buffers and merged with the other's, at the probe's shapes."""
    from real.hetero.layer_ops import heads_to_rows, merge_partials
    from real.validation.calibration.microbench import PROBE_HEADS, PROBE_HIDDEN, median_time

    h, hd, q = PROBE_HEADS[0], PROBE_HIDDEN // PROBE_HEADS[0], SPLIT_TOKENS
    shapes = ((1, h, q, hd), (1, h, q, 1), (1, h, q, 1))
    mine = [torch.randn(s) for s in shapes]
    bufs = [[torch.empty(s) for s in shapes] for _ in range(2)]

    def merge():
        for buf, value in zip(bufs[0], mine):
            buf.copy_(value)
        return heads_to_rows(merge_partials([tuple(bufs[j]) for j in (0, 1)]))
    for buf, value in zip(bufs[1], mine):
        buf.copy_(value)
    with torch.inference_mode():
        return median_time(merge, repeats, 5, inner=50)


def split_probe(workers: tuple[str, str], repeats: int, warmup: int) -> SplitProbe:
    """Time the probe's split step phase by phase on ``workers`` (two single-thread workers, primary first).

    Every round times every phase at both depths once, in turn, so a slow moment of the machine hits
    them all alike; each value is the median over the rounds of the mean of :data:`SPLIT_STEPS` steps."""
    from real.hetero.split_model import LAYER_GROUPS
    from real.hetero.workers import WorkerSession, barrier_round_trip_s, parse_workers
    from real.validation.calibration.microbench import PROBE_CONTEXT, PROBE_HIDDEN

    pair = parse_workers(workers, 2)
    samples: dict[tuple[str, int], list[float]] = {}
    with WorkerSession(pair) as session, torch.inference_mode():
        steps = {n: _split_steps(n, session) for n in SPLIT_LAYERS}
        for n, fns in steps.items():
            for fn in fns.values():
                for _ in range(warmup):
                    fn()
        for _ in range(repeats):
            for n, fns in steps.items():
                for name, fn in fns.items():
                    t = time.perf_counter()
                    for _ in range(SPLIT_STEPS):
                        fn()
                    samples.setdefault((name, n), []).append((time.perf_counter() - t) / SPLIT_STEPS)
        handoff = []
        for _ in range(warmup + 20 * repeats):
            t = time.perf_counter()
            session.run(1, _nothing)
            handoff.append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in samples.items()}
    barrier = barrier_round_trip_s(pair)

    def both(name: str) -> tuple[float, float]:
        return tuple(med[(name, n)] for n in SPLIT_LAYERS)

    return SplitProbe(layers=SPLIT_LAYERS, tokens=SPLIT_TOKENS, context=PROBE_CONTEXT, hidden=PROBE_HIDDEN,
                      heads=SPLIT_HEADS, unsplit_s=both("unsplit"), side_s=(both("side0"), both("side1")),
                      pair_s=both("pair"), full_s=both("full"), handoff_s=statistics.median(handoff[warmup:]),
                      merge_s=_merge_seconds(repeats), barrier_s=barrier, syncs_per_layer=len(LAYER_GROUPS), workers=tuple(workers))


def _nothing() -> None:
    return None
