"""Speculative sampling keeps the target distribution — and the check can tell a wrong residual apart."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from real.decode.common import Sampling, probs_from_logits
from real.decode.speculative_sampling import residual_distribution, speculative_sample

# A small vocabulary where the draft over- and under-estimates different tokens.
P_TARGET = torch.tensor([
    [0.05, 0.40, 0.10, 0.25, 0.15, 0.05],
    [0.30, 0.05, 0.05, 0.20, 0.10, 0.30],
    [0.10, 0.10, 0.30, 0.10, 0.20, 0.20],   # bonus position
])
Q_DRAFT = torch.tensor([
    [0.30, 0.20, 0.20, 0.10, 0.10, 0.10],
    [0.10, 0.40, 0.05, 0.05, 0.30, 0.10],
])
DRAWS = 12000
#: p-value below which the emitted distribution is declared different from the target's.
REJECT_P = 1e-4


def emitted_tokens(sampler, draws: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Run ``draws`` speculative steps with γ = 2 drafts drawn from ``Q_DRAFT``.

    Returns the first emitted token of every step and the second emitted token of the steps that
    emit at least two (-1 elsewhere). ``sampler(p, q, drafts, generator) -> (n_accepted, next)``.
    """
    gen = torch.Generator().manual_seed(seed)
    first, second = np.empty(draws, dtype=np.int64), np.full(draws, -1, dtype=np.int64)
    for i in range(draws):
        drafts = torch.multinomial(Q_DRAFT, 1, generator=gen)[:, 0]            # [2]
        n, nxt = sampler(P_TARGET, Q_DRAFT, drafts, gen)
        out = drafts[:n].tolist() + [nxt]
        first[i] = out[0]
        if len(out) > 1:
            second[i] = out[1]
    return first, second


def distribution_check(sampler, seed: int = 0) -> float:
    """Smallest chi-square p-value of the emitted tokens against the target's rows 0 and 1."""
    first, second = emitted_tokens(sampler, DRAWS, seed)
    values = []
    for tokens, row in ((first, 0), (second[second >= 0], 1)):
        observed = np.bincount(tokens, minlength=P_TARGET.shape[1])
        expected = P_TARGET[row].double().numpy()
        values.append(chisquare(observed, expected / expected.sum() * len(tokens)).pvalue)
    return min(values)


def wrong_residual_from_target(p, q, drafts, generator):
    """A common bug: on rejection, resample from p itself instead of norm(max(0, p - q))."""
    g = drafts.shape[0]
    for i in range(g):
        if torch.rand(1, generator=generator) * q[i, drafts[i]] >= p[i, drafts[i]]:
            return i, int(torch.multinomial(p[i], 1, generator=generator))
    return g, int(torch.multinomial(p[g], 1, generator=generator))


def wrong_residual_swapped(p, q, drafts, generator):
    """Another bug: the residual taken the wrong way round, norm(max(0, q - p))."""
    g = drafts.shape[0]
    for i in range(g):
        if torch.rand(1, generator=generator) * q[i, drafts[i]] >= p[i, drafts[i]]:
            return i, int(torch.multinomial(residual_distribution(q[i], p[i]), 1, generator=generator))
    return g, int(torch.multinomial(p[g], 1, generator=generator))


def test_speculative_sampling_keeps_the_target_distribution():
    assert distribution_check(speculative_sample) > REJECT_P
    first, _ = emitted_tokens(speculative_sample, DRAWS, seed=1)
    tv = 0.5 * np.abs(np.bincount(first, minlength=6) / DRAWS - P_TARGET[0].numpy()).sum()
    assert tv < 0.02


@pytest.mark.parametrize("wrong", [wrong_residual_from_target, wrong_residual_swapped])
def test_the_check_rejects_a_wrong_residual(wrong):
    assert distribution_check(wrong) < REJECT_P


def test_residual_is_the_normalised_positive_part():
    p, q = P_TARGET[0], Q_DRAFT[0]
    expected = (p - q).clamp_min(0) / (p - q).clamp_min(0).sum()
    torch.testing.assert_close(residual_distribution(p, q), expected)
    torch.testing.assert_close(residual_distribution(p, p), p)          # empty residual: fall back to p


def test_identical_draft_is_always_accepted():
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        drafts = torch.multinomial(P_TARGET[:2], 1, generator=gen)[:, 0]
        n, _ = speculative_sample(P_TARGET, P_TARGET[:2], drafts, gen)
        assert n == 2


def test_impossible_draft_token_is_always_rejected():
    p = torch.tensor([[0.0, 1.0], [0.5, 0.5]])
    q = torch.tensor([[1.0, 0.0]])
    n, nxt = speculative_sample(p, q, torch.tensor([0]))
    assert (n, nxt) == (0, 1)


def test_top_p_keeps_the_smallest_nucleus():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    probs = probs_from_logits(logits, Sampling(temperature=1.0, top_p=0.75))
    torch.testing.assert_close(probs, torch.tensor([0.625, 0.375, 0.0, 0.0]))
    greedy = probs_from_logits(logits, Sampling())
    assert greedy.tolist() == [1.0, 0.0, 0.0, 0.0]
