"""What ``hcmp``'s split step costs on two worker threads of one process (a calibrated host).

HetSpec's real split step (:mod:`real.hetero.split_model`) runs its two sides on two Python threads.
``hetspec calibrate``'s split probe (:mod:`real.validation.split_probe`) measures what that costs beyond
the operators, phase by phase, and writes it as the single-thread workers' loop costs (microseconds):

- ``hcmp_sync``: one :class:`~real.hetero.workers.PairBarrier` as the split step of the probe meets it,
  two threads that run nothing but Python (replaces the unified link's latency as the price of a page sync);
  ``hcmp_bare_sync``: the same barrier's bare round trip, no other Python running;
- ``hcmp_layer`` and ``hcmp_merge_layer``: one side's fixed costs of a split layer, the online-softmax
  merge apart (measured in the cache; a model read from DRAM pays ``op_overhead_us / cache_op_overhead_us``
  as much, as every operator does);
- ``hcmp_pair_layer``: the same layer's fixed costs with both sides running at once: one interpreter runs
  one thread's Python at a time, so in every group the two sides' fixed costs do not overlap as their
  compute does: the group takes :func:`serial_share` times the smaller side's fixed costs more;
- ``hcmp_step``: the split forward and the split heads handed to the secondary worker and back.

The probe runs a model too small to compute (hidden 64), so its two threads do nothing but Python and
every hand-over of the interpreter lock is a wait. A real split layer spends most of its time in kernels,
which run without the lock: a side that wants the lock back waits only if the other side is in Python at
that moment. So the turn-taking (``hcmp_pair_layer`` beyond one side) and the barrier beyond its bare round
trip (``hcmp_sync - hcmp_bare_sync``) are paid in proportion to :func:`python_share`, the share of a group's
time its two sides spend in Python (their fixed costs); 1 on the probe, where they were measured.

Platforms without them (every preset) price the split step as before.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

#: Loop costs of the split step on two worker threads (microseconds; hetspec calibrate's split probe).
SPLIT_COST_KEYS = ("hcmp_step", "hcmp_sync", "hcmp_bare_sync", "hcmp_layer", "hcmp_merge_layer", "hcmp_pair_layer")


def split_costs(platform, primary: str) -> dict[str, float]:
    """The split step's calibrated costs on two worker threads (seconds; empty where the platform has none)."""
    costs = platform.loop_costs_us(primary)
    return {k: 1e-6 * costs[k] for k in SPLIT_COST_KEYS if k in costs}


def serial_share(costs: dict) -> float:
    """What the two sides' fixed costs at once cost beyond one side's, in units of the smaller side's:
    ``pair / side - 1`` (>= 0; 0: both sides' Python at once as fast as one alone; 1: one after the other;
    above 1: taking turns on the interpreter lock costs more than the turns themselves, each hand-over of
    the lock waking the other thread)."""
    side = costs.get("hcmp_layer", 0.0) + costs.get("hcmp_merge_layer", 0.0)
    if "hcmp_pair_layer" not in costs or side <= 0:
        return 0.0
    return float(max(costs["hcmp_pair_layer"] / side - 1.0, 0.0))


def python_share(fixed: np.ndarray, sides: np.ndarray) -> np.ndarray:
    """The share of a group's time its two sides spend in Python: each side's fixed costs over its time in the
    group (``fixed`` and ``sides``: ``[..., 2]``), the mean of the two sides (0 for a side with nothing to do)."""
    share = np.divide(fixed, sides, out=np.zeros_like(fixed, dtype=float), where=sides > 0)
    return np.clip(share, 0.0, 1.0).mean(axis=-1)


def calibrated_layer_fixed(problem, groups: list, layer_ops: set, costs: dict, devices: tuple[str, str]) -> list:
    """Each side's fixed costs of a split layer as measured (``hcmp_layer`` + ``hcmp_merge_layer``, scaled to
    the device's fixed cost per operator of a model read from DRAM): the merge on the merge group, the rest
    over the layer's other groups in proportion to their operators' fixed costs. Unchanged without
    ``hcmp_layer``."""
    if "hcmp_layer" not in costs:
        return list(groups)
    out = list(groups)
    for side, name in zip(("primary", "secondary"), devices):
        dev = problem.platform.device(name)
        scale = dev.op_overhead_s / dev.bare_cache_overhead_s
        rest = [i for i, g in enumerate(out) if g.name in layer_ops and g.name != "softmax_merge"]
        priced = sum(getattr(out[i], side).fixed_s for i in rest)
        factor = costs["hcmp_layer"] * scale / priced if priced > 0 else 0.0
        for i, g in enumerate(out):
            part = getattr(g, side)
            if g.name == "softmax_merge":
                out[i] = replace(g, **{side: replace(part, fixed_s=costs.get("hcmp_merge_layer", 0.0) * scale)})
            elif i in rest:
                out[i] = replace(g, **{side: replace(part, fixed_s=part.fixed_s * factor)})
    return out
