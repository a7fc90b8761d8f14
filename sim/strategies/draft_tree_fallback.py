"""LLMCad's self-adaptive fallback (§3.3, Eq. 3): which kinds of round the ``draft-tree`` strategy
weights, and what their tokens are accepted with.

Two models of the main branch (the draft's greedy continuation) under the threshold α:

- **Calibrated draft** (:func:`fallback_chain`): the draft's confidence is its acceptance rate ``p0``,
  so the cumulative confidence after ``k`` tokens is ``p0^k`` and a threshold stops the round at
  ``k(α) = floor(ln α / ln p0) + 1``; after a verification that accepts all ``k``, ``α /= 2``, after one
  that accepts ``j < k``, ``α = (k - j) / k``: a Markov chain on ``k`` whose stationary distribution
  weights the rounds, each token accepted with ``p0`` independently. What a paper's single acceptance
  rate allows.
- **Replayed** (:func:`replayed_rounds`): a measured profile whose calibration replayed the fallback
  on the draft's own per-position confidences and hits (:mod:`real.run.fallback_replay`, in the
  profile's ``meta["draft_fallback"]``) gives the weight of each ``k`` and the acceptance of the i-th
  token in rounds of ``k`` directly: the draft's confidence is not its accuracy, and a round that
  stops early stops where the draft is unsure, so its tokens are accepted less often than a long
  round's.

Where the profile also carries the real decoder's own rounds at the strategy's budget and depth
(:func:`measured_rounds`, ``meta["draft_tree_rounds"]``, :mod:`real.run.draft_tree_rounds`), those
replace both models: LLMCad's tree branches on the draft's confidence, and the side branches it opens
and extends (passes and verified tokens the main-branch models do not count) follow from confidences
after tokens off the true sequence, which only decoding sees.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from hwmodels.errors import HetSpecError
from sim.acceptance_profile import rounds_key
from sim.tree import TokenTree

#: Eq. 3: alpha is halved after a verification that finds no error ("the cumulative confidence of
#: 3-5 tokens in empirical observations").
ALPHA_DECAY = 0.5


def stop_depth(alpha: float, p0: float, cap: int) -> int:
    """Main-branch tokens drafted before ``p0^k < alpha`` (at least 1, at most ``cap``)."""
    if p0 <= 0.0 or alpha >= 1.0:
        return 1
    if alpha <= 0.0:
        return cap
    return int(min(max(math.floor(math.log(alpha) / math.log(p0)) + 1, 1), cap))


@lru_cache(maxsize=256)
def fallback_chain(p0: float, cap: int, speculate: tuple[bool, ...] | None = None) -> np.ndarray:
    """Stationary distribution of the round's main-branch depth k = 1..cap under Eq. 3 (index k - 1).

    State k stands for the thresholds that stop at k; its representative alpha is the geometric
    midpoint ``p0^(k - 1/2)``. A round accepts j of its k main-branch tokens with probability
    ``p0^j (1 - p0)`` (j < k) or ``p0^k`` (all): all -> alpha / 2, else alpha = (k - j) / k.

    ``speculate[k - 1]`` (LLMCad §3.4's speculative generation): a round of k whose verification
    leaves the draft time to draft the whole depth-``cap`` tree beyond its main branch. Its
    speculative tokens are kept when the verification finds no error and the target's own token is
    the draft's guess it continued from (``p0^(k+1)``): the next round verifies them, a round of
    ``cap``; the rest of the all-accepted mass (``p0^k (1 - p0)``) discards them and halves alpha.
    """
    P = np.zeros((cap, cap))
    for k in range(1, cap + 1):
        alpha = p0 ** (k - 0.5) if p0 > 0 else 1.0
        if speculate is not None and speculate[k - 1]:
            P[k - 1, cap - 1] += p0 ** (k + 1)
            P[k - 1, stop_depth(alpha * ALPHA_DECAY, p0, cap) - 1] += p0 ** k * (1.0 - p0)
        else:
            P[k - 1, stop_depth(alpha * ALPHA_DECAY, p0, cap) - 1] += p0 ** k
        for j in range(k):
            P[k - 1, stop_depth((k - j) / k, p0, cap) - 1] += (p0 ** j) * (1.0 - p0)
    # stationary: left eigenvector of eigenvalue 1 (power iteration is enough for <= 32 states)
    pi = np.full(cap, 1.0 / cap)
    for _ in range(10_000):
        nxt = pi @ P
        if np.abs(nxt - pi).max() < 1e-14:
            break
        pi = nxt
    return nxt / nxt.sum()


def replayed_rounds(meta: dict | None, cap: int) -> tuple[np.ndarray, tuple[tuple[float, ...], ...]] | None:
    """``(weights, accept)`` of the fallback replayed at main-branch cap ``cap`` (see the module
    docstring), or None where the profile has no replay for it. ``weights[k - 1]``: share of rounds
    drafting k tokens; ``accept[k - 1][i - 1]``: acceptance of the i-th given the i - 1 before it, in
    those rounds."""
    table = (meta or {}).get("draft_fallback", {}).get(str(cap))
    if table is None:
        return None
    weights = np.asarray(table.get("weights", ()), dtype=float)
    accept = tuple(tuple(float(v) for v in row) for row in table.get("accept", ()))
    if (len(weights) != cap or len(accept) != cap or any(len(row) != k + 1 for k, row in enumerate(accept))
            or np.any(weights < 0) or not math.isclose(weights.sum(), 1.0, abs_tol=1e-4)
            or any(not 0.0 <= v <= 1.0 for row in accept for v in row)):
        raise HetSpecError(f"acceptance profile: draft_fallback[{cap}] needs {cap} weights summing to 1 and, per k, "
                           "k acceptance rates in [0, 1]")
    return weights / weights.sum(), accept


def conditioned_accuracy(acc: np.ndarray, rates) -> np.ndarray:
    """``acc`` ([depth, ranks] per-rank acceptance) with the main branch's acceptance at the first depths
    replaced by ``rates``; the other ranks keep their share of the rest (a rank-r candidate is right
    only where the main one is not)."""
    out = np.array(acc, dtype=float, copy=True)
    for i, rate in enumerate(rates[:out.shape[0]]):
        p0 = out[i, 0]
        out[i, 1:] *= (1.0 - rate) / (1.0 - p0) if p0 < 1.0 else 0.0
        out[i, 0] = rate
    return out


def measured_rounds(meta: dict | None, width: int, depth: int) -> tuple[tuple[int, int, float, float], ...] | None:
    """``(passes, tokens verified, share of rounds, mean tokens emitted)`` of every kind of round the real
    decoder made at tree budget ``width`` and depth cap ``depth`` on the profile's calibration prompts
    (``meta["draft_tree_rounds"]["<width>x<depth>"]``), or None where the profile has none for them."""
    key = rounds_key(width, depth)
    table = (meta or {}).get("draft_tree_rounds", {}).get(key)
    if table is None:
        return None
    where = f"acceptance profile: draft_tree_rounds[{key}]"
    try:
        kinds = tuple((int(p), int(n), float(w), float(t)) for p, n, w, t in table["kinds"])
    except (KeyError, TypeError, ValueError) as exc:
        raise HetSpecError(f"{where}: kinds must be [passes, tokens verified, share, tokens emitted] rows ({exc})")
    for passes, size, weight, tokens in kinds:
        if not 0 <= passes < size <= width or (passes == 0) != (size == 1) or weight < 0 or not 1.0 <= tokens <= size:
            raise HetSpecError(f"{where}: round ({passes} passes, {size} tokens verified, share {weight}, "
                               f"{tokens} emitted) is impossible (passes < tokens verified <= budget, "
                               "no passes only for the root alone, 1 <= emitted <= verified)")
    if not kinds or not math.isclose(sum(k[2] for k in kinds), 1.0, abs_tol=1e-4):
        raise HetSpecError(f"{where}: the kinds' shares must sum to 1")
    return kinds


def round_tree(passes: int, size: int) -> TokenTree:
    """A tree of ``size`` tokens (root included) of which ``passes`` are fed to the draft (internal nodes):
    a main branch of ``passes`` fed nodes and its tip, the other leaves side candidates of the fed nodes
    (rank 1 of the first, of the second, ..., then rank 2), as LLMCad's tree hangs them."""
    if not 0 <= passes < size or (passes == 0) != (size == 1):
        raise HetSpecError(f"round_tree: {passes} fed nodes cannot make a tree of {size} tokens")
    parents, ranks = [-1] + list(range(passes)), [0] * (passes + 1)
    if passes == 0:
        return TokenTree((-1,), (0,))
    for extra in range(size - passes - 1):
        parents.append(extra % passes)
        ranks.append(1 + extra // passes)
    return TokenTree(tuple(parents), tuple(ranks))
