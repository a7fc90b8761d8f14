"""LLMCad's formulas as implemented by ``draft-tree``: the branch pacer (Eq. 1-2), tree-cumulative
confidence, the fallback threshold update (Eq. 3), and tree growth with a scripted draft."""

from __future__ import annotations

import pytest
import torch

from hwmodels.errors import HetSpecError
from real.decode.draft_tree import (
    DraftTreeConfig,
    grow_tree,
    matching_branch_length,
    pacer_deficits,
    pacer_pick,
    tree_confidence,
    update_alpha,
)
from sim.tree import TokenTree

VOCAB = 10


def test_pacer_deficit_is_eq_1():
    # f(x) = M * C_x / sum C - T_x with M = 10, C = (0.5, 0.3, 0.2), T = (3, 1, 2)
    f = pacer_deficits([0.5, 0.3, 0.2], [3, 1, 2], budget=10)
    assert f == pytest.approx([5.0 - 3, 3.0 - 1, 2.0 - 2])


def test_pacer_extends_the_branch_furthest_below_its_share():
    assert pacer_pick([0.5, 0.3, 0.2], [3, 1, 2], budget=10) == 0         # f = 2, 2, 0: tie -> first
    assert pacer_pick([0.5, 0.3, 0.2], [4, 1, 2], budget=10) == 1         # f = 1, 2, 0
    assert pacer_pick([0.4, 0.4], [2, 1], budget=8) == 1                  # equal confidence: shorter one
    assert pacer_pick([0.9, 0.1], [1, 0], budget=20) == 0                 # likelier branch grows longer
    assert pacer_pick([0.5, 0.3, 0.2], [3, 1, 2], budget=10, eligible=[True, False, True]) == 0
    assert pacer_pick([0.5, 0.5], [1, 1], budget=4, eligible=[False, False]) is None


def test_pacer_allocates_tokens_in_proportion_to_confidence():
    """Repeatedly extending the largest-deficit branch drives lengths to M * C_x / sum C."""
    conf, lengths = [0.6, 0.3, 0.1], [0, 0, 0]
    for _ in range(20):
        lengths[pacer_pick(conf, lengths, budget=20)] += 1
    assert lengths == [12, 6, 2]


def test_tree_confidence_is_the_max_over_branches():
    assert tree_confidence([0.2, 0.05, 0.6]) == 0.6


def test_alpha_update_is_eq_3():
    assert update_alpha(0.01, 5, 5) == pytest.approx(0.005)          # no error: alpha * 0.5
    assert update_alpha(0.2, 3, 8) == pytest.approx(5 / 8)           # errors: wrong fraction of the branch
    assert update_alpha(0.2, 0, 4) == 1.0
    with pytest.raises(HetSpecError):
        update_alpha(0.1, 5, 4)


def test_matching_branch_follows_the_top1_continuation():
    #      0
    #    1   2        (1 = rank 0, 2 = rank 1)
    #   3 4           (3 = rank 0, 4 = rank 1 under 1)
    #   5             (rank 0 under 3)
    tree = TokenTree((-1, 0, 0, 1, 1, 3), (0, 0, 1, 0, 1, 0))
    assert matching_branch_length(tree, (0, 1)) == 3       # 1 -> 3 -> 5
    assert matching_branch_length(tree, (0, 2)) == 1       # 2 is a leaf: branch fully matched
    assert matching_branch_length(tree, (0,)) == 3


def _scripted(dists: dict[int, list[float]], default: list[float]):
    """A fake draft: the distribution after node n is dists[depth of n] (or ``default``); records calls."""
    calls = []

    def run_draft(tree, node):
        calls.append(node)
        p = dists.get(tree.depths[node], default)
        return torch.tensor(p + [0.0] * (VOCAB - len(p)))
    return run_draft, calls


def test_confidence_branching_opens_a_branch_per_candidate_above_threshold():
    run_draft, calls = _scripted({0: [0.5, 0.35, 0.15]}, default=[0.99, 0.01])
    tree = grow_tree(7, run_draft, budget=4, config=DraftTreeConfig(tree_width=4), alpha=0.0)
    # root -> children (0.5, 0.35); 0.15 is below the 0.3 threshold and opens nothing
    assert tree.parents[:3] == [-1, 0, 0] and tree.tokens[1:3] == [0, 1] and tree.ranks[1:3] == [0, 1]
    assert tree.cum[1:3] == pytest.approx([0.5, 0.35])
    # the budget of 4 tokens allows one more pass: the pacer extends the likelier branch (node 1)
    assert calls == [0, 1] and tree.size == 4 and tree.parents[3] == 1


def test_fallback_verifies_as_soon_as_tree_confidence_drops_below_alpha():
    # every pass has top-1 confidence 0.5: after n passes T_c = 0.5 ** n
    run_draft, calls = _scripted({}, default=[0.5, 0.25, 0.25])
    tree = grow_tree(1, run_draft, budget=64, config=DraftTreeConfig(tree_width=64, draft_depth=60), alpha=0.1)
    # 0.5, 0.25, 0.125 >= 0.1 continue; 0.0625 < 0.1 stops: four passes, a chain of depth 4
    assert len(calls) == 4 and tree.size == 5 and max(tree.depths) == 4
    assert tree_confidence([tree.cum[b] for b in tree.branches]) == pytest.approx(0.0625)


def test_depth_cap_and_budget_stop_the_growth():
    run_draft, calls = _scripted({}, default=[0.95, 0.05])
    tree = grow_tree(1, run_draft, budget=64, config=DraftTreeConfig(tree_width=64, draft_depth=3), alpha=0.0)
    assert max(tree.depths) == 3 and len(calls) == 3
    run_draft, calls = _scripted({}, default=[0.4, 0.35, 0.25])
    tree = grow_tree(1, run_draft, budget=6, config=DraftTreeConfig(tree_width=6), alpha=0.0)
    assert tree.size == 6


def test_tree_is_a_valid_token_tree_with_fed_nodes_first():
    run_draft, calls = _scripted({0: [0.4, 0.35, 0.25], 1: [0.6, 0.4]}, default=[0.7, 0.3])
    tree = grow_tree(1, run_draft, budget=12, config=DraftTreeConfig(tree_width=12, branch_threshold=0.3),
                     alpha=0.0)
    shape = tree.to_token_tree()
    assert shape.size == tree.size == 12
    assert set(tree.branches) | set(calls) == set(range(tree.size))      # every node fed or a branch tip
    assert not set(tree.branches) & set(calls)
    assert all(not shape.children[b] for b in tree.branches)           # branch tips are leaves


def test_the_draft_runs_once_per_internal_node_of_its_tree():
    # a pass takes all of a node's children from one distribution, and the leaves are never fed: the
    # passes the simulator prices for a draft tree (TokenTree.n_internal), not one per drafted token
    run_draft, calls = _scripted({0: [0.4, 0.35, 0.25], 1: [0.6, 0.4]}, default=[0.7, 0.3])
    tree = grow_tree(1, run_draft, budget=12, config=DraftTreeConfig(tree_width=12, branch_threshold=0.3),
                     alpha=0.0)
    shape = tree.to_token_tree()
    assert len(calls) == shape.n_internal < shape.size - 1
