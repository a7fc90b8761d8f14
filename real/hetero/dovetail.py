"""``dovetail``: the drafter on one worker, the target verifying the draft tree on another.

One round (Dovetail §III-A), as the simulator's
``dovetail`` strategy prices it (:mod:`sim.strategies.dovetail`):

1. **Draft** (worker ``workers[0]``), an EAGLE-2 dynamic tree in ``1 + depth`` drafter passes:
   pass 0 feeds the tokens accepted in the previous round (the *lag*: the accepted drafts and the
   target's own token, which is this round's root) causally and commits them; the root's top-k
   tokens form level 1. Each further pass feeds the ``top_k`` nodes of the newest level with the
   highest cumulative log-probability (the drafter's KV cache holds them as pending tokens under
   a tree mask) and scores their top-k children. The ``width - 1`` best nodes of everything scored
   (cumulative log-probability; a child never scores above its parent, so the set is a tree)
   plus the root are verified.
2. **Transfer** the tree (tokens, positions, mask) into the verifier's buffers (a copy between CPU
   workers; host -> device where the worker is a GPU), timed, trace phase ``transfer``.
3. **Verify** (worker ``workers[1]``): one target pass over the tree; greedy acceptance (lossless:
   the output equals greedy ``ar``), longest correct path, the target's own next token.
4. **Transfer back** the accepted tokens and, for the feature drafter, the target's hidden states
   at the accepted path (the drafter's input of the next pass 0).

Drafters (option ``drafter``): ``draft`` = the demo draft model (token level, as Dovetail's
TinyLlama / Sheared-LLaMA baselines); ``dgf`` = Dovetail's Dynamic-Gating-Fusion drafter
(:mod:`real.hetero.dgf_drafter`), which reads the target's hidden states. In both cases the tree
nodes' drafter K/V are dropped after the round and pass 0 re-feeds the accepted tokens (with the
target's true hidden states for ``dgf``, as EAGLE does), the cost the simulator prices.
Departure, marked: greedy verification only (Dovetail also runs T = 1; the demo's lossless
check is greedy).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import Tensor

from hwmodels.errors import HetSpecError
from real.decode.common import (
    Clock,
    DecodeResult,
    StepLog,
    check_request,
    prefill,
    prompt_tensor,
)
from real.hetero.workers import (
    WorkerSession,
    copy_into,
    in_runtime,
    parse_workers,
    record,
    sequential_caller,
    synchronize,
)
from sim.tree import TokenTree

NAME = "dovetail"
DRAFTERS = ("draft", "dgf")
#: Dovetail's tree (§IV setup): top-k 10, depth 7, 16 verified tokens (the root included).
DEFAULT_TOP_K = 10
DEFAULT_DEPTH = 7
DEFAULT_WIDTH = 16
#: Default placement: the drafter on cpu0, the target on cpu1 (the host platform's workers).
DEFAULT_WORKERS = ("cpu0", "cpu1")


@dataclass(frozen=True)
class DovetailConfig:
    tree_width: int = DEFAULT_WIDTH                    # verified tokens per round, root included
    draft_depth: int = DEFAULT_DEPTH                    # drafter passes after pass 0
    top_k: int = DEFAULT_TOP_K                     # nodes expanded per level, children scored per node
    drafter: str = "draft"                         # draft | dgf
    workers: tuple[str, ...] = DEFAULT_WORKERS     # (drafter, verifier); the same worker twice is allowed
    trace_ops: bool = False                        # one trace record per drafter pass and transfer
    bind_team: bool = True                         # an all-core worker's OpenMP team bound one thread a core

    def __post_init__(self) -> None:
        for name in ("tree_width", "draft_depth", "top_k"):
            value, low = getattr(self, name), 2 if name == "tree_width" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise HetSpecError(f"dovetail: {name} must be an integer >= {low}, got {value!r}")
        if self.tree_width > 1 + self.top_k * (self.draft_depth + 1):
            raise HetSpecError(f"dovetail: a tree from {self.draft_depth + 1} passes of top-{self.top_k} has at most "
                               f"{1 + self.top_k * (self.draft_depth + 1)} tokens (tree_width {self.tree_width} asked)")
        if self.drafter not in DRAFTERS:
            raise HetSpecError(f"dovetail: unknown drafter {self.drafter!r}; valid: {', '.join(DRAFTERS)}")
        workers = tuple(self.workers)
        if len(workers) != 2:
            raise HetSpecError(f"dovetail needs two workers (drafter,verifier), got {','.join(workers)}")
        object.__setattr__(self, "workers", workers)


# ---------------------------------------------------------------------------- drafters
class TokenDrafter:
    """The demo draft model as a drafter: tokens in, logits out (no hidden states)."""

    uses_features = False

    def __init__(self, model):
        self.model = model

    def new_cache(self, n: int):
        return self.model.new_cache(n)

    def prefill(self, prompt: Tensor, hidden: Tensor | None, cache) -> None:
        self.model(prompt, cache, last_only=True)
        cache.keep(range(prompt.shape[1]))

    def run(self, tokens: Tensor, feats: Tensor | None, cache, positions: Tensor, tree_mask: Tensor | None):
        logits = self.model(tokens, cache, positions=positions, tree_mask=tree_mask)
        return logits, None


class FeatureDrafter:
    """Dovetail's DGF drafter: tokens and the target's hidden states in, logits and features out."""

    uses_features = True

    def __init__(self, model):
        self.model = model

    def new_cache(self, n: int):
        return self.model.new_cache(n)

    def prefill(self, prompt: Tensor, hidden: Tensor, cache) -> None:
        """Positions 1..n-1 of the prompt with the target's hidden states at 0..n-2."""
        n = prompt.shape[1]
        if n > 1:
            self.model(prompt[:, 1:], hidden[:, : n - 1], cache, positions=torch.arange(1, n, device=prompt.device))
            cache.keep(range(n - 1))

    def run(self, tokens: Tensor, feats: Tensor, cache, positions: Tensor, tree_mask: Tensor | None):
        return self.model(tokens, feats, cache, positions=positions, tree_mask=tree_mask)


# ---------------------------------------------------------------------------- the draft tree
@dataclass
class Node:
    token: int
    score: float          # cumulative log-probability from the root
    parent: int           # index into the pool (-1: the root)
    rank: int             # rank among its parent's top-k
    depth: int
    slot: int | None = None   # drafter pending slot once fed


def tree_mask_rows(rows: Tensor, slot0: int, parent_slots: list[int]) -> None:
    """Mask rows of the nodes fed in slots ``slot0``, ``slot0 + 1``, ...: each sees its parent's ancestors
    (its parent's row, whose slots after the parent's own are clear), its parent and itself; a node whose
    parent is the round's root (slot -1) sees only itself among the round's nodes. Four tensor operations
    whatever the number of nodes."""
    q = len(parent_slots)
    block = rows[slot0: slot0 + q]
    block.zero_()
    has = [j for j, p in enumerate(parent_slots) if p >= 0]
    if has:
        block[has] = rows[[parent_slots[j] for j in has]]
    block[torch.arange(q), torch.arange(slot0, slot0 + q)] = True


def grow_tree(drafter, d_cache, lag: Tensor, lag_feats: Tensor | None, root_pos: int, config: DovetailConfig,
              rows: Tensor, on_pass) -> tuple[list[Node], list[int]]:
    """One round's drafting on the drafter's worker. Returns the pool of scored nodes and the
    indices of the ``width - 1`` chosen ones, parents before children.

    ``on_pass(j, t0)`` is called right after pass ``j``'s forward, ``t0`` its start (its inputs and its
    forward): the tree's work between the passes (choosing the nodes to feed, their mask rows, their top-k,
    the pool, the rerank) falls outside the draft records, where the decode's time outside its traced
    forwards (``DecodeResult.host_s``) measures it as host work, which ``hetspec calibrate`` fits as the
    ``dovetail`` loop costs. (Inside the records, that work, about 0.3 ms of a 10-node pass on one CPU
    thread, would be counted by neither the forward's price nor the host costs, and the drafter's passes
    would read 20-30 % above their price.)"""
    device = lag.device
    n0 = lag.shape[1]
    k = config.top_k
    t0 = time.perf_counter()
    positions = torch.arange(root_pos - n0 + 1, root_pos + 1, device=device)
    logits, feats = drafter.run(lag, lag_feats, d_cache, positions, None)            # [1, n0, V], [1, n0, d]
    on_pass(0, t0)
    d_cache.keep(range(n0))                                                           # the lag is true: commit it
    logp = torch.log_softmax(logits[0, -1].float(), dim=-1)
    values, ids = logp.topk(k)
    pool = [Node(int(t), float(v), -1, r, 1) for r, (v, t) in enumerate(zip(values.tolist(), ids.tolist()))]
    node_feats: dict[int, Tensor] = {-1: feats[0, -1] if feats is not None else None}
    level = list(range(len(pool)))
    for depth in range(1, config.draft_depth + 1):
        chosen = sorted(level, key=lambda i: (-pool[i].score, i))[:k]               # nodes fed this pass
        q = len(chosen)
        slot0 = d_cache.pending
        tree_mask_rows(rows, slot0, [pool[pool[i].parent].slot if pool[i].parent >= 0 else -1 for i in chosen])
        for j, i in enumerate(chosen):
            pool[i].slot = slot0 + j
        t0 = time.perf_counter()                                  # the pass: its forward (and its inputs)
        tokens = torch.tensor([[pool[i].token for i in chosen]], device=device)       # [1, q]
        feats_in = (torch.stack([node_feats[pool[i].parent] for i in chosen]).unsqueeze(0)
                    if drafter.uses_features else None)                                # [1, q, d]
        positions = torch.full((q,), root_pos + depth, device=device)
        logits, feats = drafter.run(tokens, feats_in, d_cache, positions, rows[slot0: slot0 + q, : slot0 + q])
        on_pass(depth, t0)
        logp = torch.log_softmax(logits[0].float(), dim=-1)                           # [q, V]
        values, ids = logp.topk(k, dim=-1)                                            # [q, k]
        level = []
        for j, i in enumerate(chosen):
            if feats is not None:
                node_feats[i] = feats[0, j]
            base = pool[i].score
            for r, (v, t) in enumerate(zip(values[j].tolist(), ids[j].tolist())):
                pool.append(Node(int(t), base + float(v), i, r, depth + 1))
                level.append(len(pool) - 1)
    # rerank: the width-1 best nodes; ties to the shallower, earlier node (a parent precedes its children)
    best = sorted(range(len(pool)), key=lambda i: (-pool[i].score, pool[i].depth, i))[: config.tree_width - 1]
    best.sort(key=lambda i: (pool[i].depth, i))
    return pool, best


def tree_of(pool: list[Node], best: list[int]) -> tuple[TokenTree, list[int]]:
    """The verified tree (node 0 = the root) and the tokens of nodes 1.. from the chosen pool nodes."""
    index = {p: j + 1 for j, p in enumerate(best)}
    parents, ranks, tokens = [-1], [0], []
    for p in best:
        node = pool[p]
        if node.parent >= 0 and node.parent not in index:
            raise HetSpecError("dovetail: reranked nodes do not form a tree (a parent scored below its child)")
        parents.append(0 if node.parent < 0 else index[node.parent])
        ranks.append(node.rank)
        tokens.append(node.token)
    return TokenTree(tuple(parents), tuple(ranks)), tokens


# ---------------------------------------------------------------------------- runtime
class DovetailRuntime:
    """Workers, drafter and per-worker buffers of a run (reused across prompts)."""

    def __init__(self, models, config: DovetailConfig, drafter_model=None):
        self.models = models
        self.workers = parse_workers(config.workers, 2)
        self.draft_dev = torch.device(self.workers[0].device)
        self.verify_dev = torch.device(self.workers[1].device)
        self.same = self.workers[0] == self.workers[1]
        if config.drafter == "dgf":
            if drafter_model is None:
                drafter_model = getattr(models, "dgf", None)
            if drafter_model is None:
                raise HetSpecError("dovetail --drafter dgf needs the DGF drafter (train it with "
                                   "`hetspec train-demo --dgf`)")
            self.drafter = FeatureDrafter(_on(drafter_model, self.draft_dev))
        else:
            if models.draft is None:
                raise HetSpecError("dovetail needs a draft model, and none was given")
            self.drafter = TokenDrafter(_on(models.draft, self.draft_dev))
        self.target = _on(models.target, self.verify_dev)
        # they take turns; an all-core worker on the calling thread gets its team bound one thread a core
        self.session = WorkerSession(self.workers, caller=sequential_caller(self.workers), bind=config.bind_team)
        self.link = "-".join(sorted({w.name for w in self.workers})) if not self.same else ""
        w, d = config.tree_width, models.target.spec.hidden
        # the verifier's and the drafter's receive buffers (filled by explicit copies)
        self.v_tokens = torch.zeros(1, w, dtype=torch.long, device=self.verify_dev)
        self.v_positions = torch.zeros(w, dtype=torch.long, device=self.verify_dev)
        self.v_mask = torch.zeros(w, w, dtype=torch.bool, device=self.verify_dev)
        self.d_lag = torch.zeros(1, w + 1, dtype=torch.long, device=self.draft_dev)
        self.d_feats = torch.zeros(1, w + 1, d, device=self.draft_dev) if self.drafter.uses_features else None
        self.bytes_moved = 0

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> "DovetailRuntime":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def prepare(models, config: DovetailConfig, dgf=None) -> DovetailRuntime:
    """The run's runtime; ``dgf``: the DGF drafter (:mod:`real.hetero.dgf_drafter`) for ``drafter="dgf"``."""
    return DovetailRuntime(models, config, drafter_model=dgf)


def _on(model, device: torch.device):
    if next(model.parameters()).device == device:
        return model
    import copy

    return copy.deepcopy(model).to(device)


def generate(models, prompt, max_new_tokens: int, config: DovetailConfig, clock: Clock,
             generator: torch.Generator | None = None) -> DecodeResult:
    return in_runtime(DovetailRuntime, models, config, lambda rt: _generate(rt, prompt, max_new_tokens, config, clock))


def _generate(rt: DovetailRuntime, prompt, max_new_tokens: int, config: DovetailConfig, clock: Clock) -> DecodeResult:
    cache_len = check_request(rt.models, prompt, max_new_tokens, extra_tokens=config.tree_width + 1)
    log = StepLog(NAME, len(prompt), max_new_tokens, clock)
    drafter, target, session = rt.drafter, rt.target, rt.session
    dname = rt.workers[0].name
    ops = config.trace_ops
    max_slots = config.top_k * config.draft_depth
    with torch.inference_mode():
        t = clock.now()

        def verifier_prefill():
            cache, (logits, hidden) = prefill(target, prompt_tensor(prompt, rt.verify_dev), cache_len,
                                              last_only=False, return_hidden=True)     # [1, n, V], [1, n, d]
            return cache, int(logits[0, -1].argmax()), hidden

        t_cache, root, hidden = session.run(1, verifier_prefill)
        n = len(prompt)
        prompt_hidden = hidden.to(rt.draft_dev) if drafter.uses_features else None

        def drafter_prefill():
            cache = drafter.new_cache(cache_len + max_slots)           # room for one round's tree nodes
            drafter.prefill(prompt_tensor(prompt, rt.draft_dev), prompt_hidden, cache)
            return cache, torch.zeros(max_slots, max_slots, dtype=torch.bool, device=rt.draft_dev)

        d_cache, rows = session.run(0, drafter_prefill)
        log.prefill_done(root, t)
        lag = [root]
        lag_feats = prompt_hidden[0, n - 1: n] if drafter.uses_features else None      # [1, d]: h at the root's parent

        while log.remaining > 0:
            step = log.step
            root_pos = t_cache.length                                                  # the root's position
            # the lag arrives in the drafter's buffers (copied there by the previous transfer back)
            n0 = len(lag)
            rt.d_lag[0, :n0] = torch.tensor(lag, device=rt.draft_dev)
            if lag_feats is not None:
                rt.d_feats[0, :n0].copy_(lag_feats)

            def on_pass(j: int, t0: float) -> None:
                log.draft_passes += 1
                record(clock, dname, step, "draft", t0 - clock.t0, clock.now(), op=f"pass{j}" if ops else "")

            def draft_round():
                pool, best = grow_tree(drafter, d_cache, rt.d_lag[:, :n0],
                                       rt.d_feats[:, :n0] if lag_feats is not None else None,
                                       root_pos, config, rows, on_pass)
                tree, toks = tree_of(pool, best)
                d_cache.discard()                                      # tree K/V are re-fed next round if accepted
                return tree, toks

            tree, toks = session.run(0, draft_round)
            m = tree.size
            # transfer 1: the tree to the verifier
            t0 = clock.now()
            block = torch.tensor([[lag[-1], *toks]], dtype=torch.long, device=rt.draft_dev)    # [1, m]
            positions = root_pos + torch.tensor(tree.depths, device=rt.draft_dev)
            mask = torch.from_numpy(tree.attention_mask()).to(rt.draft_dev)
            if rt.same:
                v_block, v_pos, v_mask = block, positions, mask
            else:
                rt.bytes_moved += copy_into(rt.v_tokens[:, :m], block) + copy_into(rt.v_positions[:m], positions) \
                    + copy_into(rt.v_mask[:m, :m], mask)
                v_block, v_pos, v_mask = rt.v_tokens[:, :m], rt.v_positions[:m], rt.v_mask[:m, :m]
                record(clock, rt.link, step, "transfer", t0, clock.now(), op="to_verifier")

            def verify():
                t1 = clock.now()
                logits, hid = target(v_block, t_cache, positions=v_pos, tree_mask=v_mask, return_hidden=True)
                synchronize(rt.verify_dev)                           # a GPU verifier has finished when timed
                t2 = clock.now()
                best_ids = logits[0].argmax(-1).tolist()
                tokens = v_block[0].tolist()
                correct = [True] + [tokens[i] == best_ids[tree.parents[i]] for i in range(1, m)]
                path = tree.accepted_path(correct)
                t_cache.keep(path)
                return t1, t2, path, best_ids[path[-1]], hid[0, list(path)] if drafter.uses_features else None

            t_v0, t_v1, path, nxt, path_hidden = session.run(1, verify)
            # transfer 2: accepted tokens (and hidden states) back to the drafter
            t0 = clock.now()
            accepted = [toks[i - 1] for i in path[1:]]
            new_lag = accepted + [nxt]
            if drafter.uses_features:
                if rt.same:
                    lag_feats = path_hidden
                else:
                    rt.bytes_moved += copy_into(rt.d_feats[0, : len(path)], path_hidden)
                    lag_feats = rt.d_feats[0, : len(path)].clone()
            if not rt.same:
                rt.bytes_moved += copy_into(rt.d_lag[0, : len(new_lag)], torch.tensor(new_lag, device=rt.verify_dev))
                record(clock, rt.link, step, "transfer", t0, clock.now(), op="to_drafter")
            lag = new_lag
            kept = log.emit(accepted + [nxt])
            clock.record(step, "accept", t_v1, clock.now())
            log.step_done("verify", t_v0, t_v1, proposed=m - 1, accepted=kept)
    return log.finish()

