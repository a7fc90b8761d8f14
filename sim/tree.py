"""Token trees: the one definition shared by the simulator and the real PyTorch path.

A tree holds the tokens verified in one target forward pass. Node 0 is the *root*: the token
already chosen by the target (for Medusa the LM-head token, for draft models the last accepted
token). Every other node is a speculative token proposed by a draft model or a Medusa head.
``parents[i] < i`` for every non-root node, so nodes are in topological order and the tree can be
fed to the target as one block of ``size`` tokens.

``ranks[i]`` is the rank of node i among the candidates its proposer offered after its parent
(0 = top-1). For Medusa, a node at depth k was proposed by head k.

Vocabulary: the *width* of a tree is the number of tokens verified per step (``size``, root
included), as in Ghidorah's "verification width". A chain of k draft tokens has width k + 1.

Acceptance model used by :meth:`TokenTree.expected_accepted_length` (Medusa §2.3.3): let
``acc[d][r]`` be the probability that the rank-r candidate at depth d+1 is the correct token
(top-(r+1) accuracy minus top-r accuracy). Depths are independent and ranks at one depth are
mutually exclusive, so a node's path is accepted with probability ``prod(acc[depth-1][rank])``
over the path, and the expected tokens per step is 1 + the sum of those values over all nodes.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from numbers import Integral
from pathlib import Path
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from hwmodels.errors import HetSpecError

#: The 63-node tree of FasterDecoding/Medusa ``mc_sim_7b_63`` (Medusa-2 Vicuna-7B, four heads): the sparse
#: tree of Medusa §2.3.3 drawn in App. C, Fig. 6 (the node list is the reference code's). With the root: 64 tokens.
MEDUSA_MC_SIM_7B_63: tuple[tuple[int, ...], ...] = (
    (0,), (0, 0), (1,), (0, 1), (2,), (0, 0, 0), (1, 0), (0, 2), (3,), (0, 3), (4,), (0, 4),
    (2, 0), (0, 5), (0, 0, 1), (5,), (0, 6), (6,), (0, 7), (0, 1, 0), (1, 1), (7,), (0, 8),
    (0, 0, 2), (3, 0), (0, 9), (8,), (9,), (1, 0, 0), (0, 2, 0), (1, 2), (0, 0, 3), (4, 0),
    (2, 1), (0, 0, 4), (0, 0, 5), (0, 0, 0, 0), (0, 1, 1), (0, 0, 6), (0, 3, 0), (5, 0), (1, 3),
    (0, 0, 7), (0, 0, 8), (0, 0, 9), (6, 0), (0, 4, 0), (1, 4), (7, 0), (0, 1, 2), (2, 0, 0),
    (3, 1), (2, 2), (8, 0), (0, 5, 0), (1, 5), (1, 0, 1), (0, 2, 1), (9, 0), (0, 6, 0),
    (0, 0, 0, 1), (1, 6), (0, 7, 0),
)


@dataclass(frozen=True)
class TokenTree:
    """A token tree in topological order; node 0 is the root.

    Build one with :meth:`chain`, :meth:`cartesian`, :meth:`from_choices`, :meth:`greedy` or
    :meth:`from_parents`; the constructor validates its arguments.
    """

    parents: tuple[int, ...]
    ranks: tuple[int, ...]

    def __post_init__(self) -> None:
        parents, ranks = tuple(int(p) for p in self.parents), tuple(int(r) for r in self.ranks)
        object.__setattr__(self, "parents", parents)
        object.__setattr__(self, "ranks", ranks)
        if not parents:
            raise HetSpecError("a token tree needs at least the root node")
        if len(parents) != len(ranks):
            raise HetSpecError(f"token tree: {len(parents)} parents but {len(ranks)} ranks")
        if parents[0] != -1:
            raise HetSpecError(f"token tree: node 0 is the root and must have parent -1, got {parents[0]}")
        seen: set[tuple[int, int]] = set()
        for i in range(1, len(parents)):
            p, r = parents[i], ranks[i]
            if not 0 <= p < i:
                raise HetSpecError(f"token tree: node {i} has parent {p}; parents must come earlier (0 <= parent < {i})")
            if r < 0:
                raise HetSpecError(f"token tree: node {i} has negative rank {r}")
            if (p, r) in seen:
                raise HetSpecError(f"token tree: node {i} repeats rank {r} under parent {p}")
            seen.add((p, r))

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_parents(cls, parents: Sequence[int], ranks: Sequence[int] | None = None) -> "TokenTree":
        """A tree from a parent list (``parents[0] == -1``); ranks default to sibling order."""
        if ranks is None:
            counter: dict[int, int] = {}
            ranks = []
            for p in parents:
                ranks.append(counter.get(p, 0))
                counter[p] = counter.get(p, 0) + 1
        return cls(tuple(parents), tuple(ranks))

    @classmethod
    def chain(cls, k: int) -> "TokenTree":
        """The root and k speculative tokens in a line (width k + 1): draft-model speculation."""
        if k < 0:
            raise HetSpecError(f"chain length must be >= 0, got {k}")
        return cls(tuple(range(-1, k)), (0,) * (k + 1))

    @classmethod
    def cartesian(cls, sizes: Sequence[int]) -> "TokenTree":
        """Medusa's dense tree: level k keeps the top-``sizes[k-1]`` candidates under every node.

        Width = 1 + sum_k prod_{i<=k} s_i (Medusa §2.3.1; s = (2, 3) gives 1 + 8 tokens).
        """
        if any(int(s) < 1 for s in sizes):
            raise HetSpecError(f"cartesian tree sizes must be >= 1, got {list(sizes)}")
        choices: list[tuple[int, ...]] = []
        level: list[tuple[int, ...]] = [()]
        for s in sizes:
            level = [path + (r,) for path in level for r in range(int(s))]
            choices.extend(level)
        return cls.from_choices(choices)

    @classmethod
    def from_choices(cls, choices: Sequence[Sequence[int]]) -> "TokenTree":
        """A tree from Medusa-style choice paths (rank lists from the root, root excluded).

        Nodes are ordered by (depth, path), as Medusa's ``generate_medusa_buffers`` sorts them.
        Every prefix of a path must itself be a path. Anything but a list of lists of ranks >= 0 is one line.
        """
        _check_choices(choices)
        paths = sorted({tuple(int(r) for r in c) for c in choices}, key=lambda c: (len(c), c))
        index: dict[tuple[int, ...], int] = {(): 0}
        parents, ranks = [-1], [0]
        for path in paths:
            if not path:
                continue
            if path[:-1] not in index:
                raise HetSpecError(f"tree choice {list(path)} has no parent path {list(path[:-1])} in the list")
            index[path] = len(parents)
            parents.append(index[path[:-1]])
            ranks.append(path[-1])
        return cls(tuple(parents), tuple(ranks))

    @classmethod
    def from_file(cls, path: str | Path) -> "TokenTree":
        """A tree from a JSON file of Medusa choice paths: ``[[0], [0, 0], [1], ...]`` or ``{"choices": [...]}``
        (``hetspec predict --tree-choices``, ``hetspec run --tree``); anything else is one line naming the file."""
        from hwmodels.datafile import read_data_file

        data = read_data_file(path, "tree file")
        choices = data.get("choices", data) if isinstance(data, dict) else data
        try:
            tree = cls.from_choices(choices)
        except HetSpecError as exc:
            raise HetSpecError(f"tree file {path}: {exc}") from None
        if any(isinstance(c, list) and not c for c in choices):
            raise HetSpecError(f"tree file {path}: an empty path [] is the root, which every tree has; list the "
                               "paths below it")
        if tree.size == 1:
            raise HetSpecError(f"tree file {path}: holds no paths; a tree needs at least one, e.g. [[0]]")
        return tree

    @classmethod
    def medusa_default(cls) -> "TokenTree":
        """The 64-token ``mc_sim_7b_63`` tree of the Medusa repository."""
        return cls.from_choices(MEDUSA_MC_SIM_7B_63)

    @classmethod
    def greedy(cls, accuracies: "np.ndarray | Sequence[Sequence[float]]", size: int,
               max_depth: int | None = None) -> "TokenTree":
        """The best tree of ``size`` tokens (root included) under the independence model.

        Medusa §2.3.3 / Ghidorah ARCA: repeatedly add the frontier node of highest path value
        ``prod acc[depth-1][rank]``. A child's value never exceeds its parent's, so this picks the
        ``size - 1`` highest-valued paths and maximises the expected accepted length exactly.
        Ties break towards shallower, lower-ranked paths, so the result is deterministic.
        """
        acc = _as_accuracy_matrix(accuracies)
        if size < 1:
            raise HetSpecError(f"tree size must be >= 1 (the root), got {size}")
        depth_cap = acc.shape[0] if max_depth is None else min(int(max_depth), acc.shape[0])
        n_ranks = acc.shape[1]
        chosen: list[tuple[int, ...]] = []
        # heap of (-value, depth, path)
        heap: list[tuple[float, int, tuple[int, ...]]] = []
        if depth_cap >= 1:
            for r in range(n_ranks):
                heapq.heappush(heap, (-float(acc[0, r]), 1, (r,)))
        while heap and len(chosen) < size - 1:
            neg_value, depth, path = heapq.heappop(heap)
            chosen.append(path)
            if depth < depth_cap:
                for r in range(n_ranks):
                    heapq.heappush(heap, (neg_value * float(acc[depth, r]), depth + 1, path + (r,)))
        if len(chosen) < size - 1:
            raise HetSpecError(
                f"cannot build a tree of {size} tokens from {acc.shape[0]} depths x {n_ranks} ranks"
                f"{'' if max_depth is None else f' with depth <= {max_depth}'}"
            )
        return cls.from_choices(chosen)

    # ------------------------------------------------------------------ structure
    @property
    def size(self) -> int:
        """Number of tokens verified in one pass, root included."""
        return len(self.parents)

    @property
    def width(self) -> int:
        """Tree width in Ghidorah's sense: tokens verified per step (= :attr:`size`)."""
        return len(self.parents)

    def __len__(self) -> int:
        return len(self.parents)

    @cached_property
    def depths(self) -> tuple[int, ...]:
        out = [0] * len(self.parents)
        for i in range(1, len(self.parents)):
            out[i] = out[self.parents[i]] + 1
        return tuple(out)

    @property
    def depth(self) -> int:
        """Depth of the deepest node (0 for the root alone)."""
        return max(self.depths)

    @cached_property
    def children(self) -> tuple[tuple[int, ...], ...]:
        kids: list[list[int]] = [[] for _ in self.parents]
        for i in range(1, len(self.parents)):
            kids[self.parents[i]].append(i)
        return tuple(tuple(k) for k in kids)

    @cached_property
    def leaves(self) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.children) if not k)

    @property
    def n_internal(self) -> int:
        """Nodes with at least one child: the one-token passes a tree decoder runs to grow the tree
        (each such node is fed once, and all its children come from that one distribution; the
        leaves are verified without ever being fed to the draft)."""
        return self.size - len(self.leaves)

    def ancestors(self, node: int) -> tuple[int, ...]:
        """Nodes from the root to ``node`` inclusive."""
        path = []
        while node != -1:
            path.append(node)
            node = self.parents[node]
        return tuple(reversed(path))

    @cached_property
    def paths(self) -> tuple[tuple[int, ...], ...]:
        """Root-to-leaf node-index paths, in leaf order."""
        return tuple(self.ancestors(leaf) for leaf in self.leaves)

    @cached_property
    def choices(self) -> tuple[tuple[int, ...], ...]:
        """Medusa-style rank paths of the non-root nodes (inverse of :meth:`from_choices`)."""
        return tuple(tuple(self.ranks[n] for n in self.ancestors(i)[1:]) for i in range(1, self.size))

    @cached_property
    def level_sizes(self) -> tuple[int, ...]:
        """Number of nodes at each depth 0..depth."""
        counts = [0] * (self.depth + 1)
        for d in self.depths:
            counts[d] += 1
        return tuple(counts)

    def attention_mask(self) -> np.ndarray:
        """``[size, size]`` bool: ``mask[i, j]`` is True iff node j is node i or one of its ancestors.

        Tree tokens also attend to every cached (prefix) token; that part is all-True and is not
        included here.
        """
        n = self.size
        mask = np.zeros((n, n), dtype=bool)
        for i in range(n):
            mask[i, i] = True
            if i:
                mask[i] |= mask[self.parents[i]]
        return mask

    def position_ids(self, offset: int = 0) -> np.ndarray:
        """Position of each node: ``offset`` (the prefix length) plus its depth."""
        return np.asarray(self.depths, dtype=np.int64) + int(offset)

    @property
    def mask_density(self) -> float:
        """Fraction of the ``size x size`` new-token block the tree mask keeps (a chain keeps (n+1)/2n)."""
        return float(sum(d + 1 for d in self.depths)) / float(self.size * self.size)

    # ------------------------------------------------------------------ acceptance
    def node_values(self, accuracies: "np.ndarray | Sequence[Sequence[float]]") -> np.ndarray:
        """Probability that each node's whole path is accepted (root: 1)."""
        acc = _as_accuracy_matrix(accuracies)
        if self.depth > acc.shape[0]:
            raise HetSpecError(
                f"acceptance profile has {acc.shape[0]} depths but the tree is {self.depth} deep"
            )
        max_rank = max(self.ranks[1:], default=0)
        if self.size > 1 and max_rank >= acc.shape[1]:
            raise HetSpecError(
                f"acceptance profile has {acc.shape[1]} ranks but the tree uses rank {max_rank}"
            )
        values = np.ones(self.size)
        for i in range(1, self.size):
            values[i] = values[self.parents[i]] * acc[self.depths[i] - 1, self.ranks[i]]
        return values

    def expected_accepted_length(self, accuracies: "np.ndarray | Sequence[Sequence[float]]") -> float:
        """Expected tokens produced per step: 1 + sum over non-root nodes of their path value."""
        return float(self.node_values(accuracies).sum())

    def accepted_path(self, correct: Sequence[bool]) -> tuple[int, ...]:
        """The longest root-to-node path whose non-root nodes are all ``correct``.

        ``correct[i]`` says whether node i's token equals what the target chose after node i's
        parent. Returns node indices from the root; ties go to the node that comes first.
        """
        if len(correct) != self.size:
            raise HetSpecError(f"correct has {len(correct)} entries for a tree of {self.size} nodes")
        ok = [True] * self.size
        best = 0
        for i in range(1, self.size):
            ok[i] = ok[self.parents[i]] and bool(correct[i])
            if ok[i] and self.depths[i] > self.depths[best]:
                best = i
        return self.ancestors(best)


def _as_accuracy_matrix(accuracies) -> np.ndarray:
    acc = np.asarray(accuracies, dtype=float)
    if acc.ndim != 2 or acc.size == 0:
        raise HetSpecError(f"accuracies must be a non-empty depth x rank matrix, got shape {acc.shape}")
    if not np.all(np.isfinite(acc)) or acc.min() < 0 or acc.max() > 1:
        raise HetSpecError("accuracies must be probabilities in [0, 1]")
    if np.any(acc.sum(axis=1) > 1 + 1e-9):
        raise HetSpecError("accuracies of one depth are exclusive per rank and must sum to <= 1")
    return acc


_CHOICES_FORM = "a list of choice paths (lists of ranks >= 0), e.g. [[0], [1], [0, 0]]"


def _check_choices(choices) -> None:
    """One line unless ``choices`` is a list (or tuple) of lists of integer ranks >= 0 (``[]``: the root)."""
    if isinstance(choices, dict):
        raise HetSpecError(f"expected {_CHOICES_FORM} (or an object with a 'choices' list), got a JSON object "
                           f"with keys {', '.join(map(repr, list(choices)[:5])) or '(none)'}")
    if not isinstance(choices, (list, tuple)):
        raise HetSpecError(f"expected {_CHOICES_FORM}, got {type(choices).__name__} {choices!r:.60}")
    for c in choices:
        if not isinstance(c, (list, tuple)) or not all(
                isinstance(r, Integral) and not isinstance(r, bool) and r >= 0 for r in c):
            raise HetSpecError(f"expected {_CHOICES_FORM}; {c!r:.60} is not one")
