"""Lossless speculative sampling (Leviathan et al. 2023; Chen et al. 2023; Dovetail §II).

A draft proposes ``x_1..x_g``, each drawn from its distribution ``q_i``; one target pass gives
``p_1..p_{g+1}``. For i = 1..g: accept ``x_i`` with probability ``min(1, p_i(x_i) / q_i(x_i))``; at the
first rejection draw the replacement from the *residual* ``norm(max(0, p_i - q_i))`` and stop. If all
g are accepted, draw a bonus token from ``p_{g+1}``. Every emitted token is then distributed exactly as
if it had been sampled from the target (the distributions ``p`` already include temperature/top-p).
"""

from __future__ import annotations

import torch
from torch import Tensor

#: Below this total mass the residual is treated as empty (p == q up to rounding); the rejection
#: that led there had probability ~0, and we fall back to sampling from p itself.
RESIDUAL_EPS = 1e-12


def residual_distribution(p: Tensor, q: Tensor) -> Tensor:
    """``norm(max(0, p - q))`` over the last dimension (``p`` where the residual is empty)."""
    r = (p - q).clamp_min(0.0)
    mass = r.sum(-1, keepdim=True)
    return torch.where(mass > RESIDUAL_EPS, r / mass.clamp_min(RESIDUAL_EPS), p)


def speculative_sample(p: Tensor, q: Tensor, draft_tokens: Tensor,
                       generator: torch.Generator | None = None) -> tuple[int, int]:
    """Accept a prefix of ``draft_tokens`` and choose the next token.

    p: ``[g + 1, vocab]`` target probabilities at the g draft positions and after the last one.
    q: ``[g, vocab]`` draft probabilities the draft tokens were drawn from. draft_tokens: ``[g]``.
    Returns ``(n_accepted, next_token)``: the first ``n_accepted`` drafts are kept and followed by
    ``next_token`` (the residual draw at the first rejection, or the bonus draw from ``p[g]``).
    """
    g = draft_tokens.shape[0]
    idx = torch.arange(g, device=p.device)
    p_x = p[idx, draft_tokens]                         # [g] target prob of each draft token
    q_x = q[idx, draft_tokens]                         # [g] draft prob of each draft token
    u = torch.rand(g, generator=generator, device=p.device)
    # accept iff u < p/q, written without division: u * q < p (q_x > 0 since x was drawn from q)
    rejected = (u * q_x >= p_x).nonzero()
    if rejected.numel() == 0:
        return g, int(torch.multinomial(p[g], 1, generator=generator))
    n = int(rejected[0, 0])
    return n, int(torch.multinomial(residual_distribution(p[n], q[n]), 1, generator=generator))
