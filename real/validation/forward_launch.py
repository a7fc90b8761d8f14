"""What one operator launch costs inside the real path's eager forward on a CPU: the one-token forward of a
model whose compute is negligible, timed whole, less a profile's kernel times of its operators, over the
launches the profiled pricing counts (the eager launch cost ``hetspec calibrate --device cpu`` writes into
every row, :mod:`real.validation.profile_device`)."""

from __future__ import annotations

import torch

from real.validation.microbench import PROBE_CONTEXT, median_time


def forward_probe_s(calls: int, repeats: int) -> float:
    """Seconds of the real path's one-token forward (:func:`real.validation.microbench.probe_models`' target:
    hidden 64, compute negligible; :data:`~real.validation.microbench.PROBE_CONTEXT` cached tokens) on the
    CPU with the current torch threads, median of at least 5 repeats of ``calls`` calls."""
    from real.validation.microbench import _probe_model, _probe_step, probe_specs

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
