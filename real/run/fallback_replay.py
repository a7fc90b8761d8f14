"""LLMCad's self-adaptive fallback (§3.3, Eq. 3) replayed on a profile's per-position draft statistics.

The real ``draft-tree`` decoder (:mod:`real.decode.draft_tree`) stops drafting a round when the tree's
cumulative *confidence* (the product of the draft's own probabilities along its best branch) falls
below a threshold α, and moves α by Eq. 3 after each verification. A draft's confidence is not its
acceptance rate (the small demo draft is under-confident), and the two are correlated: a round stops
early where the draft is unsure, which is where it tends to be wrong. Both are in the calibration
sequences, so the fallback is replayed on them as chain decoding is (:func:`real.run.acceptance.
chain_round_passes`): a round rooted at position index t drafts its main branch (the draft's greedy
continuation; with every earlier proposal accepted its context is the true sequence, so its i-th token
has the confidence and hit measured after position t + i) until the product of the confidences drops
below α or ``cap`` tokens are drafted, accepts the run of hits, and adds the target's token.

Departure, marked: the replay follows the main branch only (the real tree's side branches rarely hold
the largest cumulative confidence, and their tokens are priced by the strategy's tree model), and it
reads the confidences of the true sequence after a miss too (the draft's own continuation is not
measured).

:func:`fallback_table` gives, per cap, how often a round drafts k main-branch tokens and the acceptance
of its i-th token given the i - 1 before it were accepted, in rounds of k: the simulator's draft-tree
strategy weights its kinds of round by the first and prices their tokens with the second
(:mod:`sim.strategies.draft_tree_fallback`).
"""

from __future__ import annotations

import numpy as np


def replay_fallback(draft_hit: np.ndarray, draft_conf: np.ndarray, cap: int, max_new_tokens: int,
                    alpha0: float, decay: float) -> list[tuple[int, int]]:
    """``(k, j)`` of every round of one prompt: main-branch tokens drafted and accepted.

    ``draft_hit[t]`` / ``draft_conf[t]``: whether the draft's greedy token after position index t (0 =
    the last prompt token) is the target's, and its probability. The prefill emits the first token;
    a round never drafts more than the tokens still to emit (as the real decoder caps its last
    budget), and a round with nothing left to draft is not counted. ``decay``: Eq. 3's factor after a
    round whose drafted tokens were all accepted (else α becomes the share rejected)."""
    if cap < 1:
        raise ValueError(f"fallback replay: cap must be >= 1 (got {cap})")
    n_pos = draft_hit.shape[0]
    emitted, t, alpha = 1, 0, alpha0
    rounds = []
    while emitted < max_new_tokens:
        room = min(cap, max_new_tokens - emitted - 1, n_pos - 1 - t)
        k = j = 0
        if room >= 1:
            confidence = 1.0
            while k < room:
                k += 1
                confidence *= float(draft_conf[t + k])
                if confidence < alpha:
                    break
            while j < k and draft_hit[t + 1 + j]:
                j += 1
            rounds.append((k, j))
            alpha = alpha * decay if j == k else (k - j) / k
        emitted += j + 1
        t += j + 1
    return rounds


def fallback_table(rounds: list[tuple[int, int]], cap: int) -> dict:
    """``{"weights": [P(k) for k = 1..cap], "accept": [[P(token i accepted | i - 1 accepted, k) for i =
    1..k] for k = 1..cap], "rounds": n}`` of replayed rounds (an acceptance without a round is 0)."""
    counts = np.zeros(cap)
    reached = np.zeros((cap, cap))      # [k - 1, i - 1]: rounds of k whose first i - 1 tokens were accepted
    passed = np.zeros((cap, cap))       # ... and whose i-th was too
    for k, j in rounds:
        counts[k - 1] += 1
        reached[k - 1, :min(j + 1, k)] += 1
        passed[k - 1, :j] += 1
    n = counts.sum()
    accept = [[round(float(passed[k, i] / reached[k, i]), 4) if reached[k, i] else 0.0 for i in range(k + 1)]
              for k in range(cap)]
    return {"weights": [round(float(c / n), 6) if n else 0.0 for c in counts], "accept": accept, "rounds": int(n)}
