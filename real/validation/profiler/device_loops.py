"""HetSpec's decode loops timed on a profiled device, and the loop costs they give its platform.

``hetspec calibrate --device cuda:N`` ends with them: the calibration's probe models
(:func:`real.validation.calibration.microbench.probe_models`) decode on the GPU in the profile's dtype with CUDA graphs,
as a validation there runs its models, and what their steps take beyond the profile's price of their
forwards and heads becomes the platform's ``loop_costs`` of the device
(:func:`real.validation.calibration.host_costs.fit_host_costs`). A CPU's loop costs are the calibrated host platform's.
"""

from __future__ import annotations

import sys

import torch


def device_loops(prof, repeats: int, progress: bool = True) -> tuple:
    """HetSpec's decode loops timed on the probe models placed on ``prof``'s device (``prof``: a
    :class:`real.validation.profiler.profile_device.DeviceProfile`), in its dtype, with CUDA graphs where the device
    has them, ``repeats`` interleaved repeats (:func:`real.validation.calibration.microbench.decode_loop_samples`)."""
    from real.model.placement import Placement
    from real.validation.calibration.microbench import decode_loop_samples

    placement = Placement(prof.device, prof.dtype, graphs=prof.device.startswith("cuda"))
    if progress:
        print(f"timing the decode loops on probe models ({placement.describe()}, {repeats} repeats)",
              file=sys.stderr, flush=True)
    return decode_loop_samples(torch.get_num_threads(), repeats, placement)


def device_loop_costs(device, prof, command: str, date: str):
    """The loop costs (:class:`hwmodels.platform.LoopCosts`) of ``device``, the profiled device as written,
    fitted from ``prof.loops`` (written by ``command`` on ``date``); None without loops."""
    from real.validation.calibration.host_costs import loop_costs_of

    if not prof.loops:
        return None
    return loop_costs_of(device, prof.loops, f"median of {prof.loop_repeats} interleaved repeats",
                         f"by `{command}`", f"on {prof.name} ({prof.device}), {prof.dtype}, {date}", dtype=prof.dtype)
