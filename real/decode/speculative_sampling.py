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


def speculative_sample_tensors(p: Tensor, q: Tensor, draft_tokens: Tensor,
                               generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Accept a prefix of ``draft_tokens`` and choose the next token, on the device (no read-back).

    p: ``[g + 1, vocab]`` target probabilities at the g draft positions and after the last one.
    q: ``[g, vocab]`` draft probabilities the draft tokens were drawn from. draft_tokens: ``[g]``.
    Returns ``(n_accepted, next_token)`` as ``[1]`` long tensors: the first ``n_accepted`` drafts are
    kept and followed by ``next_token`` (the residual draw at the first rejection, or the bonus draw
    from ``p[g]``). ``generator`` must live on ``p``'s device.
    """
    g = draft_tokens.shape[0]
    idx = torch.arange(g, device=p.device)
    p_x = p[idx, draft_tokens]                         # [g] target prob of each draft token
    q_x = q[idx, draft_tokens]                         # [g] draft prob of each draft token
    u = torch.rand(g, generator=generator, device=p.device)
    # accept iff u < p/q, written without division: u * q < p (q_x > 0 since x was drawn from q)
    accepted = (u * q_x < p_x).int().cumprod(0).sum().view(1)             # first rejection, or g
    p_n = p.index_select(0, accepted)[0]
    q_n = torch.cat([q, torch.zeros_like(p[:1])]).index_select(0, accepted)[0]
    # the residual at a rejection; p[g] itself when all were accepted (the same draw as before)
    dist = torch.where(accepted < g, residual_distribution(p_n, q_n), p_n)
    return accepted, torch.multinomial(dist, 1, generator=generator)


def speculative_sample(p: Tensor, q: Tensor, draft_tokens: Tensor,
                       generator: torch.Generator | None = None) -> tuple[int, int]:
    """:func:`speculative_sample_tensors` read back: ``(n_accepted, next_token)`` as ints."""
    n, token = speculative_sample_tensors(p, q, draft_tokens, generator)
    return int(n), int(token)
