"""``medusa``: Medusa heads propose a token tree, tree attention verifies it in one pass.

Step (Medusa, Cai et al., ICML 2024, §2):

1. The root is the target's own token after the last accepted one. Head k's top-r candidates,
   computed from the hidden state at the last accepted token, fill the tree's depth-k rank-r
   nodes (gathered by the tree's choice paths, :class:`TreeBuffers`).
2. One target pass over root + candidates under the tree mask, with position ids = prefix length +
   depth, gives logits at every node.
3. Acceptance: greedy (a node is correct iff it equals the target's argmax after its parent) or,
   when ``temperature > 0``, *typical acceptance*: correct iff ``p(x) > min(ε, δ·exp(-H(p)))`` with
   p = softmax(logits / T) after the parent. The longest all-correct root path is kept
   (:meth:`sim.tree.TokenTree.accepted_path`), the target cache keeps exactly those K/V, and the
   next root (greedy: Medusa's "first token greedy") and next head proposals come from this same
   pass's logits and hidden state at the last accepted node — no extra forward.

Greedy acceptance is lossless; typical acceptance is not (Medusa §2.3.1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

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
from real.decode.device_tree import TreeTensors, read_back, tree_tensors
from real.model.executor import declare_widths
from sim.tree import TokenTree

NAME = "medusa"

#: Typical-acceptance hard threshold ε and entropy factor δ: the FasterDecoding/Medusa defaults
#: (``posterior_threshold=0.09``, ``posterior_alpha=0.3``, i.e. δ = √ε as in the paper's Fig. 5 sweep).
DEFAULT_EPSILON = 0.09
DEFAULT_DELTA = 0.3


@dataclass(frozen=True)
class MedusaConfig:
    tree: TokenTree = field(default_factory=TokenTree.medusa_default)
    temperature: float = 0.0      # 0: greedy acceptance (lossless); > 0: typical acceptance
    epsilon: float = DEFAULT_EPSILON
    delta: float = DEFAULT_DELTA

    def __post_init__(self) -> None:
        if not self.temperature >= 0.0:
            raise HetSpecError(f"medusa: temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.epsilon <= 1.0 or not self.delta > 0.0:
            raise HetSpecError(f"medusa: typical acceptance needs 0 < epsilon <= 1 and delta > 0, "
                               f"got epsilon={self.epsilon}, delta={self.delta}")

    @property
    def acceptance(self) -> str:
        return "greedy" if self.temperature == 0.0 else "typical"


@dataclass(frozen=True)
class TreeBuffers:
    """Everything the verifier needs from a tree, as tensors on the model's device (Medusa's
    ``generate_medusa_buffers``), built once per tree: the tree's :class:`TreeTensors` plus where each
    node's candidate comes from."""

    tree: TokenTree
    mask: Tensor          # [n, n] bool: node i attends to node j iff j is i or an ancestor of i
    depth: Tensor         # [n] long: position offset of each node from the root
    head_index: Tensor    # [n-1] long: depth-1 of nodes 1..n-1 (which head proposed it)
    rank_index: Tensor    # [n-1] long: rank of nodes 1..n-1 among that head's candidates
    parent: Tensor        # [n-1] long: parent node of nodes 1..n-1
    top_k: int            # candidates needed per head (max rank + 1)
    tensors: TreeTensors | None = None

    @classmethod
    def build(cls, tree: TokenTree, device) -> "TreeBuffers":
        tt = tree_tensors(tree, device)
        return cls(
            tree=tree,
            mask=tt.mask,
            depth=tt.depth,
            head_index=tt.depth[1:] - 1,
            rank_index=torch.tensor(tree.ranks[1:], dtype=torch.long).to(device),
            parent=tt.parent,
            top_k=max(tree.ranks[1:], default=0) + 1,
            tensors=tt,
        )

    def candidates(self, root: Tensor, head_top: Tensor) -> Tensor:
        """``[1, n]`` tree tokens: the root ``[]`` then head_top ``[n_heads, top_k]`` gathered by path."""
        return torch.cat([root.view(1), head_top[self.head_index, self.rank_index]]).view(1, -1)


def head_proposals(heads, hidden: Tensor, top_k: int, need_heads: int) -> Tensor:
    """``[n_heads, top_k]`` token ids: each head's top-k after the hidden state ``[d]``."""
    logits = heads(hidden.view(1, 1, -1))[:, 0, 0]              # [n_heads, vocab]
    if logits.shape[0] < need_heads:
        raise HetSpecError(f"medusa: the tree is {need_heads} deep but the model has {logits.shape[0]} heads")
    return logits.topk(top_k, dim=-1).indices


def correct_mask(buffers: TreeBuffers, tokens: Tensor, logits: Tensor, config: MedusaConfig) -> Tensor:
    """Per node, on the device: is its token accepted after its parent? tokens ``[n]``, logits
    ``[n, vocab]``; ``[n]`` bool, the root True."""
    cand = tokens[1:]
    if config.acceptance == "greedy":
        ok = cand == logits.argmax(-1)[buffers.parent]
    else:
        log_p = torch.log_softmax(logits.float() / config.temperature, dim=-1)     # [n, vocab]
        p = log_p.exp()
        entropy = -(p * log_p).sum(-1)                                            # [n]
        threshold = torch.minimum(torch.full_like(entropy, config.epsilon),
                                  config.delta * torch.exp(-entropy))              # [n]
        ok = p[buffers.parent, cand] > threshold[buffers.parent]
    return torch.cat([torch.ones(1, dtype=torch.bool, device=ok.device), ok])


def correct_nodes(buffers: TreeBuffers, tokens: Tensor, logits: Tensor, config: MedusaConfig) -> list[bool]:
    """:func:`correct_mask` read back as a list (one host synchronisation)."""
    return correct_mask(buffers, tokens, logits, config).tolist()


def generate(models, prompt, max_new_tokens: int, config: MedusaConfig, clock: Clock,
             generator: torch.Generator | None = None) -> DecodeResult:
    target, heads = models.target, require(models, "heads", NAME)
    tree = config.tree
    cache_len = check_request(models, prompt, max_new_tokens, extra_tokens=tree.size)
    if max(tree.ranks[1:], default=0) >= target.spec.vocab:
        raise HetSpecError(f"medusa: the tree uses rank {max(tree.ranks[1:])} but the vocabulary has {target.spec.vocab} tokens")
    log = StepLog(NAME, len(prompt), max_new_tokens, clock)
    declare_widths(target, (tree.size,))
    with torch.inference_mode():
        device = model_device(target)
        buffers = TreeBuffers.build(tree, device)
        t = clock.now()
        cache, (logits, hidden) = prefill(target, prompt_tensor(prompt, device), cache_len,
                                          return_hidden=True)                      # [1,1,V], [1,1,d]
        root = logits[0, -1].argmax().view(1)
        head_top = head_proposals(heads, hidden[0, -1], buffers.top_k, tree.depth)  # [n_heads, k]
        log.prefill_done(read_back(root)[0], t)

        while log.remaining > 0:
            step = log.step
            t = clock.now()
            block = buffers.candidates(root, head_top)                             # [1, n]
            logits, hidden = target(block, cache, positions=cache.length + buffers.depth,
                                    tree_mask=buffers.mask, return_hidden=True,
                                    position_bound=cache.length + tree.depth + 1)  # [1,n,V], [1,n,d]
            t_verified = clock.now()
            # acceptance on the device; the step's one read-back: the last accepted node, the path's
            # tokens and the next root
            best = buffers.tensors.best_node(correct_mask(buffers, block[0], logits[0], config))
            nodes = buffers.tensors.paths[best]                                    # [depth + 1]
            root = logits[0].index_select(0, best.view(1)).argmax(-1)               # [1]
            values = read_back(best, block[0, nodes], root)
            path = tree.ancestors(values[0])
            cache.keep(path, index=nodes[:len(path)])
            kept = log.emit(values[2:1 + len(path)] + [values[-1]])
            t_accept = clock.now()
            clock.record(step, "accept", t_verified, t_accept)
            log.step_done("verify", t, t_verified, proposed=tree.size - 1, accepted=kept)
            if log.remaining > 0:   # the heads' proposals belong to (are the draft of) the next step
                head_top = head_proposals(heads, hidden[0].index_select(0, best.view(1))[0], buffers.top_k,
                                          tree.depth)
                clock.record(step + 1, "draft", t_accept, clock.now())
    return log.finish()
