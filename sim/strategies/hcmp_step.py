"""The data of an ``hcmp`` split step: each operator's two sides (:class:`Part`), the groups they form between
page syncs (:class:`Group`), and the whole step (:class:`SplitStep`), priced at any partition ratios at once.

:mod:`sim.strategies.hcmp` builds a split step from a model's step graph; this module prices it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.concurrent_parts import concurrent_seconds
from sim.strategies.hcmp_threads import python_share

@dataclass(frozen=True)
class Part:
    """One device's part of one operator (one instance; a group's ``count`` multiplies it).

    With ``split`` the part takes share f of the operator (f = r on the primary, 1 - r on the
    secondary): compute ``f * compute_s``, bytes ``act0_bytes + f * bytes1``, FLOPs ``f * flops``.
    A whole part (``split`` False: replicated, or an attention part already sized by its own
    split) takes f = 1. ``wkv_bytes`` is the weight + KV-cache share of ``bytes1`` (what a split
    conserves); the rest is activations.
    """

    op: str
    compute_s: float
    fixed_s: float
    act0_bytes: float
    bytes1: float
    flops: float
    wkv_bytes: float = 0.0
    split: bool = True

    def share(self, f):
        return f if self.split else np.ones_like(np.asarray(f, dtype=float))


#: The side of a group that runs on one device only.
EMPTY = Part(op="", compute_s=0.0, fixed_s=0.0, act0_bytes=0.0, bytes1=0.0, flops=0.0, split=False)


@dataclass(frozen=True)
class Group:
    """Two parts that start together (primary, secondary); ``count`` instances, each followed by a
    barrier; ``syncs`` page syncs follow the group (one per layer for a layer operator, one for
    all the Medusa heads together, 0 where the next operator reads only what its device wrote)."""

    name: str
    primary: Part
    secondary: Part
    count: int
    syncs: int
    phase: str = "verify"


@dataclass(frozen=True)
class SplitStep:
    """The groups of one split step and what prices them (built once per configuration).

    ``sync_s`` is a page sync's price; on a calibrated host it is a barrier as met between two threads that
    run nothing but Python, of which ``bare_sync_s`` (the barrier's own round trip) is paid always and the rest,
    like ``serial`` (the two sides' Python taking turns, in units of the smaller side's fixed costs), only in
    the share of the time the sides spend in Python (:func:`sim.strategies.hcmp_threads.python_share`)."""

    primary: str
    secondary: str
    groups: tuple[Group, ...]
    sync_s: float
    serial: float = 0.0     # share of the smaller side's fixed costs the two sides cannot overlap (one interpreter)
    bare_sync_s: float | None = None    # the barrier without interpreter-lock contention (None: sync_s)

    @property
    def n_syncs(self) -> int:
        return sum(g.syncs for g in self.groups)

    @property
    def counts(self) -> np.ndarray:
        """Instances of every group in the step."""
        return np.array([g.count for g in self.groups], dtype=float)

    def arrays(self, ratios: np.ndarray):
        """``fixed``, ``compute``, ``nbytes`` of every group at every ratio: ``[n_ratios, n_groups, 2]``."""
        r = np.asarray(ratios, dtype=float)[:, None]
        shares = (r, 1.0 - r)
        out = []
        for field in ("fixed", "compute", "nbytes"):
            cols = []
            for side, f in zip(("primary", "secondary"), shares):
                parts = [getattr(g, side) for g in self.groups]
                if field == "fixed":
                    v = np.array([p.fixed_s for p in parts])[None, :] * np.ones_like(f)
                else:
                    frac = np.stack([np.broadcast_to(p.share(f[:, 0]), f[:, 0].shape) for p in parts], axis=-1)
                    if field == "compute":
                        v = frac * np.array([p.compute_s for p in parts])[None, :]
                    else:
                        v = np.array([p.act0_bytes for p in parts])[None, :] + frac * np.array([p.bytes1 for p in parts])[None, :]
                cols.append(v)
            out.append(np.stack(cols, axis=-1))
        return out

    def priced(self, platform, ratios) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per group at each ratio: both sides' time (the longer side), what the two threads' Python taking turns
        adds, and the page syncs after it: three ``[n_ratios, n_groups]`` arrays of seconds per instance
        (syncs: per group, all its barriers)."""
        fixed, compute, nbytes = self.arrays(np.atleast_1d(np.asarray(ratios, dtype=float)))
        sides = concurrent_seconds(platform, (self.primary, self.secondary), fixed, compute, nbytes)
        python = python_share(fixed, sides)
        serial = self.serial * fixed.min(axis=-1) * python
        bare = self.sync_s if self.bare_sync_s is None else self.bare_sync_s
        syncs = np.array([g.syncs for g in self.groups], dtype=float)[None, :]
        return sides.max(axis=-1), serial, syncs * (bare + (self.sync_s - bare) * python)

    def seconds(self, platform, ratios) -> np.ndarray:
        """Step seconds at each ratio in (0, 1) (the split path; endpoints are the caller's)."""
        ends, serial, syncs = self.priced(platform, ratios)
        return ((ends + serial) * self.counts).sum(axis=-1) + syncs.sum(axis=-1)
