"""Tree search: the best token tree for a budget, by greedy order and by dynamic programming.

Under the independence model of Medusa §2.3.3 (``acc[d][r]``: the rank-r candidate at depth
d+1 is correct), a tree's expected tokens per step is 1 + the sum over its nodes of the product
of accuracies along the node's path. For a size budget alone the greedy tree (highest-valued
frontier node first) is optimal (:meth:`sim.tree.TokenTree.greedy`). But the *cost* of a step is
not a function of the size alone: Medusa pays one head per tree level, a draft model one forward
pass per level. So the optimizer needs the best tree for every (size, depth budget) pair, and,
when the proposer offers at most k candidates per node (a draft model's top-k), under a
per-node branching cap as well.

:func:`optimal_values` solves that exactly by dynamic programming over subtrees. For a node at
depth d with ``n`` nodes in its subtree,

    f[d][n] = 1 + max over allocations (k_0 + ... + k_{R-1} = n - 1, at most C of them > 0)
                  of sum_r acc[d][r] * f[d+1][k_r]           (k_r = 0: no rank-r child),

a knapsack over the ranks (O(D * R * N^2) for depth D, R ranks, N nodes); ``f[0][n]`` is the best
expected tokens of any n-node tree within the depth budget, for every n at once.
:func:`optimal_tree` rebuilds the tree. Greedy and DP agree whenever there is no branching cap
(tested); with a cap and unsorted accuracy rows, or when the objective trades tokens against a
depth-dependent cost (:func:`best_for_cost`), the DP is the one that stays optimal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hwmodels.errors import HetSpecError
from sim.tree import MEDUSA_MC_SIM_7B_63, TokenTree, _as_accuracy_matrix

_NEG = -np.inf


@dataclass(frozen=True)
class DPTable:
    """Result of the DP for one depth budget: ``best[n]`` = best expected tokens of an n-node tree
    (index 0 unused, -inf where no tree of that size exists), plus the choices that rebuild trees."""

    acc: np.ndarray
    max_depth: int
    max_children: int | None
    best: np.ndarray
    # per depth d: (K [R, C, N] chosen size of the rank-r child at state (c, m); best_c [N])
    choices: tuple

    def tree(self, size: int) -> TokenTree:
        """The optimal ``size``-node tree (raises if none exists within the budgets)."""
        if not 1 <= size < len(self.best) or not np.isfinite(self.best[size]):
            cap = "" if self.max_children is None else f" and {self.max_children} children per node"
            raise HetSpecError(f"no tree of {size} tokens within depth {self.max_depth}{cap} from "
                               f"{self.acc.shape[0]} depths x {self.acc.shape[1]} ranks")
        paths: list[tuple[int, ...]] = []
        self._rebuild(0, size, (), paths)
        return TokenTree.from_choices(paths)

    def _rebuild(self, d: int, n: int, path: tuple[int, ...], out: list) -> None:
        if n <= 1 or d >= self.max_depth:
            return
        K, best_c = self.choices[d]
        m = n - 1
        c = int(best_c[m])
        for r in range(K.shape[0] - 1, -1, -1):
            k = int(K[r, c, m])
            if k > 0:
                out.append(path + (r,))
                self._rebuild(d + 1, k, path + (r,), out)
                m -= k
                if self.max_children is not None:
                    c -= 1
        if m != 0:
            raise HetSpecError("tree DP: reconstruction did not use the whole budget (internal error)")


def optimal_values(accuracies, max_size: int, max_depth: int, max_children: int | None = None) -> DPTable:
    """Best expected tokens for every tree size 1..``max_size`` within ``max_depth`` levels and at most
    ``max_children`` children per node (None: no cap)."""
    acc = _as_accuracy_matrix(accuracies)
    if max_size < 1:
        raise HetSpecError(f"tree size must be >= 1 (got {max_size})")
    if max_depth < 0:
        raise HetSpecError(f"depth budget must be >= 0 (got {max_depth})")
    if max_children is not None and max_children < 0:
        raise HetSpecError(f"children per node must be >= 0 (got {max_children})")
    D = min(int(max_depth), acc.shape[0])
    R = acc.shape[1]
    N = int(max_size)
    track = max_children is not None
    C = (min(int(max_children), R) + 1) if track else 1      # children-count states
    m_idx = np.arange(N)[:, None]                            # [N, 1] budget m (nodes below the node)
    k_idx = np.arange(N)[None, :]                            # [1, N] size k of one child subtree
    valid = (k_idx >= 1) & (k_idx <= m_idx)
    src = np.where(valid, m_idx - k_idx, 0)
    # f_child[k]: best subtree value with k nodes rooted one level deeper (k = 0 unused).
    f_child = np.full(N, _NEG)
    if N > 1:
        f_child[1] = 1.0      # a leaf at the deepest allowed level
    choices: list = [None] * D
    for d in range(D - 1, -1, -1):
        G = np.full((C, N), _NEG)          # G[c, m]: best over ranks so far with m nodes in c children
        G[0, 0] = 0.0
        K = np.zeros((R, C, N), dtype=np.int32)
        for r in range(R):
            # [N] value of a rank-r child of size k; a size no subtree has stays impossible (0 x -inf is not 0)
            gain = np.full(N, _NEG)
            reachable = f_child > _NEG
            gain[reachable] = acc[d, r] * f_child[reachable]
            new = G.copy()
            for c in range(1 if track else 0, C):
                prev = G[c - 1] if track else G[0]
                cand = np.where(valid, prev[src] + gain[k_idx], _NEG)        # [N, N]
                k_best = np.argmax(cand, axis=1)
                v_best = cand[np.arange(N), k_best]
                better = v_best > new[c] + 1e-15
                new[c] = np.where(better, v_best, new[c])
                K[r, c] = np.where(better, k_best, 0)
            G = new
        best_c = np.argmax(G, axis=0)                         # [N]
        f_here = 1.0 + G[best_c, np.arange(N)]               # [N]: index m = nodes below the root
        f_sub = np.full(N, _NEG)                              # index k = subtree size (k - 1 below)
        f_sub[1:] = f_here[: N - 1]
        choices[d] = (K, best_c)
        f_child = f_sub
    best = np.full(N + 1, _NEG)
    if D == 0:
        best[1] = 1.0
        return DPTable(acc, 0, max_children, best, ())
    best[1:] = f_here   # the root's subtree values: best[n] for n = 1..N
    return DPTable(acc, D, max_children, best, tuple(choices))


@lru_cache(maxsize=256)
def _cached_table(acc_key: tuple, max_size: int, max_depth: int, max_children: int | None) -> DPTable:
    return optimal_values(np.array(acc_key), max_size, max_depth, max_children)


def accuracy_key(accuracies) -> tuple:
    """A hashable copy of an accuracy matrix (cache key)."""
    return tuple(tuple(float(v) for v in row) for row in _as_accuracy_matrix(accuracies))


def dp_table(accuracies, max_size: int, max_depth: int, max_children: int | None = None) -> DPTable:
    """:func:`optimal_values`, cached per (accuracies, budgets): one DP serves every size up to ``max_size``."""
    return _cached_table(accuracy_key(accuracies), int(max_size), int(max_depth), max_children)


def optimal_tree(accuracies, size: int, max_depth: int, max_children: int | None = None) -> TokenTree:
    """The tree of exactly ``size`` tokens with the highest expected accepted length within the budgets."""
    return dp_table(accuracies, size, max_depth, max_children).tree(int(size))


def best_for_cost(accuracies, sizes: Sequence[int], depths: Sequence[int],
                  cost_s: Callable[[int, int], float], max_children: int | None = None):
    """The (size, depth budget) maximising expected tokens / ``cost_s(size, depth)``, with its tree.

    Returns ``(tokens_per_s, size, depth, tree)``. ``cost_s`` is the step time of a tree of that
    size and depth (e.g. one Medusa head or one draft pass per level).
    """
    acc = _as_accuracy_matrix(accuracies)
    best = None
    for depth in depths:
        table = optimal_values(acc, max(sizes), depth, max_children)
        for size in sizes:
            value = table.best[size]
            if not np.isfinite(value):
                continue
            tree = table.tree(size)
            rate = value / cost_s(size, tree.depth)
            if best is None or rate > best[0] + 1e-15:
                best = (float(rate), int(size), int(tree.depth), tree)
    if best is None:
        raise HetSpecError("no tree fits the given sizes and depths")
    return best


# ---------------------------------------------------------------------- greedy prefixes
@lru_cache(maxsize=256)
def _cached_greedy(acc_key: tuple, max_size: int, max_depth: int | None) -> tuple[TokenTree, ...]:
    return tuple(greedy_prefix_trees(np.array(acc_key), max_size, max_depth))


def greedy_trees(accuracies, max_size: int, max_depth: int | None = None) -> tuple[TokenTree, ...]:
    """:func:`greedy_prefix_trees`, cached per (accuracies, budgets)."""
    return _cached_greedy(accuracy_key(accuracies), int(max_size), None if max_depth is None else int(max_depth))


def greedy_prefix_trees(accuracies, max_size: int, max_depth: int | None = None) -> list[TokenTree]:
    """Greedy trees of every size 1..``max_size`` (index i = size i + 1), from one greedy run.

    The greedy tree of size n is the first n - 1 nodes of the greedy tree of size ``max_size`` in
    the order greedy adds them (highest path value first, ties to shallower, lower-ranked paths).
    """
    acc = _as_accuracy_matrix(accuracies)
    big = TokenTree.greedy(acc, max_size, max_depth)
    values = big.node_values(acc)
    order = sorted(range(1, big.size), key=lambda i: (-values[i], big.depths[i], big.choices[i - 1]))
    paths = [big.choices[i - 1] for i in order]
    return [TokenTree.from_choices(paths[: n - 1]) for n in range(1, max_size + 1)]


def medusa_list_tree(width: int, choices: Sequence[Sequence[int]] = MEDUSA_MC_SIM_7B_63) -> TokenTree:
    """The first ``width - 1`` nodes of a Medusa choice list in its own order (``mc_sim_7b_63``
    by default, whose order is the calibration's greedy order, so every prefix is a tree)."""
    key = tuple(tuple(int(r) for r in c) for c in choices)
    if not 1 <= width <= len(key) + 1:
        raise HetSpecError(f"the Medusa choice list has {len(key) + 1} tokens; width {width} is outside 1.."
                           f"{len(key) + 1} (give per-head accuracies to build larger trees)")
    return _list_prefix(key, int(width))


@lru_cache(maxsize=1024)
def _list_prefix(choices: tuple, width: int) -> TokenTree:
    return TokenTree.from_choices(choices[: width - 1])
