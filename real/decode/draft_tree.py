"""``draft-tree``: LLMCad's token tree (Xu et al., "LLMCad: Fast and Scalable On-device Large Language Model Inference", 2023, §4).

One step (a *round*):

1. **Tree generation (draft).** The root is the target's token after the last accepted one. The
   draft feeds one tree token per pass into its own KV cache as a *pending* token whose mask row
   holds only its ancestors (LLMCad's tree decoder: the input stays autoregressive, only the
   mask changes). From the pass's distribution the top-1 token always extends the branch, and
   every other candidate whose confidence exceeds the branch threshold (0.3 in the paper) opens a
   new branch. The *confidence-based branch pacer* (Eq. 1-2) picks which branch to extend next.
2. **Self-adaptive fallback.** After every draft pass, ``T_c = max_i C_i`` (cumulative
   confidence, the product of a branch's token confidences, maximised over branches); when
   ``T_c < α`` the round stops and the target verifies. The round also stops when the tree holds
   ``max_tokens`` tokens or no branch may grow (``max_depth``).
3. **Verification** of the whole tree in one target pass (tree mask, position ids = depth), the
   longest correct path (:meth:`sim.tree.TokenTree.accepted_path`) plus the target's rectified or
   bonus token, rollback of both caches to that path, and the update of α by Eq. 3.

Departures from the paper, each marked where it happens: the pacer reading of Eq. 1-2, the
"most matching branch" of Eq. 3, and no speculative drafting *during* verification (LLMCad §3.4:
here one CPU worker runs both models, so there is no idle compute to overlap with).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from hwmodels.errors import HetSpecError
from real.decode.common import (
    Clock,
    DecodeResult,
    StepLog,
    check_request,
    model_device,
    prefill,
    prompt_tensor,
    require,
)
from real.decode.device_tree import device_ids, read_back, tree_tensors
from real.model.executor import declare_widths
from sim.tree import TokenTree

NAME = "draft-tree"

#: Branch threshold: a non-top-1 candidate opens a branch when its confidence exceeds this
#: (LLMCad §3.2: "any candidate token with a confidence higher than a threshold (e.g., 30%)").
DEFAULT_BRANCH_THRESHOLD = 0.3
#: Initial fallback threshold α₀ (LLMCad §3.3: "the default value (0.01)").
DEFAULT_ALPHA0 = 0.01
#: Factor applied to α after an error-free verification (LLMCad Eq. 3: 0.5, "the cumulative
#: confidence of 3-5 tokens in empirical observations").
ALPHA_DECAY_ON_SUCCESS = 0.5
#: Tree budget (tokens verified per step, root included) and depth cap. LLMCad gives neither
#: ("up to tens of branches"; its verifier streams weights from storage, so a wider tree costs it
#: almost nothing). On a CPU verifier a wider tree costs compute: on the small demo models, one
#: thread, budgets 6/8/12/16 gave 1.64/1.86/1.77/1.79x over ar (tokens/step 3.86/4.25/4.50/4.50:
#: above 12 the fallback, not the budget, ends the rounds) — docs/decode-methods.md. The depth cap
#: keeps a round from drafting far past what the draft's agreement (~0.84 per token on small) makes
#: likely to survive (0.84^8 ~ 0.25).
DEFAULT_MAX_TOKENS = 8
DEFAULT_MAX_DEPTH = 8


@dataclass(frozen=True)
class DraftTreeConfig:
    tree_width: int = DEFAULT_MAX_TOKENS          # tree budget M, root included
    draft_depth: int = DEFAULT_MAX_DEPTH          # depth cap of the drafted tree
    branch_threshold: float = DEFAULT_BRANCH_THRESHOLD
    alpha0: float = DEFAULT_ALPHA0

    def __post_init__(self) -> None:
        if not isinstance(self.tree_width, int) or self.tree_width < 2:
            raise HetSpecError(f"draft-tree: the tree budget (width) must be an integer >= 2 "
                               f"(the root and at least one draft token), got {self.tree_width!r}")
        if not isinstance(self.draft_depth, int) or self.draft_depth < 1:
            raise HetSpecError(f"draft-tree: max depth must be an integer >= 1, got {self.draft_depth!r}")
        if not 0.0 < self.branch_threshold <= 1.0:
            raise HetSpecError(f"draft-tree: branch threshold must be in (0, 1], got {self.branch_threshold}")
        if not 0.0 < self.alpha0 <= 1.0:
            raise HetSpecError(f"draft-tree: alpha0 must be in (0, 1], got {self.alpha0}")


# ---------------------------------------------------------------------------- LLMCad's formulas
def pacer_deficits(confidences: Sequence[float], lengths: Sequence[int], budget: int) -> list[float]:
    """LLMCad Eq. 1 for every branch x: ``f(x) = M * C_x / sum_i C_i - T_x``.

    confidences: C_i, the product of branch i's token confidences; lengths: T_i, its tokens (below
    the root); budget: M, the tree's token budget.
    """
    total = sum(confidences)
    if total <= 0.0:
        return [-float(t) for t in lengths]
    return [budget * c / total - t for c, t in zip(confidences, lengths)]


def pacer_pick(confidences: Sequence[float], lengths: Sequence[int], budget: int,
               eligible: Sequence[bool] | None = None) -> int | None:
    """The branch to extend: the eligible one with the largest deficit f(x); None if none is eligible.

    Departure (reading of Eq. 2, "Obj = min_x f(x)" under max-min fairness): the paper does not say
    how the objective picks a branch. Extending branch x lowers f(x) by one, so repeatedly extending
    the branch of largest deficit (the one furthest below its confidence-proportional share
    M·C_x/ΣC) is the greedy max-min allocation: it raises the minimum of -f, equalising the
    branches' surplus. Ties go to the earlier branch.
    """
    f = pacer_deficits(confidences, lengths, budget)
    best = None
    for i, value in enumerate(f):
        if (eligible is None or eligible[i]) and (best is None or value > f[best]):
            best = i
    return best


def tree_confidence(confidences: Sequence[float]) -> float:
    """LLMCad §3.3: ``T_c = max_i C_i`` over the branches."""
    return max(confidences)


def update_alpha(alpha: float, n_correct: int, n_all: int) -> float:
    """LLMCad Eq. 3: ``α/2`` if every drafted token of the most matching branch was correct, else
    the fraction of that branch's tokens that were wrong, ``(N_all - N_correct) / N_all``."""
    if not 0 <= n_correct <= n_all:
        raise HetSpecError(f"update_alpha: need 0 <= n_correct <= n_all, got {n_correct}, {n_all}")
    if n_correct == n_all:
        return alpha * ALPHA_DECAY_ON_SUCCESS
    return (n_all - n_correct) / n_all


def matching_branch_length(tree: TokenTree, path: Sequence[int]) -> int:
    """N_all of Eq. 3: tokens of the most matching branch, given the accepted ``path``.

    Every branch through the last accepted node matches ``len(path) - 1`` tokens. Departure (the
    paper does not break this tie): we take the draft's own favourite continuation, following the
    top-1 (rank 0) child down to a leaf; the branch ends at the accepted node if it is a leaf.
    """
    node = path[-1]
    while True:
        top = [c for c in tree.children[node] if tree.ranks[c] == 0]
        if not top:
            return tree.depths[node]
        node = top[0]


# ---------------------------------------------------------------------------- the draft tree
class DraftTree:
    """One round's tree while the draft grows it: node lists plus the draft-cache bookkeeping.

    Node 0 is the root. A node is *fed* once the draft has run it (its K/V sit in the draft cache's
    pending ``slot``); the unfed nodes are exactly the leaves, i.e. the branches' newest tokens.
    """

    def __init__(self, root: int):
        self.tokens = [root]
        self.parents = [-1]
        self.ranks = [0]
        self.depths = [0]
        self.cum = [1.0]                 # cumulative confidence C of the path to each node
        self.slots: list[int | None] = [None]
        self.branches: list[int] = []    # unfed leaves (each is the tip of one branch)
        self.feed_order: list[int] = []  # nodes in the order the draft ran them

    @property
    def size(self) -> int:
        return len(self.tokens)

    def add_children(self, node: int, probs: torch.Tensor, top_k: int, threshold: float,
                     budget: int) -> None:
        """Children of a fed node from its draft distribution ``probs [vocab]``: the top-1 always,
        other candidates if their confidence exceeds ``threshold`` — while the budget allows. The
        branching decision needs the confidences on the host: one read-back per draft pass (LLMCad's
        tree grows from them; nothing else of the pass is read back)."""
        values, ids = probs.topk(min(top_k, probs.shape[-1]))
        k = values.shape[-1]
        read = torch.cat([values.float(), ids.float()]).tolist()   # one read-back (ids < 2**24: exact)
        confidences, tokens = read[:k], [int(t) for t in read[k:]]
        for rank, (p, tok) in enumerate(zip(confidences, tokens)):
            if self.size >= budget or (rank > 0 and p <= threshold):
                break
            self.tokens.append(tok)
            self.parents.append(node)
            self.ranks.append(rank)
            self.depths.append(self.depths[node] + 1)
            self.cum.append(self.cum[node] * p)
            self.slots.append(None)
            self.branches.append(self.size - 1)

    def to_token_tree(self) -> TokenTree:
        return TokenTree(tuple(self.parents), tuple(self.ranks))


def grow_tree(root: int, run_draft: Callable[[DraftTree, int], torch.Tensor], budget: int,
              config: DraftTreeConfig, alpha: float) -> DraftTree:
    """Grow one round's tree (LLMCad §3.2-3.3) and return it.

    ``run_draft(tree, node)`` runs the draft on ``node`` (0 = the root) and returns the draft's
    distribution ``[vocab]`` after it. The root is always run; then, while the tree has room, some
    branch may grow (depth < max_depth) and the tree-cumulative confidence ``T_c`` is at least α,
    the pacer's branch is extended by one pass.
    """
    top_k = 1 + math.floor(1.0 / config.branch_threshold)   # at most this many can exceed it
    tree = DraftTree(root)

    def expand(node: int) -> None:
        probs = run_draft(tree, node)
        tree.feed_order.append(node)
        tree.add_children(node, probs, top_k, config.branch_threshold, budget)

    expand(0)
    while tree.size < budget and tree.branches:
        confidences = [tree.cum[b] for b in tree.branches]
        if tree_confidence(confidences) < alpha:       # self-adaptive fallback: verify now
            break
        lengths = [tree.depths[b] for b in tree.branches]
        pick = pacer_pick(confidences, lengths, budget, [d < config.draft_depth for d in lengths])
        if pick is None:
            break
        expand(tree.branches.pop(pick))
    return tree


def generate(models, prompt, max_new_tokens: int, config: DraftTreeConfig, clock: Clock,
             generator: torch.Generator | None = None) -> DecodeResult:
    """Greedy LLMCad decoding (LLMCad verifies against the target's greedy output; no sampling)."""
    target, draft = models.target, require(models, "draft", NAME)
    cache_len = check_request(models, prompt, max_new_tokens, extra_tokens=config.tree_width + 2)
    log = StepLog(NAME, len(prompt), max_new_tokens, clock)
    alpha = config.alpha0
    declare_widths(target, expect=config.tree_width)    # trees of 1..budget tokens
    declare_widths(draft, expect=3)                      # the lag (up to 3 tokens), then one node per pass
    with torch.inference_mode():
        device = model_device(target)
        # rows[s, j]: the draft's pending slot s may attend to pending slot j. The pending block of a
        # round holds the lag (<= 2 tokens; 3 on a budget-1 final step) and the fed tree nodes.
        max_slots = config.tree_width + 3
        rows = torch.zeros(max_slots, max_slots, dtype=torch.bool, device=device)
        t = clock.now()
        tokens = prompt_tensor(prompt, device)                                   # [1, n]
        t_cache, logits = prefill(target, tokens, cache_len)                     # logits [1, 1, vocab]
        d_cache, _ = prefill(draft, tokens, cache_len, slot="draft")
        root = read_back(logits[0, -1].argmax())[0]
        log.prefill_done(root, t)
        lag = [root]                  # tokens the draft has not fed yet; lag[-1] is the root

        while log.remaining > 0:
            step = log.step
            budget = min(config.tree_width, log.remaining)   # no speculation past the output length
            stem = len(lag)
            root_position = d_cache.length + stem - 1

            def run_draft(tree: DraftTree, node: int) -> torch.Tensor:
                t0 = clock.now()
                if node == 0:   # feed the lag causally (pending is empty); the root's row sees the stem
                    d_logits = draft(device_ids(lag, device), d_cache, last_only=True)[0, -1]   # [vocab]
                    slot = stem - 1
                    rows[slot].zero_()
                    rows[slot, :stem] = True
                else:           # one tree token; its row = its parent's row + itself
                    slot, parent_slot = d_cache.pending, tree.slots[tree.parents[node]]
                    rows[slot].zero_()
                    rows[slot, : parent_slot + 1] = rows[parent_slot, : parent_slot + 1]
                    rows[slot, slot] = True
                    d_logits = draft(device_ids([tree.tokens[node]], device), d_cache,
                                     positions=root_position + tree.depths[node],
                                     tree_mask=rows[slot: slot + 1, : slot + 1])[0, -1]
                tree.slots[node] = slot
                log.draft_passes += 1
                log.draft_tokens += stem if node == 0 else 1
                clock.record(step, "draft", t0, clock.now())
                return torch.softmax(d_logits.float(), -1)

            if budget > 1:
                tree = grow_tree(lag[-1], run_draft, budget, config, alpha)
            else:
                tree = DraftTree(lag[-1])

            # verification of the whole tree in one target pass
            t = clock.now()
            shape = tree.to_token_tree()
            tt = tree_tensors(shape, device)                                          # built once per shape
            block = device_ids(tree.tokens, device)                                   # [1, n]
            v_logits = target(block, t_cache, positions=t_cache.length + tt.depth, tree_mask=tt.mask,
                              position_bound=t_cache.length + shape.depth + 1)[0]     # [n, vocab]
            t_verified = clock.now()
            # acceptance on the device; one read-back: the last accepted node and the target's next token
            best = v_logits.argmax(-1)                                                # [n]
            correct = torch.cat([torch.ones(1, dtype=torch.bool, device=device), block[0, 1:] == best[tt.parent]])
            last_t = tt.best_node(correct)
            last, nxt = read_back(last_t, best[last_t])
            path = shape.ancestors(last)
            t_cache.keep(path, index=tt.paths[last_t][:len(path)])
            if budget > 1:
                fed = [tree.slots[n] for n in path[1:] if tree.slots[n] is not None]
                d_cache.keep(list(range(stem)) + fed)
                lag = ([tree.tokens[last]] if last != 0 and tree.slots[last] is None else []) + [nxt]
                alpha = update_alpha(alpha, len(path) - 1, matching_branch_length(shape, path))
            else:
                lag = lag + [nxt]
            kept = log.emit([tree.tokens[n] for n in path[1:]] + [nxt])
            clock.record(step, "accept", t_verified, clock.now())
            log.step_done("verify", t, t_verified, proposed=tree.size - 1, accepted=kept)
    return log.finish()
