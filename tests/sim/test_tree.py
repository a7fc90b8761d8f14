"""The shared token tree: builders, derived structure, expected accepted length."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.tree import MEDUSA_MC_SIM_7B_63, TokenTree


def test_chain():
    t = TokenTree.chain(4)
    assert t.size == t.width == 5 and t.depth == 4 and t.paths == ((0, 1, 2, 3, 4),)
    assert t.attention_mask().sum() == 15  # lower triangle
    assert TokenTree.chain(0).size == 1


def test_cartesian_matches_medusa_fig2():
    t = TokenTree.cartesian([2, 3])
    # Medusa Fig. 2: s1=2, s2=3 -> 6 candidates, 2 + 6 = 8 tree tokens (+ root)
    assert t.size == 1 + 2 + 6 and len(t.leaves) == 6 and t.level_sizes == (1, 2, 6)
    mask = t.attention_mask()
    for i in range(t.size):  # a token attends to itself and its ancestors only, never to siblings
        assert set(np.flatnonzero(mask[i])) == set(t.ancestors(i))


@pytest.mark.parametrize("sizes", [[1], [3], [2, 2], [4, 3, 2], [10, 1, 1]])
def test_cartesian_width_formula(sizes):
    expected = 1 + sum(int(np.prod(sizes[: k + 1])) for k in range(len(sizes)))
    assert TokenTree.cartesian(sizes).size == expected


def test_medusa_default_tree_has_64_tokens_and_depth_4():
    t = TokenTree.medusa_default()
    assert t.size == 64 and t.depth == 4
    assert set(t.choices) == set(MEDUSA_MC_SIM_7B_63)
    assert t.position_ids(100)[0] == 100 and t.position_ids(100).max() == 104


def test_choices_round_trip():
    t = TokenTree.from_choices([[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
    assert TokenTree.from_choices(t.choices) == t


def test_from_parents_and_accepted_path():
    t = TokenTree.from_parents([-1, 0, 0, 1, 1, 2, 3])
    assert t.ranks == (0, 0, 1, 0, 1, 0, 0)
    assert t.accepted_path([True, True, True, False, True, True, True]) == (0, 1, 4)
    assert t.accepted_path([True, False, True, True, True, True, True]) == (0, 2, 5)
    assert t.accepted_path([True] + [False] * 6) == (0,)


@pytest.mark.parametrize("parents, ranks, message", [
    ([0, 0], [0, 0], "must have parent -1"),
    ([-1, 2, 0], [0, 0, 0], "parents must come earlier"),
    ([-1, 0, 0], [0, 1, 1], "repeats rank 1 under parent 0"),
    ([-1, 0], [0, -1], "negative rank"),
    ([-1, 0], [0], "2 parents but 1 ranks"),
])
def test_invalid_trees_are_rejected(parents, ranks, message):
    with pytest.raises(ValueError, match=message):
        TokenTree(tuple(parents), tuple(ranks))


def test_missing_prefix_in_choices():
    with pytest.raises(ValueError, match=r"tree choice \[0, 1\] has no parent path \[0\]"):
        TokenTree.from_choices([[1], [0, 1]])


ACC = np.array([[0.6, 0.15, 0.05], [0.45, 0.1, 0.05], [0.35, 0.1, 0.04]])


def test_expected_accepted_length_is_one_plus_sum_of_path_products():
    t = TokenTree.from_choices([[0], [1], [0, 0], [0, 0, 0], [1, 1]])
    expected = 1 + 0.6 + 0.15 + 0.6 * 0.45 + 0.6 * 0.45 * 0.35 + 0.15 * 0.1
    assert t.expected_accepted_length(ACC) == pytest.approx(expected)
    assert TokenTree.chain(0).expected_accepted_length(ACC) == 1.0


def test_expected_length_matches_monte_carlo():
    """Per depth the correct rank is drawn from the accuracy row; the walk accepts the longest path."""
    rng = np.random.default_rng(0)
    tree = TokenTree.greedy(ACC, 10)
    rows = np.hstack([ACC, 1 - ACC.sum(axis=1, keepdims=True)])  # last column: no rank correct
    n = 100_000
    draws = np.stack([rng.choice(rows.shape[1], size=n, p=row) for row in rows], axis=1)
    choice_index = {c: i for i, c in enumerate(tree.choices)}
    total = 0
    for correct in draws:
        length, path = 1, ()
        for rank in correct:
            path = path + (int(rank),)
            if path not in choice_index:
                break
            length += 1
        total += length
    assert total / n == pytest.approx(tree.expected_accepted_length(ACC), abs=0.01)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 3))
def test_greedy_tree_is_optimal_among_all_same_size_subtrees(size, max_depth):
    """Greedy keeps the highest-valued paths, so no connected tree of the same size does better."""
    size = min(size, 1 + sum(ACC.shape[1] ** d for d in range(1, max_depth + 1)))
    tree = TokenTree.greedy(ACC, size, max_depth=max_depth)
    assert tree.size == size and tree.depth <= max_depth
    values = sorted((float(np.prod([ACC[d, r] for d, r in enumerate(c)])) for c in _all_paths(max_depth)),
                    reverse=True)
    assert tree.expected_accepted_length(ACC) == pytest.approx(1 + sum(values[: size - 1]))


def _all_paths(max_depth):
    for depth in range(1, max_depth + 1):
        yield from itertools.product(range(ACC.shape[1]), repeat=depth)


def test_acceptance_profile_that_does_not_fit_the_tree():
    with pytest.raises(ValueError, match="2 depths but the tree is 3 deep"):
        TokenTree.chain(3).expected_accepted_length(ACC[:2])
    with pytest.raises(ValueError, match="3 ranks but the tree uses rank 5"):
        TokenTree.cartesian([6]).expected_accepted_length(ACC)
    with pytest.raises(ValueError, match="sum to <= 1"):
        TokenTree.chain(1).expected_accepted_length([[0.8, 0.5]])
    with pytest.raises(ValueError, match="cannot build a tree of 100 tokens"):
        TokenTree.greedy(ACC[:1, :2], 100)
