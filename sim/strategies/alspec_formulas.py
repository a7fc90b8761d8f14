"""The formulas of "Attention-Level Speculation" (Cai, Vora, Zhang, O'Connor, Jeffrey; ICML 2025).

Closed form (App. F): with L layers, ``per_layer`` = every operator of a layer except flash
decode, ``FD`` / ``SFD_S`` = the sender's attention, ``SFD_R`` = the time until the receiver
holds the speculated partial,

- full TP:  ``fixed + L * (per_layer + FD)``
- SP at r:  ``fixed + floor(L r) * (SFD_R + max(SFD_S - SFD_R, per_layer))
  + ceil(L (1 - r)) * (per_layer + SFD_S)``  (``layer_rounding="floor"``, the paper's upper
  bound with r a multiple of 1/L), or with ``L r`` fractional hits (``"expected"``: the mean
  over per-layer draws; with ``SFD_R = 0`` it is the form of the paper's GPU projection, §5.3,
  Table 3: ``1/TP4_tok_s - L r attn``). :func:`app_f_latency` is that formula alone.

The functions are vectorised over the time arguments; the strategy (:mod:`sim.strategies.alspec`)
feeds them roofline times, the reproduction (:mod:`sim.reproduce.alspec`) the paper's tables.
"""

from __future__ import annotations

import math

import numpy as np

from hwmodels.errors import HetSpecError, UnknownNameError

#: How the hit count is rounded (App. F footnote 5: "we take r as a multiple of 1/32").
LAYER_ROUNDINGS = ("floor", "expected")


def layer_hits(layers: int, hit_rate: float, rounding: str = "floor") -> float:
    """Layers whose speculation hits: ``floor(L r)`` (App. F) or ``L r`` (expected)."""
    if rounding not in LAYER_ROUNDINGS:
        raise UnknownNameError("layer rounding", rounding, LAYER_ROUNDINGS)
    if not 0.0 <= hit_rate <= 1.0:
        raise HetSpecError(f"hit rate must be in [0, 1] (got {hit_rate})")
    exact = layers * hit_rate
    # 1e-9 absorbs float round-off of r = k / L (e.g. 0.875 * 32)
    return float(math.floor(exact + 1e-9)) if rounding == "floor" else exact


def app_f_latency(fixed_s, per_layer_s, sfd_s_s, sfd_r_s, hit_rate, layers: int, rounding: str = "floor"):
    """ALSpec App. F token latency (vectorised over the time arguments).

    ``fixed + hits * (SFD_R + max(SFD_S - SFD_R, per_layer)) + (L - hits) * (per_layer + SFD_S)``
    with ``hits = floor(L r)`` (``rounding="floor"``; then ``L - hits = ceil(L (1 - r))``, the
    paper's form) or ``L r``. At ``r = 0`` it is the full-TP formula ``fixed + L (per_layer + FD)``.
    """
    hits = layer_hits(layers, hit_rate, rounding)
    fixed, per_layer = np.asarray(fixed_s, float), np.asarray(per_layer_s, float)
    sfd_s, sfd_r = np.asarray(sfd_s_s, float), np.asarray(sfd_r_s, float)
    out = fixed + hits * (sfd_r + np.maximum(sfd_s - sfd_r, per_layer)) + (layers - hits) * (per_layer + sfd_s)
    return float(out) if out.ndim == 0 else out


def tp_latency(fixed_s, per_layer_s, fd_s, layers: int):
    """ALSpec App. F full tensor parallelism: ``fixed + L * (per_layer + FD(K))``."""
    out = np.asarray(fixed_s, float) + layers * (np.asarray(per_layer_s, float) + np.asarray(fd_s, float))
    return float(out) if out.ndim == 0 else out


def projection_latency(tp_tok_s, attn_s, hit_rate: float, layers: int):
    """The paper's GPU projection (§5.3, Table 3; the paper prints its results, not the formula):
    ``1 / TP_tok_s - L r attn``.

    It is :func:`app_f_latency` with fractional hits, ``SFD_R = 0`` and attention shorter than the
    rest of the layer: every hit hides its layer's attention completely.
    """
    return 1.0 / np.asarray(tp_tok_s, float) - layers * hit_rate * np.asarray(attn_s, float)
