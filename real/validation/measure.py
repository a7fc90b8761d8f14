"""The measured half of ``hetspec validate``: real decoding of the grid on held-out evaluation prompts.

**The paired protocol.** Every configuration of the grid is timed in A/B blocks with ``ar``
(:func:`real.run.repeats.paired_blocks`): a block decodes each evaluation prompt with ``ar`` and with the
configuration back to back (a pair, tens of milliseconds on a small model), in this process, in an order that
alternates from pair to pair; every configuration gets ``repeats`` blocks, visited in an order rotated by
repeat. On a shared machine two runs back to back slow down together, so their ratio (the configuration's
speedup over ``ar``) holds while the absolute speed moves; the speed of a shared machine drifts within a
second, so the pairs are as short as one prompt. :mod:`real.validation.verdict` judges the ratios and sets
the absolute figures beside the spread of the ``ar`` timings. The first run of each configuration is
preceded by an untimed warm-up.

Reported per point: the median over its blocks of the mean step time (decode seconds / decode steps) and of
the decode throughput, every pair's decode seconds and tokens, its own and its ``ar``'s (what the paired
verdict is computed from), the tokens per step (greedy decoding is deterministic, so the same in every
block), draft passes per step, and the per-phase time of the median block's trace.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hwmodels.errors import HetSpecError
from real.validation.grid import GridPoint


@dataclass(frozen=True)
class Measurement:
    point: GridPoint
    step_s: float                   # median over blocks of decode_s / steps
    tokens_per_s: float             # median over blocks of decode tokens / decode_s
    tokens_per_step: float
    draft_passes_per_step: float
    step_samples: tuple[float, ...]
    tps_samples: tuple[float, ...]
    pairs: dict                     # per block and prompt: decode_s, tokens, ar_decode_s, ar_tokens
    phase_ms: dict                  # ms per step: draft, verify, accept, other (median block)
    verified_per_step: float        # tokens in each verification pass: proposed + 1 (the root)


@dataclass(frozen=True)
class Stopping:
    """How many A/B blocks a configuration gets: at least ``least``; then further rounds (one block of every
    configuration each) while the paired band (:func:`real.validation.verdict.paired_band`) is wider than
    ``settled`` and another round as long as the longest yet fits ``budget_s`` from the first block, up to
    ``most`` blocks. A fixed count is ``least == most``."""

    least: int
    most: int
    budget_s: float | None = None
    settled: float = 0.0

    def __post_init__(self) -> None:
        if self.least < 1 or self.most < self.least:
            raise HetSpecError(f"A/B blocks: at least {self.least} and at most {self.most} is not a range of counts")


def fixed(repeats: int) -> Stopping:
    return Stopping(repeats, repeats)


def keep_measuring(stop: Stopping, done: int, elapsed_s: float, longest_round_s: float, band: float) -> bool:
    """Whether another round of blocks is taken after ``done`` rounds (``elapsed_s`` since the first block; the
    longest round so far; the paired band so far, NaN where it cannot be told yet)."""
    if done < stop.least:
        return True
    if done >= stop.most or (math.isfinite(band) and band <= stop.settled):
        return False
    return stop.budget_s is None or elapsed_s + longest_round_s <= stop.budget_s


def measure_grid(models, points: Sequence[GridPoint], configs: Sequence, prompts: Sequence[Sequence[int]],
                 max_new_tokens: int, stop: Stopping | int, worker: str = "cpu",
                 tick: Callable[[], None] | None = None, clock: Callable[[], float] | None = None,
                 baseline: int | None = None) -> tuple[Measurement, ...]:
    """Decode ``prompts`` with every (point, config) in A/B blocks with point ``baseline`` (None: the ``ar``
    point), one pair a prompt (module docstring), as many blocks as ``stop`` says (an int: that many); ``tick``
    after every block."""
    import gc
    import time

    from real.run.repeats import paired_blocks
    from real.run.session import run_prompts
    from real.validation.verdict import paired_band

    stop = fixed(stop) if isinstance(stop, int) else stop
    clock = clock or time.monotonic
    baseline = next((i for i, p in enumerate(points) if p.method == "ar"), None) if baseline is None else baseline
    if baseline is None:
        raise HetSpecError("the validation grid needs its ar point: every configuration is timed against it")
    prompts = [list(p) for p in prompts]
    rounds = {"start": None, "last": None, "longest": 0.0}

    def run(i: int, part: int, first: bool):
        if rounds["start"] is None:
            rounds["start"] = rounds["last"] = clock()
        return run_prompts(models, points[i].method, configs[i], [prompts[part]], max_new_tokens, seed=part,
                           warmup=first, worker=worker)

    def more(done: int, own, paired) -> bool:
        gc.collect()      # between repeats: the collector is off while blocks are timed (below)
        now = clock()
        rounds["longest"], rounds["last"] = max(rounds["longest"], now - rounds["last"]), now
        band = paired_band([{"method": p.method, "pairs": pairs_of(own[i], paired[i])}
                            for i, p in enumerate(points) if i != baseline])
        return keep_measuring(stop, done, now - rounds["start"], rounds["longest"], band)

    # the cyclic garbage collector stays off while blocks are timed (as timeit keeps it): a collection of
    # the whole process lands in one block, the same one in every run, and slows that pair alone; it
    # collects between repeats instead (``more``)
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        own, paired = paired_blocks(len(points), baseline, stop.least, run, parts=len(prompts), tick=tick,
                                    max_repeats=stop.most, more=more)
    finally:
        if was_enabled:
            gc.enable()
    return summarize(points, own, paired)


def head_to_head(models, points: Sequence[GridPoint], configs: Sequence, prompts: Sequence[Sequence[int]],
                 max_new_tokens: int, stop: Stopping | int, contests: dict, worker: str = "cpu",
                 tick: Callable[[], None] | None = None) -> dict:
    """Per method of ``contests`` (:func:`real.validation.verdict.contests`): each rival in A/B blocks with its
    measured best, as ``{"against": the best's label, "blocks": blocks taken, "pairs": {rival: its pairs}}``."""
    index = {p.label: i for i, p in enumerate(points)}
    out = {}
    for method, (against, rivals) in contests.items():
        pick = [index[against]] + [index[r] for r in rivals]
        meas = measure_grid(models, [points[i] for i in pick], [configs[i] for i in pick], prompts, max_new_tokens,
                            stop, worker=worker, tick=tick, baseline=0)
        out[method] = {"against": against, "blocks": len(meas[1].step_samples),
                       "pairs": {m.point.label: m.pairs for m in meas[1:]}}
    return out


def merged(runs) -> object:
    """One block's runs of a configuration (one a prompt) as one :class:`~real.run.session.RunResult`."""
    from real.run.session import RunResult

    return RunResult(method=runs[0].method, config=runs[0].config,
                     results=tuple(x for r in runs for x in r.results),
                     records=tuple(x for r in runs for x in r.records))


def pairs_of(blocks, ar_blocks) -> dict:
    """Every pair's decode seconds and tokens, per block and prompt, of a configuration and its ``ar``."""
    def table(rows, key):
        return [[getattr(r, key) for r in block] for block in rows]

    return {"decode_s": table(blocks, "decode_s"), "tokens": table(blocks, "decode_tokens"),
            "ar_decode_s": table(ar_blocks, "decode_s"), "ar_tokens": table(ar_blocks, "decode_tokens")}


def summarize(points: Sequence[GridPoint], own, paired) -> tuple[Measurement, ...]:
    """Per point, its blocks' runs (``own[i][block][prompt]``, :class:`~real.run.session.RunResult`) and the ar
    runs paired with them (``paired[i]``) summarized."""
    from real.run.session import phase_breakdown
    from real.run.repeats import median, median_index

    out = []
    for point, own_blocks, ar_blocks in zip(points, own, paired):
        results = [merged(b) for b in own_blocks]
        steps = [r.decode_s / r.steps for r in results]
        tps = [r.tokens_per_s for r in results]
        median_run = results[median_index([r.decode_s for r in results])]
        proposed = sum(sum(x.proposed_per_step) for x in median_run.results)
        out.append(Measurement(
            point=point, step_s=median(steps), tokens_per_s=median(tps),
            tokens_per_step=median_run.mean_accepted_per_step,
            draft_passes_per_step=sum(x.draft_passes for x in median_run.results) / median_run.steps,
            step_samples=tuple(steps), tps_samples=tuple(tps),
            pairs=pairs_of(own_blocks, ar_blocks),
            phase_ms=phase_breakdown(median_run), verified_per_step=1.0 + proposed / median_run.steps))
    return tuple(out)
