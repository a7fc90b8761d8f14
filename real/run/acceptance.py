"""Measure an acceptance profile (:class:`sim.acceptance_profile.AcceptanceProfile`) on prompts.

Procedure, per calibration prompt of P tokens:

1. The target decodes ``max_new_tokens`` greedily (``ar``): ``seq = prompt + output`` (length L).
2. One cache-free target pass over ``seq`` gives the final hidden state at every position, and one
   draft pass its logits. Positions ``t = P-1 .. L-2`` are those whose next token the target
   generated, so the target's greedy token after position t is ``seq[t+1]``.
3. Medusa: head k (1-based) at position t proposes the token at ``t+k+1``; its rank-r candidate is
   *correct* iff it equals ``seq[t+k+1]``. ``medusa_accuracy[k-1][r]`` = correct / counted (ranks are
   exclusive, so a row sums to head k's top-R accuracy).
4. Draft: its greedy token after t is accepted iff it equals ``seq[t+1]`` (per-token greedy
   agreement, Dovetail's α); binned by its confidence (probability of that token).
5. Acceptance length by width: for each greedy tree of width 1..64 built from the measured
   accuracies, greedy Medusa decoding is *replayed* on ``seq``: a step whose root follows position t
   accepts the longest path of nodes whose candidates are correct, then continues from the last
   accepted token. Greedy Medusa output equals ``seq`` token for token, so this gives the tokens per
   step a real ``medusa`` run with that tree would measure, without running 64 decodes.
6. Chain length by gamma (1..8): greedy ``chain`` decoding is replayed the same way. With every
   earlier proposal accepted, the draft's context is the true sequence, so its i-th proposal of a
   step rooted at position t is correct iff the draft's greedy token after position t+i is
   ``seq[t+i+1]`` (step 4's per-position hits): a step accepts the run of consecutive hits, capped
   at gamma, plus the target's token. The last rounds of a generation draft fewer (the decoder
   never proposes past ``max_new_tokens``): ``meta["chain_rounds"]`` keeps, per gamma, each number
   of draft passes a round makes and its share of the rounds.
7. LLMCad's self-adaptive fallback by main-branch cap (1..8), replayed the same way on the draft's
   per-position confidences and hits (:mod:`real.run.fallback_replay`): how often a round drafts k
   tokens and their acceptance given k (``meta["draft_fallback"]``).
8. With ``draft_tree_widths``: the real ``draft-tree`` decoder's own rounds at those tree budgets on the
   same prompts (:mod:`real.run.draft_tree_rounds`, ``meta["draft_tree_rounds"]``): its side branches
   follow the draft's confidences off the true sequence, which steps 1-7 do not see.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import torch

from hwmodels.errors import HetSpecError
from real.decode import ar
from real.decode.common import Clock, model_device
from sim.acceptance_profile import AcceptanceProfile, ConfidenceBin
from sim.tree import TokenTree

#: Candidate ranks measured per head: Medusa's trees use at most the top-10 of a head
#: (the 63-node mc_sim_7b_63 tree reaches rank 9 at depth 1).
PROFILE_RANKS = 10
#: Draft ranks reported in ``meta`` (LLMCad branches on the top-1 and on at most 2 others above 0.3).
DRAFT_RANKS = 3
#: Equal-width draft-confidence bins over [0, 1].
CONFIDENCE_BINS = 10
#: Widths of the acceptance-length table: 1..64, the size of Medusa's default tree (root included).
MAX_PROFILE_WIDTH = 64
#: Draft lengths of the chain table: 1..8, the simulator's chain search (sim.strategies.chain.MAX_GAMMA).
MAX_PROFILE_GAMMA = 8


def _score_prompt(models, prompt: list[int], max_new_tokens: int):
    clock = Clock()
    out = ar.generate(models, prompt, max_new_tokens, ar.ArConfig(), clock)
    seq = list(prompt) + list(out.ids)
    p_len, length = len(prompt), len(seq)
    device = model_device(models.target)
    tokens = torch.tensor([seq], dtype=torch.long, device=device)          # [1, L]
    result = {"p_len": p_len, "seq": np.asarray(seq)}
    with torch.inference_mode():
        heads = getattr(models, "heads", None)
        if heads is not None:
            _, hidden = models.target(tokens, None, return_hidden=True)    # [1, L, d]
            h = hidden[:, p_len - 1: length - 1]                           # [1, n_pos, d]
            top = heads(h)[:, 0].topk(PROFILE_RANKS, dim=-1).indices       # [n_heads, n_pos, R]
            n_heads, n_pos = top.shape[0], top.shape[1]
            hits = torch.zeros(n_heads, n_pos, PROFILE_RANKS, dtype=torch.bool)
            for k in range(1, n_heads + 1):
                valid = n_pos - k                  # positions t with t+k+1 <= L-1
                if valid > 0:
                    truth = tokens[0, p_len + k: p_len + k + valid]       # seq[t+k+1]
                    hits[k - 1, :valid] = top[k - 1, :valid] == truth[:, None]
            result["head_hits"] = hits.cpu().numpy()
        draft = getattr(models, "draft", None)
        if draft is not None:
            d_logits = draft(tokens, None)[0, p_len - 1: length - 1].float()   # [n_pos, V]
            probs = torch.softmax(d_logits, -1)
            conf, ranked = probs.topk(DRAFT_RANKS, dim=-1)                      # [n_pos, ranks]
            truth = tokens[0, p_len:length]                                    # seq[t+1]
            rank_hits = ranked == truth[:, None]
            result["draft_hit"] = rank_hits[:, 0].cpu().numpy()
            result["draft_conf"] = conf[:, 0].cpu().numpy()
            result["draft_rank_hits"] = rank_hits.sum(0).cpu().numpy()
    return result


def replay_medusa(tree: TokenTree, head_hits: np.ndarray, max_new_tokens: int) -> int:
    """Steps greedy Medusa with ``tree`` takes to emit ``max_new_tokens`` tokens, replayed.

    head_hits: ``[n_heads, n_pos, ranks]`` bool, ``head_hits[k-1, t, r]`` = head k's rank-r candidate
    at position index t (0 = last prompt token) is correct. The prefill emits the first token.
    """
    n_pos = head_hits.shape[1]
    ok = np.zeros((tree.size, n_pos), dtype=bool)            # node's whole path correct at t
    ok[0] = True
    depth_at = np.zeros(n_pos, dtype=np.int64)                # accepted depth of a step rooted after t
    for i in range(1, tree.size):
        d, r = tree.depths[i], tree.ranks[i]
        ok[i] = ok[tree.parents[i]] & head_hits[d - 1, :, r]
        depth_at = np.maximum(depth_at, np.where(ok[i], d, 0))
    emitted, t, steps = 1, 0, 0
    while emitted < max_new_tokens:
        gained = int(depth_at[t]) + 1 if t < n_pos else 1
        emitted += gained
        t += gained
        steps += 1
    return steps


def chain_round_passes(draft_hit: np.ndarray, gamma: int, max_new_tokens: int) -> list[int]:
    """Draft tokens of every round greedy ``chain`` with ``gamma`` draft tokens makes to emit
    ``max_new_tokens``, replayed (their count is the rounds).

    draft_hit: ``[n_pos]`` bool, ``draft_hit[t]`` = the draft's greedy token after position index t
    (0 = last prompt token) is the target's. The prefill emits the first token; a round rooted at
    index t drafts ``min(gamma, tokens still to emit - 1)`` tokens (the real decoder caps its last
    proposals so, and drafts none when one token is left), accepts the run of hits from t+1 among
    them and adds the target's token.
    """
    n_pos = draft_hit.shape[0]
    emitted, t, rounds = 1, 0, []
    while emitted < max_new_tokens:
        cap = min(gamma, max_new_tokens - emitted - 1)
        run = 0
        while run < cap and t + 1 + run < n_pos and draft_hit[t + 1 + run]:
            run += 1
        emitted += run + 1
        t += run + 1
        rounds.append(cap)
    return rounds


def replay_chain_rounds(scored, max_new_tokens: int) -> dict[int, list[int]]:
    """Per gamma 1..8, the draft passes of every round greedy ``chain`` makes on each of ``scored``'s
    generations (:func:`chain_round_passes`), all prompts' rounds in one list."""
    return {g: [k for s in scored for k in chain_round_passes(s["draft_hit"], g, max_new_tokens)]
            for g in range(1, MAX_PROFILE_GAMMA + 1)}


def chain_rounds_table(rounds: dict[int, list[int]]) -> dict:
    """``meta["chain_rounds"]``: per gamma, each number of draft passes a round makes (gamma, and the fewer
    of the generations' last rounds) with its share of the rounds (``rounds``: :func:`replay_chain_rounds`)."""
    table = {}
    for gamma, passes in rounds.items():
        count = Counter(passes)
        table[str(gamma)] = [[k, round(n / len(passes), 6)] for k, n in sorted(count.items())]
    return table


def _fallback_tables(scored, max_new_tokens: int) -> dict:
    """LLMCad's fallback replayed per main-branch cap 1..8 (:mod:`real.run.fallback_replay`)."""
    from real.decode.draft_tree import ALPHA_DECAY_ON_SUCCESS, DEFAULT_ALPHA0
    from real.run.fallback_replay import fallback_table, replay_fallback

    return {str(cap): fallback_table([r for s in scored for r in replay_fallback(
        s["draft_hit"], s["draft_conf"], cap, max_new_tokens, DEFAULT_ALPHA0, ALPHA_DECAY_ON_SUCCESS)], cap)
            for cap in range(1, MAX_PROFILE_GAMMA + 1)}


def measure_profile(models, prompts: list[list[int]], max_new_tokens: int, name: str, source: str,
                    meta: dict | None = None, draft_tree_widths: Sequence[int] = ()) -> AcceptanceProfile:
    """The acceptance profile of ``models`` (any of draft / heads may be absent) on ``prompts``;
    ``draft_tree_widths``: tree budgets whose real ``draft-tree`` rounds it also counts (step 8)."""
    if not prompts:
        raise HetSpecError("profile-acceptance needs at least one prompt")
    if max_new_tokens < 2:
        raise HetSpecError(f"profile-acceptance needs --max-new-tokens >= 2, got {max_new_tokens}")
    scored = [_score_prompt(models, list(p), max_new_tokens) for p in prompts]
    meta = dict(meta or {})
    meta.update(prompts=len(prompts), max_new_tokens=max_new_tokens,
                positions=int(sum(len(s["seq"]) - s["p_len"] for s in scored)))
    accuracy = acceptance_length = None
    if "head_hits" in scored[0]:
        hits = np.concatenate([s["head_hits"] for s in scored], axis=1)        # [H, all_pos, R]
        counted = np.array([sum(max(s["head_hits"].shape[1] - k, 0) for s in scored)
                            for k in range(1, hits.shape[0] + 1)])
        accuracy = hits.sum(axis=1) / np.maximum(counted, 1)[:, None]        # [H, R]
        meta["medusa_positions_per_head"] = counted.tolist()
        meta["medusa_topk_accuracy"] = np.cumsum(accuracy, axis=1).round(4).tolist()
        acceptance_length = {}
        for width in range(1, MAX_PROFILE_WIDTH + 1):
            tree = TokenTree.greedy(accuracy, width)
            steps = sum(replay_medusa(tree, s["head_hits"], max_new_tokens) for s in scored)
            acceptance_length[width] = (max_new_tokens - 1) * len(scored) / steps
    alpha = bins = chain_length = None
    if "draft_hit" in scored[0]:
        hit = np.concatenate([s["draft_hit"] for s in scored])
        conf = np.concatenate([s["draft_conf"] for s in scored])
        alpha = float(hit.mean())
        edges = np.linspace(0.0, 1.0, CONFIDENCE_BINS + 1)
        which = np.minimum((conf * CONFIDENCE_BINS).astype(int), CONFIDENCE_BINS - 1)
        bins = tuple(
            ConfidenceBin(lo=round(float(edges[b]), 9), hi=round(float(edges[b + 1]), 9),
                          accept_rate=float(hit[which == b].mean()) if np.any(which == b) else 0.0,
                          count=int(np.sum(which == b)))
            for b in range(CONFIDENCE_BINS))
        rounds = replay_chain_rounds(scored, max_new_tokens)
        chain_length = {g: (max_new_tokens - 1) * len(scored) / len(passes) for g, passes in rounds.items()}
        meta["chain_rounds"] = chain_rounds_table(rounds)
        rank_hits = sum(s["draft_rank_hits"] for s in scored)
        meta["draft_rank_accuracy"] = (rank_hits / len(hit)).round(4).tolist()
        meta["draft_fallback"] = _fallback_tables(scored, max_new_tokens)
        if draft_tree_widths:
            from real.run.draft_tree_rounds import measure_draft_tree_rounds

            meta["draft_tree_rounds"] = measure_draft_tree_rounds(models, prompts, max_new_tokens, draft_tree_widths)
        if alpha >= 1.0:
            raise HetSpecError("the draft agreed with the target on every calibration token; "
                               "use more prompts or tokens to measure its acceptance rate")
    return AcceptanceProfile(
        name=name, source=source,
        medusa_accuracy=None if accuracy is None else tuple(tuple(float(v) for v in row) for row in accuracy),
        draft_alpha=alpha, draft_confidence_bins=bins, acceptance_length=acceptance_length,
        chain_acceptance_length=chain_length, meta=meta,
    )
