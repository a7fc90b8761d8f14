"""The measured half of ``hetspec validate``: real decoding of the grid on held-out evaluation prompts.

Every repeat decodes every grid point once over all evaluation prompts, in an order rotated from
repeat to repeat, so a slow drift of the machine (other processes, clocks) hits every point
alike; the first repeat of each point is preceded by an untimed warm-up. Reported per point: the
median over repeats of the mean step time (decode seconds / decode steps) and of the decode
throughput, the tokens per step (greedy decoding is deterministic, so it is the same in every
repeat), draft passes per step, and the per-phase time of the median repeat's trace.

**A fresh process per repeat** (``fresh_processes=True``, what ``hetspec validate`` does on a CPU): a
process keeps an offset of its own per configuration that its repeats share. Measured here on the demo
models (chain gamma = 4, 5, 6, 7 on 16 evaluation prompts, 3 interleaved repeats per process): within one
process the four steps held to 1-3 % over four re-measurements two minutes apart, even with every weight
copied to new memory in between (9.83 / 9.45 / 9.61 / 9.88 ms for gamma = 4), while four processes run one
after the other gave gamma = 5 at 9.95, 9.02, 9.16 and 9.97 ms and ranked gamma = 5 against gamma = 4
both ways. Repeats in one process measure that process's offsets three times; a repeat in a process of
its own (spawned, the models handed over pickled, its own warm-up per point) samples them, and the median
over repeats averages them out. What the offsets were came later: stretches of a minute or two in which the
cores were slowed from outside, so that the configurations a process measured then came out slow; the
contention guard (:mod:`real.run.contention`) now retakes those (docs/validation.md, "Contention from
outside").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from real.validation.grid import GridPoint


@dataclass(frozen=True)
class Measurement:
    point: GridPoint
    step_s: float                   # median over repeats of decode_s / steps
    tokens_per_s: float             # median over repeats of decode tokens / decode_s
    tokens_per_step: float
    draft_passes_per_step: float
    step_samples: tuple[float, ...]
    tps_samples: tuple[float, ...]
    phase_ms: dict                  # ms per step: draft, verify, accept, other (median repeat)
    verified_per_step: float        # tokens in each verification pass: proposed + 1 (the root)

    def to_json(self) -> dict:
        return {"method": self.point.method, "knob": self.point.knob, "value": self.point.value,
                "label": self.point.label, "step_ms": self.step_s * 1e3, "tokens_per_s": self.tokens_per_s,
                "tokens_per_step": self.tokens_per_step, "draft_passes_per_step": self.draft_passes_per_step,
                "verified_per_step": self.verified_per_step,
                "step_ms_samples": [s * 1e3 for s in self.step_samples], "tokens_per_s_samples": list(self.tps_samples),
                "phase_ms": self.phase_ms}


def measure_grid(models, points: Sequence[GridPoint], configs: Sequence, prompts: Sequence[Sequence[int]],
                 max_new_tokens: int, repeats: int, worker: str = "cpu",
                 tick: Callable[[], None] | None = None, fresh_processes: bool = False,
                 threads: int | None = None, guard=None, log: list | None = None) -> tuple[Measurement, ...]:
    """Decode ``prompts`` with every (point, config) ``repeats`` interleaved times; medians per point.
    ``fresh_processes``: each repeat in a process of its own with ``threads`` torch threads (module
    docstring); else all in this one, the first repeat of each point after a warm-up. ``guard`` and ``log``:
    :func:`real.run.repeats.interleaved_repeats`."""
    from real.run.repeats import interleaved_repeats

    payload = (models, list(points), list(configs), [list(p) for p in prompts], max_new_tokens, worker)
    return summarize(points, interleaved_repeats(len(points), repeats, _measure_point, payload, tick, fresh_processes,
                                                 threads, guard, log))


def summarize(points: Sequence[GridPoint], runs) -> tuple[Measurement, ...]:
    """Per point, its repeats' runs (``runs[i][rep]``, :class:`~real.run.session.RunResult`) summarized."""
    from real.run.compare import phase_breakdown
    from real.run.repeats import median, median_index

    out = []
    for point, results in zip(points, runs):
        steps = [r.decode_s / r.steps for r in results]
        tps = [r.tokens_per_s for r in results]
        median_run = results[median_index([r.decode_s for r in results])]
        proposed = sum(sum(x.proposed_per_step) for x in median_run.results)
        out.append(Measurement(
            point=point, step_s=median(steps), tokens_per_s=median(tps),
            tokens_per_step=median_run.mean_accepted_per_step,
            draft_passes_per_step=sum(x.draft_passes for x in median_run.results) / median_run.steps,
            step_samples=tuple(steps), tps_samples=tuple(tps), phase_ms=phase_breakdown(median_run),
            verified_per_step=1.0 + proposed / median_run.steps))
    return tuple(out)


def _measure_point(payload, i: int, _rep: int, first: bool):
    """One point's run (after a warm-up where this process has not run it before)."""
    from real.run.session import run_prompts

    models, points, configs, prompts, max_new_tokens, worker = payload
    return run_prompts(models, points[i].method, configs[i], prompts, max_new_tokens, warmup=first, worker=worker)
