"""The measured half of ``hetspec validate``: real decoding of the grid on held-out evaluation prompts.

**The paired protocol.** Every configuration of the grid is timed in short A/B blocks with ``ar``
(:func:`real.run.repeats.paired_blocks`): a block decodes the evaluation prompts with ``ar`` and with the
configuration back to back, in this process, in an order that alternates from block to block; every
configuration gets ``repeats`` blocks, visited in an order rotated by repeat. On a shared machine two runs
back to back slow down together, so their ratio (the configuration's speedup over ``ar``) holds while the
absolute speed moves; :mod:`real.validation.verdict` judges the ratios and sets the absolute figures beside
the spread of the ``ar`` timings. The first run of each configuration is preceded by an untimed warm-up.

Reported per point: the median over its blocks of the mean step time (decode seconds / decode steps) and
of the decode throughput, the same of the ``ar`` runs paired with it, the tokens per step (greedy decoding
is deterministic, so the same in every block), draft passes per step, and the per-phase time of the median
block's trace.
"""

from __future__ import annotations

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
    ar_step_samples: tuple[float, ...]     # the ar runs of the same blocks (aligned)
    ar_tps_samples: tuple[float, ...]
    phase_ms: dict                  # ms per step: draft, verify, accept, other (median block)
    verified_per_step: float        # tokens in each verification pass: proposed + 1 (the root)


def measure_grid(models, points: Sequence[GridPoint], configs: Sequence, prompts: Sequence[Sequence[int]],
                 max_new_tokens: int, repeats: int, worker: str = "cpu",
                 tick: Callable[[], None] | None = None) -> tuple[Measurement, ...]:
    """Decode ``prompts`` with every (point, config) in ``repeats`` A/B blocks with the grid's ``ar`` point
    (module docstring); ``tick`` after every block."""
    from real.run.repeats import paired_blocks
    from real.run.session import run_prompts

    baseline = next((i for i, p in enumerate(points) if p.method == "ar"), None)
    if baseline is None:
        raise HetSpecError("the validation grid needs its ar point: every configuration is timed against it")
    prompts = [list(p) for p in prompts]

    def run(i: int, first: bool):
        return run_prompts(models, points[i].method, configs[i], prompts, max_new_tokens, warmup=first, worker=worker)

    own, paired = paired_blocks(len(points), baseline, repeats, run, tick)
    return summarize(points, own, paired)


def summarize(points: Sequence[GridPoint], own, paired) -> tuple[Measurement, ...]:
    """Per point, its blocks' runs (``own[i]``, :class:`~real.run.session.RunResult`) and the ar runs paired
    with them (``paired[i]``) summarized."""
    from real.run.session import phase_breakdown
    from real.run.repeats import median, median_index

    out = []
    for point, results, ars in zip(points, own, paired):
        steps = [r.decode_s / r.steps for r in results]
        tps = [r.tokens_per_s for r in results]
        median_run = results[median_index([r.decode_s for r in results])]
        proposed = sum(sum(x.proposed_per_step) for x in median_run.results)
        out.append(Measurement(
            point=point, step_s=median(steps), tokens_per_s=median(tps),
            tokens_per_step=median_run.mean_accepted_per_step,
            draft_passes_per_step=sum(x.draft_passes for x in median_run.results) / median_run.steps,
            step_samples=tuple(steps), tps_samples=tuple(tps),
            ar_step_samples=tuple(r.decode_s / r.steps for r in ars), ar_tps_samples=tuple(r.tokens_per_s for r in ars),
            phase_ms=phase_breakdown(median_run), verified_per_step=1.0 + proposed / median_run.steps))
    return tuple(out)
