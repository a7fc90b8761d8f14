"""LLMCad's self-adaptive fallback replayed on a profile's draft confidences (real.run.fallback_replay)
and how the draft-tree strategy weights its rounds with it (sim.strategies.draft_tree_fallback)."""

from __future__ import annotations

import numpy as np
import pytest

from hwmodels.errors import HetSpecError
from hwmodels.loader import get_platform
from real.run.fallback_replay import fallback_table, replay_fallback
from sim.acceptance import AcceptanceModel
from sim.model_spec import get_model
from sim.strategies import get_strategy
from sim.strategies.base import Problem, StrategyConfig
from sim.strategies.draft_tree import fallback_chain, main_branch_depth
from sim.strategies.draft_tree_fallback import conditioned_accuracy, measured_rounds, replayed_rounds, round_tree


def test_a_round_drafts_until_the_confidence_product_falls_below_alpha():
    # positions 0..9: hits and the draft's confidence of its greedy token after each position
    hit = np.array([1, 1, 1, 0, 1, 1, 1, 1, 1, 1], dtype=bool)
    conf = np.array([0.9, 0.9, 0.5, 0.3, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9])
    rounds = replay_fallback(hit, conf, cap=4, max_new_tokens=9, alpha0=0.2, decay=0.5)
    # round 1 rooted at 0: token 1 (conf 0.9), 2 (0.9 x 0.5 = 0.45), 3 (x 0.3 = 0.135 < 0.2): k = 3; hits at
    # 1, 2, then 3 missed: j = 2, alpha = 1/3. Root 3: token 1 (conf[4] 0.9), 2 (0.81), 3 (0.729),
    # 4 (0.656): cap 4, all hit -> alpha / 2. Root 8 (8 emitted): nothing left to draft, not a round.
    assert rounds == [(3, 2), (4, 4)]


def test_rounds_never_draft_more_than_is_left_to_emit():
    hit = np.ones(40, dtype=bool)
    conf = np.full(40, 0.99)
    rounds = replay_fallback(hit, conf, cap=8, max_new_tokens=12, alpha0=0.01, decay=0.5)
    assert rounds == [(8, 8), (1, 1)]          # 1 + 9 emitted, then room for 12 - 10 - 1 = 1 drafted token
    with pytest.raises(ValueError, match="cap must be >= 1"):
        replay_fallback(hit, conf, cap=0, max_new_tokens=12, alpha0=0.01, decay=0.5)


def test_the_table_weights_rounds_and_conditions_acceptance_on_their_length():
    table = fallback_table([(1, 0), (1, 1), (2, 1), (2, 2), (2, 0), (2, 2)], cap=3)
    assert table["rounds"] == 6
    assert table["weights"] == pytest.approx([2 / 6, 4 / 6, 0.0])
    assert table["accept"][0] == [0.5]
    assert table["accept"][1] == [0.75, round(2 / 3, 4)]      # 3 of 4 first tokens, then 2 of 3
    assert table["accept"][2] == [0.0, 0.0, 0.0]               # no round of 3


def test_a_replayed_table_is_validated():
    meta = {"draft_fallback": {"2": {"weights": [0.5, 0.4], "accept": [[0.5], [0.6, 0.7]]}}}
    with pytest.raises(HetSpecError, match=r"draft_fallback\[2\] needs 2 weights summing to 1"):
        replayed_rounds(meta, 2)
    assert replayed_rounds(meta, 3) is None and replayed_rounds(None, 2) is None


def test_conditioned_accuracy_replaces_the_main_branch_and_rescales_the_others():
    acc = np.array([[0.8, 0.1, 0.05], [0.8, 0.1, 0.05]])
    out = conditioned_accuracy(acc, [0.6])
    assert out[0].tolist() == pytest.approx([0.6, 0.2, 0.1])    # the others share the 0.4 the main leaves
    assert out[1].tolist() == acc[1].tolist()


TARGET = get_model("gpt2-large")
CAP_TABLE = {"weights": [0.5, 0.0, 0.5], "accept": [[0.5], [0.0, 0.0], [0.95, 0.95, 0.95]], "rounds": 100}


def _problem(meta: dict, ranks=(0.8,)) -> Problem:
    acc = AcceptanceModel(name="p", source="test", draft_alpha=0.8, meta={"draft_rank_accuracy": list(ranks), **meta})
    return Problem(TARGET, get_platform("jetson-tx2"), acc, context=128, dtype="fp32")


def test_the_strategy_weights_its_rounds_by_the_replay_where_the_profile_has_one():
    strategy = get_strategy("draft-tree")
    cfg = StrategyConfig(method="draft-tree", tree_width=4, draft_depth=3, tree_shape="chain")
    plain, replayed = _problem({}), _problem({"draft_fallback": {"3": CAP_TABLE}})
    rounds = strategy.rounds(replayed, strategy.resolve(replayed, cfg))
    assert [(main_branch_depth(r.tree), r.weight) for r in rounds] == [(1, 0.5), (3, 0.5)]
    # a chain of k tokens accepted at the conditional rates: 1 + sum of their running products
    assert rounds[0].tokens == pytest.approx(1.5)
    assert rounds[1].tokens == pytest.approx(1 + 0.95 + 0.95 ** 2 + 0.95 ** 3)
    # without the replay: the calibrated-draft chain of the acceptance rate
    base = strategy.rounds(plain, strategy.resolve(plain, cfg))
    assert [r.weight for r in base] == pytest.approx([w for w in fallback_chain(0.8, 3) if w > 0])
    est = strategy.estimate(replayed, strategy.resolve(replayed, cfg))
    assert est.draft_passes_per_step == pytest.approx(0.5 * 1 + 0.5 * 3)
    assert est.tokens_per_step == pytest.approx(0.5 * 1.5 + 0.5 * (1 + 0.95 + 0.95 ** 2 + 0.95 ** 3))


RANKS = (0.8, 0.1)
ROUNDS = {"tree_width": 6, "draft_depth": 3, "branch_threshold": 0.3, "alpha0": 0.01, "prompts": 2, "rounds": 10,
          "kinds": [[2, 3, 0.5, 2.0], [3, 6, 0.4, 3.5], [0, 1, 0.1, 1.0]]}


def test_round_tree_has_the_passes_and_tokens_it_is_asked_for():
    for passes, size in ((0, 1), (1, 2), (2, 3), (3, 6), (2, 9)):
        tree = round_tree(passes, size)
        assert (tree.n_internal, tree.size) == (passes, size)
        assert main_branch_depth(tree) == passes
    for bad in ((2, 2), (0, 3), (-1, 1)):
        with pytest.raises(HetSpecError, match="round_tree"):
            round_tree(*bad)


def test_measured_rounds_replace_the_tree_model_at_their_budget_and_depth():
    strategy = get_strategy("draft-tree")
    cfg = StrategyConfig(method="draft-tree", tree_width=6, draft_depth=3)
    measured = _problem({"draft_tree_rounds": {"6x3": ROUNDS}}, RANKS)
    est = strategy.estimate(measured, strategy.resolve(measured, cfg))
    assert est.tokens_per_step == pytest.approx(0.5 * 2.0 + 0.4 * 3.5 + 0.1 * 1.0)
    assert est.draft_passes_per_step == pytest.approx(0.5 * 2 + 0.4 * 3)
    # another budget or depth keeps the model
    plain = strategy.estimate(_problem({}, RANKS), strategy.resolve(_problem({}, RANKS), cfg))
    other = _problem({"draft_tree_rounds": {"6x4": ROUNDS}}, RANKS)
    assert strategy.estimate(other, strategy.resolve(other, cfg)).tokens_per_step == pytest.approx(plain.tokens_per_step)
    assert plain.tokens_per_step != pytest.approx(est.tokens_per_step)


@pytest.mark.parametrize("kinds, message", [
    ([[2, 3, 0.5, 2.0], [3, 6, 0.4, 3.5]], "shares must sum to 1"),
    ([[3, 3, 1.0, 2.0]], "impossible"),          # as many passes as tokens verified
    ([[2, 7, 1.0, 2.0]], "impossible"),          # over the budget
    ([[2, 3, 1.0, 4.0]], "impossible"),          # emits more than it verified
    ([[2, 3]], "kinds must be"),
])
def test_measured_rounds_are_validated(kinds, message):
    with pytest.raises(HetSpecError, match=message):
        measured_rounds({"draft_tree_rounds": {"6x3": {**ROUNDS, "kinds": kinds}}}, 6, 3)
    assert measured_rounds({"draft_tree_rounds": {"6x3": ROUNDS}}, 8, 3) is None
