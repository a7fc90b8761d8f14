"""A token tree as tensors on the model's device, and acceptance computed there.

A decode step must not stop the host while the device computes: every value the host needs from
a step (how many tokens were accepted, which, and the next root) is gathered on the device into one
small tensor and read back once, at the end of the step (:func:`read_back`). For that the longest
accepted path of a tree is found on the device (:meth:`TreeTensors.best_node`) with the rule of
:meth:`sim.tree.TokenTree.accepted_path`: the deepest node whose path from the root is correct
throughout, ties to the node that comes first.

Tree tensors are built once per tree shape (:func:`tree_tensors` keeps them by shape and device).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import Tensor

from real.model.transformer import index_tensor
from sim.tree import TokenTree

#: Tree shapes kept per process (LLMCad's trees change shape every round; most repeat).
MAX_CACHED_SHAPES = 256


@dataclass(frozen=True)
class TreeTensors:
    tree: TokenTree
    mask: Tensor        # [n, n] bool: node i attends to node j iff j is i or an ancestor of i
    depth: Tensor       # [n] long: position offset of each node from the root
    parent: Tensor      # [n-1] long: parent node of nodes 1..n-1
    score: Tensor       # [n] long: (depth + 1) * n - index: larger for deeper nodes, earlier among equals
    paths: Tensor       # [n, depth_max + 1] long: the root-to-node path of each node, padded with the node

    @classmethod
    def build(cls, tree: TokenTree, device) -> "TreeTensors":
        n = tree.size
        depths = torch.tensor(tree.depths, dtype=torch.long)
        width = tree.depth + 1
        paths = [list(tree.ancestors(i)) for i in range(n)]
        paths = torch.tensor([p + [p[-1]] * (width - len(p)) for p in paths], dtype=torch.long)
        return cls(
            tree=tree,
            mask=torch.from_numpy(tree.attention_mask()).to(device),
            depth=depths.to(device),
            parent=torch.tensor(tree.parents[1:], dtype=torch.long).to(device),
            score=((depths + 1) * n - torch.arange(n)).to(device),
            paths=paths.to(device),
        )

    @property
    def size(self) -> int:
        return self.tree.size

    def best_node(self, correct: Tensor) -> Tensor:
        """The last node (0-d long tensor) of the accepted path, given ``correct [n]`` bool (the root's
        entry True): the deepest node all of whose path is correct, the first among equals."""
        ok = ~(self.mask & ~correct).any(-1)                       # [n]: the whole path is correct
        return (ok * self.score).argmax()


_CACHE: OrderedDict[tuple, TreeTensors] = OrderedDict()


def tree_tensors(tree: TokenTree, device) -> TreeTensors:
    """:class:`TreeTensors` of ``tree`` on ``device``, built on the first request of its shape."""
    key = (tree.parents, tree.ranks, str(torch.device(device)))
    found = _CACHE.get(key)
    if found is None:
        found = _CACHE[key] = TreeTensors.build(tree, device)
        if len(_CACHE) > MAX_CACHED_SHAPES:
            _CACHE.popitem(last=False)
    else:
        _CACHE.move_to_end(key)
    return found


def read_back(*parts: Tensor) -> list[int]:
    """The step's one host synchronisation: the integer tensors ``parts`` (each 0-d or 1-d, on one
    device) concatenated and copied to the host as a list of ints."""
    return torch.cat([p.reshape(-1) for p in parts]).tolist()


def device_ids(ids, device) -> Tensor:
    """``[1, n]`` long tensor of token ids on ``device`` (to a CUDA device without blocking,
    :func:`real.model.transformer.index_tensor`)."""
    return index_tensor(ids, device).view(1, -1)
