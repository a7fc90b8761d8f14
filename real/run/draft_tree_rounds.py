"""The rounds the real ``draft-tree`` decoder makes on calibration prompts, by tree budget.

LLMCad's tree (:mod:`real.decode.draft_tree`) grows by the draft's *confidence*: every candidate above
the branch threshold opens a branch, the pacer spreads passes over the branches, and the fallback stops
the round when the best branch's cumulative confidence drops below α. What a round drafts and verifies
therefore depends on the draft's confidences after tokens that are not on the true sequence (a side
branch's continuation), which a teacher-forced profile does not see: the simulator's model of the tree
(the greedy prefix by acceptance whose main branch reaches the fallback's depth) has no side branches
and, on the small demo models at budget 16, priced 4.0 draft passes and 5.0 verified tokens per round
where the decoder made 4.4 and 5.7.

So the profile carries the decoder's own rounds: each budget of ``widths`` decodes the calibration
prompts greedily (the output is the target's greedy output, whatever the tree) and every round is
counted by its draft passes and its tree's tokens (root included), with the tokens it emitted
(accepted drafts + the target's own). ``meta["draft_tree_rounds"]`` keeps, per budget, each
(passes, tokens verified) kind's share of the rounds and its mean emitted tokens; the simulator's
``draft-tree`` strategy prices those kinds when its budget and depth match
(:func:`sim.strategies.draft_tree_fallback.measured_rounds`). Only their shapes and tokens are used,
never their times.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from hwmodels.errors import HetSpecError


def round_kinds(results) -> tuple[Counter, dict]:
    """``(count, emitted)`` of the rounds of ``results`` (DecodeResults of ``draft-tree``): rounds per
    (draft passes, tokens verified) and the tokens they emitted in all."""
    count: Counter = Counter()
    emitted: dict = defaultdict(int)
    for res in results:
        passes = Counter(r.step for r in res.records if r.phase == "draft")
        verifies = [r for r in res.records if r.phase == "verify"]
        if len(verifies) != res.steps:
            raise HetSpecError(f"draft-tree rounds: {len(verifies)} verification records for {res.steps} steps")
        for rec in verifies:
            kind = (passes.get(rec.step, 0), rec.tokens_proposed + 1)
            count[kind] += 1
            emitted[kind] += rec.tokens_accepted
    return count, emitted


def rounds_table(results, config) -> dict:
    """The table of one budget (see the module docstring) from its ``results``."""
    count, emitted = round_kinds(results)
    total = sum(count.values())
    if total == 0:
        raise HetSpecError("draft-tree rounds: no rounds to count (decode at least two tokens)")
    kinds = [[passes, size, round(n / total, 6), round(emitted[(passes, size)] / n, 6)]
             for (passes, size), n in sorted(count.items())]
    return {"tree_width": config.tree_width, "draft_depth": config.draft_depth,
            "branch_threshold": config.branch_threshold, "alpha0": config.alpha0,
            "prompts": len(results), "rounds": total, "kinds": kinds}


def measure_draft_tree_rounds(models, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                              widths: Sequence[int], worker: str = "cpu") -> dict:
    """``meta["draft_tree_rounds"]``: the real decoder's rounds at each tree budget of ``widths`` (the
    decoder's default depth and thresholds) on ``prompts``."""
    from real.decode import draft_tree
    from real.decode.common import Clock
    from sim.acceptance_profile import rounds_key

    if not prompts:
        raise HetSpecError("draft-tree rounds: no prompts")
    out = {}
    for width in sorted(set(widths)):
        config = draft_tree.DraftTreeConfig(tree_width=width)
        results = [draft_tree.generate(models, list(p), max_new_tokens, config, Clock(worker)) for p in prompts]
        out[rounds_key(config.tree_width, config.draft_depth)] = rounds_table(results, config)
    return out
