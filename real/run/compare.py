"""Compare decode methods in one run: same prompts, interleaved repeats, medians.

``hetspec run --compare ar,medusa,draft-tree --preset small`` calls :func:`compare`. Each repeat
decodes every prompt with every method in turn (order rotated by prompt and repeat), so drifts of
the shared machine's load (other processes, thermal state) hit every method alike; the reported
throughput of a method is the median over repeats, and its speedup is the ratio of medians against
the first method listed.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from tqdm.auto import tqdm

from hwmodels.errors import HetSpecError
from real.decode import decoder
from real.decode.common import Clock
from real.model.packing import layout_for
from real.model.placement import place_models
from real.run.checkpoint_models import load_run_models
from real.run.demo_run import request_config
from real.run.repeats import interleaved, median_index
from real.run.request import RunRequest
from real.run.session import (
    RunResult,
    config_summary,
    evaluation_prompts,
    forward_tokens,
    generator,
    phase_breakdown,
    placement_of,
    run_prompts,
    torch_threads,
)


@dataclass(frozen=True)
class MethodTiming:
    method: str
    config: dict
    tokens_per_s: tuple[float, ...]          # one per repeat
    step_s: tuple[float, ...]                # mean decode step time per repeat
    mean_accepted_per_step: float
    draft_passes_per_step: float
    ids: tuple[tuple[int, ...], ...]
    phase_ms_per_step: dict[str, float]      # from the median repeat's trace; "other" = untraced time

    @property
    def median_tokens_per_s(self) -> float:
        return statistics.median(self.tokens_per_s)

    @property
    def median_step_s(self) -> float:
        return statistics.median(self.step_s)


@dataclass(frozen=True)
class Comparison:
    baseline: str
    timings: tuple[MethodTiming, ...]
    repeats: int
    placement: str = "cpu fp32"          # device and dtype the methods ran on

    def speedup(self, method: str) -> float:
        base = self._get(self.baseline).median_tokens_per_s
        return self._get(method).median_tokens_per_s / base if base > 0 else 0.0

    def _get(self, method: str) -> MethodTiming:
        return next(t for t in self.timings if t.method == method)

    def same_tokens(self, method: str) -> bool:
        """Whether ``method`` generated exactly the baseline's tokens on every prompt."""
        return self._get(method).ids == self._get(self.baseline).ids

    def to_json(self) -> dict:
        return {
            "baseline": self.baseline, "repeats": self.repeats, "placement": self.placement,
            "methods": [{
                "method": t.method, "config": t.config,
                "median_tokens_per_s": t.median_tokens_per_s, "tokens_per_s": list(t.tokens_per_s),
                "median_step_ms": t.median_step_s * 1e3,
                "mean_accepted_per_step": t.mean_accepted_per_step,
                "draft_passes_per_step": t.draft_passes_per_step, "phase_ms_per_step": t.phase_ms_per_step,
                "speedup": self.speedup(t.method), "same_tokens_as_baseline": self.same_tokens(t.method),
            } for t in self.timings],
        }

    def table(self) -> str:
        lines = [f"{'method':<11} {'tok/s':>8} {'speedup':>8} {'step ms':>8} {'tok/step':>9} "
                 f"{'draft/step':>10} {'ms/step: draft':>14} {'verify':>7} {'accept':>7} {'other':>6}"
                 f"  same tokens as {self.baseline}"]
        for t in self.timings:
            ph = t.phase_ms_per_step
            lines.append(f"{t.method:<11} {t.median_tokens_per_s:8.1f} {self.speedup(t.method):7.2f}x "
                         f"{t.median_step_s * 1e3:8.2f} {t.mean_accepted_per_step:9.2f} "
                         f"{t.draft_passes_per_step:10.2f} {ph['draft']:14.2f} {ph['verify']:7.2f} "
                         f"{ph['accept']:7.2f} {ph['other']:6.2f}  {'yes' if self.same_tokens(t.method) else 'no'}")
        return "\n".join(lines)


def compare(requests: list[RunRequest], repeats: int = 3, progress: bool = True) -> Comparison:
    """Time every request's method on the same evaluation prompts, ``repeats`` interleaved times.

    Interleaving is per prompt: each prompt is decoded by every method in turn (order rotated by
    prompt and repeat) before the next prompt, so a change in the machine's load within a repeat
    hits all methods alike. A repeat's throughput of a method is its tokens over its decode seconds
    on all prompts.
    """
    if repeats < 1:
        raise HetSpecError(f"--repeats must be >= 1, got {repeats}")
    first = requests[0]
    placement = placement_of(first)          # every request carries the same --device/--dtype/--graphs
    loaded = load_run_models(first.preset, progress, paths=first.model_paths)
    # each method's models in the weight layout for its forwards (one copy per distinct layout)
    bundles: dict[str, object] = {}
    models_of = []
    for r in requests:
        tokens = forward_tokens(r)
        key = layout_for(placement.device.split(":")[0], tokens)
        if key not in bundles:
            bundles[key] = place_models(loaded, placement, target_tokens=tokens)
        models_of.append(bundles[key])
    prompts = evaluation_prompts(loaded, first)
    configs = [request_config(r, m) for r, m in zip(requests, models_of)]
    decoders = [decoder(r.method) for r in requests]
    n = len(requests)
    with torch_threads(first.threads):
        for i in range(n):   # untimed warm-up of every method
            run_prompts(models_of[i], requests[i].method, configs[i], prompts[:1], first.max_new_tokens,
                        seed=first.seed, warmup=True)
        clocks = [[Clock() for _ in range(repeats)] for _ in requests]

        def measure(i: int, rep: int, j: int):
            return decoders[i].generate(models_of[i], prompts[j], first.max_new_tokens, configs[i], clocks[i][rep],
                                        generator(models_of[i], first.seed + j))

        with tqdm(total=n * repeats * len(prompts), desc="compare", unit="decode",
                  disable=None if progress else True, leave=False) as bar:
            decoded = interleaved(n, repeats, measure, rounds=len(prompts), tick=bar.update)
    runs = [[RunResult(method=requests[i].method, config=config_summary(configs[i]), results=tuple(decoded[i][rep]),
                       records=tuple(clocks[i][rep].records)) for rep in range(repeats)] for i in range(n)]
    timings = []
    for request, results in zip(requests, runs):
        last = results[median_index([r.tokens_per_s for r in results])]   # the median repeat
        timings.append(MethodTiming(
            method=request.method, config=last.config,
            tokens_per_s=tuple(r.tokens_per_s for r in results),
            step_s=tuple(r.decode_s / r.steps for r in results),
            mean_accepted_per_step=last.mean_accepted_per_step,
            draft_passes_per_step=sum(x.draft_passes for x in last.results) / last.steps,
            ids=tuple(x.ids for x in last.results), phase_ms_per_step=phase_breakdown(last)))
    return Comparison(baseline=requests[0].method, timings=tuple(timings), repeats=repeats, placement=placement.describe())
