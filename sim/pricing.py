"""The simulator's prices for callers outside it: what ``real/validation`` sets against real runs.

The strategies (:mod:`sim.strategies`) price whole decode steps; the parts a measurement must be
compared with piece by piece (one forward, the Medusa heads alone) are priced here, behind names that
stay put while the strategies' internals change. (A Dovetail round's drafter passes, which only the
heterogeneous probes price, are :func:`sim.strategies.dovetail.tree_draft_passes`.)
"""

from __future__ import annotations

from hwmodels.platform import Platform
from sim.model_spec import ModelSpec


def forward_seconds(model: ModelSpec, platform: Platform, device: str, tokens, context, batch=1):
    """Seconds of one forward of ``model`` on ``device`` alone: ``tokens`` new tokens over ``context``
    cached (broadcast over arrays)."""
    from sim.closed_form import step_seconds

    return step_seconds(model, platform, device, tokens, context, batch)


def medusa_heads_seconds(model: ModelSpec, platform: Platform, device: str, rows: int, heads: int,
                         batched: bool = True) -> float:
    """Seconds of ``heads`` Medusa heads over ``rows`` hidden states on ``device`` alone (``batched``:
    every head's projection in one batched GEMM, as HetSpec's real heads run)."""
    from sim.strategies.base import Problem
    from sim.strategies.medusa import heads_seconds

    return heads_seconds(Problem(model=model, platform=platform), device, rows, heads, batched=batched)

