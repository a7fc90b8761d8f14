"""What the real path's eager forward costs beyond its operators' rows, two ways:

- per launch (a CPU): the one-token forward of a model whose compute is negligible, timed whole, less a
  profile's kernel times of its operators, over the launches the profiled pricing counts (the eager launch
  cost ``hetspec calibrate --device cpu`` writes into every row, :mod:`real.validation.profiler.profile_device`);
- per model (``forward_rest`` rows, any device): the eager forward of each profiled model (random weights,
  :data:`REST_CONTEXT` cached tokens) at every profiled token count, timed whole, less what the profile
  prices for it. Operators timed one by one in a loop of their own run on hot caches and without the
  Python between them; inside a forward they do not. On the 2-core EPYC of docs/validation.md a 5-token
  forward of the small demo target took 5.47 ms where its rows add up to 4.92 ms (in torch's profiler its
  attention call took 67 % longer than its row, and the draft's GEMMs 20-30 % longer than in loops of their
  own); the target's rest grows with the token count.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import torch

from real.run.contention import guarded_batches
from real.run.repeats import median, rotation
from real.validation.calibration.microbench import PROBE_CONTEXT, forward_step, median_time, prefilled_cache

#: Cached tokens of the forwards behind the ``forward_rest`` rows (the smallest key count of the attention rows,
#: so the forward's attention is priced by its rows).
REST_CONTEXT = PROBE_CONTEXT
#: Untimed calls before each timed sample of a forward: at least this many, and for at least :data:`WARM_S`.
WARM_CALLS = 2
#: Seconds of untimed calls before each timed sample of a forward, so that the caches are back to the forward's
#: own working set. On a 2-core EPYC the small demo draft's one-token forward took 1.6, 1.1, 1.0, 0.8, 0.7 ms in its first calls
#: after a 512-token forward and 0.45-0.50 ms from about the tenth call on (8 ms): after two warm calls its
#: ``forward_rest`` row had read 0.28 ms where its operators' rows leave next to nothing.
WARM_S = 0.02


def forward_probe_s(calls: int, repeats: int) -> float:
    """Seconds of the real path's one-token forward (:func:`real.validation.calibration.microbench.probe_models`' target:
    hidden 64, compute negligible; :data:`~real.validation.calibration.microbench.PROBE_CONTEXT` cached tokens) on the
    CPU with the current torch threads, median of at least 5 repeats of ``calls`` calls."""
    from real.validation.calibration.microbench import _probe_model, _probe_step, probe_specs

    model = _probe_model(probe_specs()[0].n_layers)
    with torch.inference_mode():
        return median_time(_probe_step(model, False), max(repeats, 5), 1, inner=calls)


def eager_launch_in_forward(device, forward, floor_s: float = 0.0) -> tuple[float, float, float]:
    """(seconds per launch, kernel seconds, launches) of the profiled ``device``'s pricing of ``forward``
    (model, measured seconds): the measured forward less the profile's kernel times of its operators,
    over the launches the pricing counts (each covered operator's call once, each fallback operator's
    kernels; :func:`sim.op_timing.op_time`), at least ``floor_s`` (the bare dispatch of one operator: a
    launch inside the forward cannot cost less; a smaller rest means the kernels were timed at a faster
    moment of the machine than the forward)."""
    from sim.op_timing import PROFILE
    from sim.step_graph import build_step_graph
    from sim.step_timing import price_step

    model, seconds = forward
    priced = price_step(build_step_graph(model, 1, PROBE_CONTEXT), device)
    kernels = sum(p.time_s - p.timing.overhead_s * p.op.count for p in priced.ops)
    # a covered call launches once (its row's launch); a fallback operator its kernels at the device's launch
    launches = sum(p.op.count * (1.0 if p.source == PROFILE else p.timing.overhead_s / device.op_overhead_s)
                   for p in priced.ops)
    return max((seconds - kernels) / launches, floor_s, 0.0), kernels, launches


def warm_up(step: Callable[[], object], min_calls: int = WARM_CALLS, min_s: float = WARM_S,
            clock: Callable[[], float] = time.perf_counter) -> int:
    """Call ``step`` untimed at least ``min_calls`` times and until ``min_s`` seconds have passed; the calls made."""
    start, done = clock(), 0
    while done < min_calls or clock() - start < min_s:
        step()
        done += 1
    return done


def warmed_time(step: Callable[[], object], time_calls: Callable[[Callable[[], object], int], float],
                calls: int) -> float:
    """``time_calls(step, calls)`` after :func:`warm_up`: the forward as a loop of its own runs it (the rows'
    protocol). The forward of another token count or model just before it leaves the caches to another working
    set; a decode loop's re-warming after a verification is the host platform's to price (cache_rewarm)."""
    warm_up(step)
    return time_calls(step, calls)


def time_model_forwards(specs, device: torch.device, dtype: torch.dtype, tokens: Sequence[int],
                        time_calls: Callable[[Callable[[], object], int], float], calls: int, repeats: int,
                        tick: Callable[[int], None] | None = None, guard=None,
                        records: list | None = None) -> list[list[tuple[int, list[float]]]]:
    """Per model of ``specs``, (tokens, samples) of the eager forward of a random-weight model at each of
    ``tokens`` that fits its positions after :data:`REST_CONTEXT` cached tokens: ``time_calls(fn, calls)``
    seconds per call after untimed ones (:func:`warmed_time`), ``repeats`` samples interleaved over every model and
    token count (each repeat visits them all in :func:`real.run.repeats.rotation` order), so the models' forwards
    see the same machine and a profile prices a draft against its target as they run side by side. ``guard``
    (:class:`real.run.contention.Guard`): the samples taken in batches of about 2 s, a batch the guard's probe
    reads slow after taken again (:func:`real.run.contention.guarded_batches`); its records are appended to
    ``records`` when given. A model that does not fit the device's memory has none. ``tick(k)`` after ``k``
    samples kept (a progress bar's ``update``)."""
    from real.model.transformer import Transformer

    steps: list[tuple[int, int, Callable[[], object]]] = []    # (model index, tokens, step)
    with torch.inference_mode():
        for index, spec in enumerate(specs):
            fits = [t for t in tokens if REST_CONTEXT + t <= spec.max_position]
            if not fits:
                continue
            try:
                torch.manual_seed(0)
                with torch.device(device):
                    model = Transformer(spec).to(dtype=dtype).eval()
                cache = prefilled_cache(model, REST_CONTEXT, REST_CONTEXT + max(fits))
                made = [(index, t, forward_step(model, cache, t)) for t in fits]
                for _, _, step in made:
                    step()   # allocations, kernel selection
            except torch.OutOfMemoryError:
                continue
            steps += made
        order = [i for rep in range(repeats) for i in rotation(len(steps), rep)]
        samples, kept = guarded_batches(guard, order, lambda i: warmed_time(steps[i][2], time_calls, calls), tick=tick)
    if records is not None:
        records += kept
    by_step: list[list[float]] = [[] for _ in steps]
    for i, seconds in zip(order, samples):
        by_step[i].append(seconds)
    return [[(t, by_step[i]) for i, (index, t, _) in enumerate(steps) if index == m] for m in range(len(specs))]


def bracketed_forwards(before, after) -> list[tuple[int, float]]:
    """(tokens, seconds) of one model's forwards timed before and after the profile's operator rows
    (:func:`time_model_forwards` twice): the median of the samples of both at each token count, so a machine
    that drifts while the rows are measured moves the forwards as it moved the rows, then made non-decreasing
    in the token count (the isotonic fit to the medians, weighted by their samples). A forward of more new
    tokens after the same context does all the work of a shorter one and more, so a median below a shorter
    forward's is the machine's noise: on a 2-core EPYC the tiny demo target's rest beyond its rows read 494,
    265, 581, 433 us at 1, 2, 4, 8 tokens in one quick profile, which priced a 2-token verification below an
    ``ar`` step."""
    from scipy.optimize import isotonic_regression

    samples = {t: list(s) for t, s in before}
    for t, s in after:
        samples.setdefault(t, []).extend(s)
    counts = sorted((t, s) for t, s in samples.items() if s)
    if not counts:
        return []
    fitted = isotonic_regression([median(s) for _, s in counts], weights=[len(s) for _, s in counts]).x
    return [(t, float(x)) for (t, _), x in zip(counts, fitted)]


def forward_rest_rows(device, forwards, graphs: bool, context: int = REST_CONTEXT) -> list[tuple]:
    """Profile rows ``forward_rest`` of ``forwards`` ((spec, [(tokens, seconds)]) of :func:`bracketed_forwards`),
    for the profiled ``device`` in eager mode: what each forward took beyond the profile's price of it at
    ``context`` cached tokens, in ``eager_launch_us``, so that the profile prices a model it timed whole at
    what it measured whole. Negative where the forward was timed faster than its rows: the rows, each
    timed at its own moment, were timed at slower ones (on a shared 2-core EPYC the tiny demo draft's rows
    added up to more than its whole forward at every token count in one quick profile, and a rest kept at 0
    priced the draft 30 % dearer against its target than the two ran). A replayed graph (``graphs``) runs
    none of it."""
    from hwmodels.profile import in_mode
    from sim.step_graph import build_step_graph, forward_key
    from sim.step_timing import price_step

    eager = in_mode(device, "eager", "the forwards were timed eagerly")
    rows = []
    for spec, timed in forwards:
        for tokens, seconds in timed:
            priced = price_step(build_step_graph(spec, tokens, context), eager).total_s
            rows.append(("forward_rest", forward_key(spec), tokens, 0, 0.0, (seconds - priced) * 1e6,
                         0.0 if graphs else math.nan))
    return rows
