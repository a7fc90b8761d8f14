"""``draft-tree``: LLMCad's draft token tree verified by a target whose weights stream from storage.

LLMCad (Xu et al., 2023, §3): a memory-resident draft model grows a token
tree (confidence branching, the branch pacer of Eq. 1-2) until the self-adaptive fallback
(``T_c < alpha``, Eq. 3) triggers; the target, whose weights exceed the memory budget, verifies
the whole tree in one non-autoregressive pass. One step (a *round*) here:

1. **Draft**: one one-token pass of the draft model per internal node of the tree
   (:attr:`sim.tree.TokenTree.n_internal`: the tree decoder feeds a node once and takes all its
   children from that one distribution; the leaves are never fed. The input stays autoregressive,
   only the mask changes, so a pass costs a one-token forward over the cache).
2. **Load**: the target's weights that do not stay resident stream from the platform's storage
   link. Memory: the budget holds the draft's weights, both KV caches and a one-layer staging
   buffer; what is left holds the first ``R`` bytes of the target, which stay resident; the other
   ``S = W - R`` bytes are read again every forward (:func:`memory_plan`). ``resident="none"``
   instead re-reads the whole target once it does not fit (a swapping engine whose page cache
   never hits on a cyclic scan larger than itself, e.g. llama.cpp's mapped weights).
3. **Verify**: one target forward over the tree's ``n + 1`` tokens (tree mask), then the
   longest correct path plus the target's own token (:meth:`TokenTree.expected_accepted_length`).

**Compute-IO pipeline** (LLMCad §3.4, ``pipeline=1``): the target's load does not depend on the
tree, so it starts with the round while the draft drafts; the two models never compute at the
same time (the target computes after both). Round time ``max(draft, load) + verify`` instead of
``draft + load + verify``. Departure, marked: LLMCad preloads up to the memory bound while drafting
and drafts speculatively during the rest of the load; in a steady state where the load outlasts
the drafting both reduce to this overlap; the speculative tokens are the option below.

**Speculative generation** (LLMCad §3.4, option ``speculate=1`` with ``pipeline=1``): the draft
keeps drafting while the target's verification loads, and its tokens are kept if the verification
finds no error. Priced in the fallback's Markov chain (:func:`fallback_chain`): from a round of
main-branch depth ``k`` whose load outlasts its own drafting by the drafting of the whole
depth-cap tree (``draft(k) + draft(cap) <= load``), a round that accepts all ``k`` and whose
target token is the draft's guess (``p0^(k+1)``) is followed by a round that verifies the
depth-cap tree drafted under that load; the drafting itself is free (under the load), the tokens
per verification grow. A round whose load is shorter speculates nothing (departure, marked: a
partial speculative branch is not priced). Only the calibrated chain speculates (a replayed or
measured profile's rounds are kept as measured).

**Tree** (``tree_shape="greedy"``): per-rank acceptance probabilities ``p_r`` (the probability
that the draft's rank-r candidate is the target's token, the same at every depth) make node
values ``prod p`` along a path; the pacer gives tokens to the likeliest branches, i.e. the tree
grows in greedy order (:func:`sim.tree_search.greedy_trees`) within the budget ``tree_width``
(tokens, root included) and ``draft_depth`` (max depth). ``p`` comes from ``draft_rank_accuracy`` (meta:
a real-path profile's, or an acceptance preset's), else ``p = [draft_alpha]`` (a chain: departure, marked:
one acceptance rate has no sibling statistics). ``tree_shape="chain"`` is a fixed chain.

**Self-adaptive fallback** (``fallback="adaptive"``, Eq. 3): with a calibrated draft the main
branch's cumulative confidence after ``k`` tokens is ``p0^k``, so a threshold ``alpha`` stops the
round at ``k(alpha) = floor(ln alpha / ln p0) + 1``; after a verification that accepts all ``k``,
``alpha /= 2``; after one that accepts ``j < k``, ``alpha = (k - j) / k``. This is a Markov chain
on ``k`` (:func:`fallback_chain`); its stationary distribution weights each round's tree (the
greedy prefix whose main branch reaches depth ``k``). A measured profile that replayed the fallback
on the draft's own confidences (``meta["draft_fallback"]``, :mod:`sim.strategies.draft_tree_fallback`)
gives the weights and the main branch's acceptance in rounds of each ``k`` instead: the draft's
confidence is not its accuracy, and rounds that stop early stop where it is unsure. A profile that
also holds the real decoder's own rounds at this budget and depth (``meta["draft_tree_rounds"]``:
passes, verified tokens and emitted tokens per kind of round on the calibration prompts) is priced
kind by kind instead: the side branches LLMCad opens on the draft's confidence are in them. Expected
tokens/s = E[tokens] / E[time] (renewal-reward). ``fallback="threshold"`` keeps alpha at ``alpha0`` (§3.3's
default 0.01) without Eq. 3: every round stops at ``k(alpha0)``, the fixed trigger the adaptive threshold
improves on. ``fallback="budget"`` always drafts the whole budget (speculative decoding's fixed draft length).

**Staging buffers** (option ``staging`` k): a loader that reads the streamed layers one by one
through k buffers (HetSpec's real loader, :mod:`real.hetero.streaming`: one buffer) cannot preload
the whole streamed part while the draft drafts: the round is the layer-by-layer recurrence of
:mod:`sim.strategies.streaming_pipeline` over whole layers (the real loader's memory plan), each
read ``9 x latency + bytes / bandwidth`` over the storage link, each hand-over of a buffer between the
loader and the forward a wake-up of a waiting thread (a calibrated host's ``hcmp_sync``). Without the
option, the round is the overlap above.

**Baseline** ``variant="std"``: the target alone, load then compute (LLMCad's Std, a swapping
engine). LLMCad's StdPL (a layer-wise load/compute pipeline) is the ``offload`` strategy with
``mode=stream, source=storage`` (:mod:`sim.strategies.offload`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from hwmodels.errors import HetSpecError, UnknownNameError
from hwmodels.platform import GB, Link
from sim.closed_form import step_seconds
from sim.model_spec import ModelSpec, get_model
from sim.plan import StepPlan, Task, delay_task, graph_tasks
from sim.step_graph import build_step_graph
from sim.strategies.base import (DEFAULT_DRAFT_MODEL, Estimate, Knob, Problem, Strategy, StrategyConfig, co_resident,
                                 host_seconds)
from sim.strategies.chain import draft_pass_tasks
from sim.strategies.draft_tree_fallback import (conditioned_accuracy, fallback_chain, measured_rounds, replayed_rounds,
                                                round_tree, stop_depth)
from sim.strategies.draft_tree_memory import (  # noqa: F401 - the memory plan, re-exported
    BUDGET_SLACK_BYTES, MemoryPlan, load_seconds, memory_plan, storage_link, swap_all_budget_gb)
from sim.strategies.hcmp_threads import split_costs
from sim.strategies.loop_passes import full_share_tree, loop_verify_excess
from sim.strategies.streaming_pipeline import READS_PER_LAYER, LayerPlan, layer_plan, pipeline_round
from sim.tree import TokenTree
from sim.tree_search import greedy_trees

VARIANTS = ("llmcad", "std")
#: What stays of a target that does not fit: "keep" (the part under the budget stays resident; the
#: default, for LLMCad and its baselines: LLMCad §4.3 explains its growing gain at smaller budgets by
#: the target getting slower, i.e. the baselines keep what fits) or "none" (everything is re-read).
RESIDENT_POLICIES = ("keep", "none")
FALLBACKS = ("adaptive", "threshold", "budget")
#: LLMCad §3.3's default initial threshold alpha_0: with ``fallback="threshold"`` it stays fixed (no Eq. 3).
DEFAULT_ALPHA0 = 0.01
#: Tree budgets searched (tokens, root included): LLMCad keeps "up to tens of branches" (§3.2) and
#: gives no cap; 32 tokens leaves room for trees far past where the acceptance runs out.
MAX_TREE_WIDTH = 32
#: Depth caps searched: 16 drafted tokens on the main branch is where even alpha = 0.9 keeps 0.19.
MAX_DRAFT_DEPTH = 16
#: The draft model of a target's family (LLMCad Table 3 pairs), else the default draft.
FAMILY_DRAFT = {"gpt2-large": "gpt2", "llama2-13b": "llama2-7b", "llama2-70b": "llama2-7b",
                "vicuna-13b": "vicuna-7b", "vicuna-33b": "vicuna-7b", "llama3-70b": "llama3.1-8b"}


# ---------------------------------------------------------------------- acceptance: ranks and fallback
def rank_probs(acceptance) -> tuple[float, ...]:
    """Per-rank acceptance of the draft's candidates: a profile's ``draft_rank_accuracy``, else ``(alpha,)``."""
    ranks = (acceptance.meta or {}).get("draft_rank_accuracy")
    if ranks:
        p = tuple(float(v) for v in ranks)
        if any(not 0.0 <= v <= 1.0 for v in p) or sum(p) > 1.0 + 1e-6:
            raise HetSpecError(f"acceptance model {acceptance.name}: draft_rank_accuracy must be probabilities "
                               "summing to <= 1")
        return p
    return (acceptance.need_alpha(),)


def _accuracy(p: tuple[float, ...], depth: int) -> np.ndarray:
    return np.tile(np.asarray(p, dtype=float), (depth, 1))      # [depth, ranks]: the same draft at every depth


def main_branch_depth(tree: TokenTree) -> int:
    """Depth of the rank-0 path from the root (the draft's greedy continuation)."""
    node, depth = 0, 0
    while True:
        nxt = next((c for c in tree.children[node] if tree.ranks[c] == 0), None)
        if nxt is None:
            return depth
        node, depth = nxt, depth + 1


# ---------------------------------------------------------------------- rounds
@dataclass(frozen=True)
class Round:
    """One kind of verification round: its tree, expected tokens, and its probability."""

    tree: TokenTree
    tokens: float
    weight: float


class DraftTreeStrategy(Strategy):
    name = "draft-tree"
    knob_help = {
        "tree_width": "tree budget: tokens per verification, root included (LLMCad's M)",
        "draft_depth": "max depth of the tree (main-branch tokens per round)",
        "tree_shape": "greedy (the branch pacer: likeliest branches first) or chain",
        "device": "device computing the target (its weights stream from the platform's storage link)",
        "draft_device": "device running the memory-resident draft model (default: the target's device)",
        "draft_model": f"draft model (default: the target's family, else {DEFAULT_DRAFT_MODEL})",
        "memory_budget_gb": "option: memory the two models may use, GB (default: the target device's memory)",
        "pipeline": "option: 1 = the target loads while the draft drafts (LLMCad §3.4), 0 = one after the other",
        "fallback": "option: adaptive (Eq. 3 threshold), threshold (T_c < alpha0, alpha0 fixed) or budget (always "
                    "draft the whole budget)",
        "alpha0": f"option: the fixed threshold of fallback=threshold (default {DEFAULT_ALPHA0}, LLMCad §3.3's alpha_0)",
        "variant": "option: llmcad, or std (the target alone, load then compute; StdPL is offload mode=stream "
                   "source=storage)",
        "resident": "option: keep (default: the target's part under the budget stays in memory) or none "
                    "(a model that does not fit is re-read whole every forward)",
        "speculate": "option: 1 = the draft keeps drafting while the verification loads and a round that finds no "
                     "error hands its speculative tokens to the next (LLMCad §3.4; needs pipeline=1), 0 = not (0)",
        "staging": "option: k staging buffers of a loader that streams whole layers one by one (HetSpec's real "
                   "loader: 1); default: the whole streamed part loads while the draft drafts",
        "cache_tokens": "option (with staging): tokens both KV caches hold in the memory plan (default: context + "
                        "the tree)",
    }
    budget_knobs = ("tree_width",)      # a cap: a chain shape stops at the depth (sim.optimizer)

    # ------------------------------------------------------------------ search space
    def search_space(self, problem: Problem) -> tuple[Knob, ...]:
        problem.need_acceptance(self.name)
        accel = problem.platform.accelerator.name
        return (Knob("device", (accel,)), Knob("tree_shape", ("greedy",)),
                Knob("draft_depth", tuple(range(1, MAX_DRAFT_DEPTH + 1))),
                Knob("tree_width", tuple(range(2, MAX_TREE_WIDTH + 1))))

    # ------------------------------------------------------------------ configs
    def resolve(self, problem: Problem, config: StrategyConfig) -> StrategyConfig:
        config = super().resolve(problem, config)
        variant = config.option("variant", "llmcad")
        if variant not in VARIANTS:
            raise UnknownNameError("draft-tree variant", variant, VARIANTS)
        fallback = config.option("fallback", "adaptive")
        if fallback not in FALLBACKS:
            raise UnknownNameError("draft-tree fallback", fallback, FALLBACKS)
        alpha0 = config.option("alpha0", DEFAULT_ALPHA0)
        if isinstance(alpha0, bool) or not isinstance(alpha0, (int, float)) or not 0.0 < alpha0 < 1.0:
            raise HetSpecError(f"draft-tree: option alpha0 must be in (0, 1) (got {alpha0!r})")
        pipeline = config.option("pipeline", 1)
        if pipeline not in (0, 1, True, False):
            raise HetSpecError(f"draft-tree: option pipeline must be 0 or 1 (got {pipeline!r})")
        budget_gb = config.option("memory_budget_gb")
        if budget_gb is None:
            domain = problem.platform.domain_of(config.device)
            budget_gb = domain.capacity_gb if domain is not None else problem.platform.device(config.device).mem_capacity_gb
        if isinstance(budget_gb, bool) or not isinstance(budget_gb, (int, float)) or budget_gb <= 0:
            raise HetSpecError(f"draft-tree: option memory_budget_gb must be a number > 0 (got {budget_gb!r})")
        resident = config.option("resident", "keep")
        if resident not in RESIDENT_POLICIES:
            raise UnknownNameError("draft-tree resident policy", resident, RESIDENT_POLICIES)
        staging = config.option("staging")
        if staging is not None and (isinstance(staging, bool) or not isinstance(staging, (int, np.integer))
                                    or staging < 1):
            raise HetSpecError(f"draft-tree: option staging must be an integer >= 1 (got {staging!r})")
        speculate = config.option("speculate", 0)
        if speculate not in (0, 1, True, False):
            raise HetSpecError(f"draft-tree: option speculate must be 0 or 1 (got {speculate!r})")
        if speculate and (not pipeline or staging is not None):
            raise HetSpecError("draft-tree: option speculate=1 needs pipeline=1 and no staging (the draft speculates "
                               "while the whole streamed part loads)")
        opts = {**config.options, "variant": variant, "fallback": fallback, "alpha0": float(alpha0),
                "pipeline": int(bool(pipeline)), "speculate": int(bool(speculate)),
                "memory_budget_gb": float(budget_gb), "resident": resident}
        keep = resident == "keep"
        if variant != "llmcad":
            if not memory_plan(problem, None, budget_gb * GB, 1, keep).fits:
                storage_link(problem.platform, config.device)      # one line if the weights cannot stream
            return replace(config, tree_width=1, draft_depth=0, draft_model=None, draft_device=None, tree=None,
                           tree_shape="chain", partition_ratio=None, options=opts)
        acc = problem.need_acceptance(self.name)
        p = rank_probs(acc)
        width = config.tree_width
        if width < 2:
            raise HetSpecError("draft-tree: the tree budget (tree_width) must be >= 2: the root and one draft token")
        depth = config.draft_depth or min(width - 1, MAX_DRAFT_DEPTH)
        if config.tree_shape not in ("greedy", "chain"):
            raise HetSpecError(f"draft-tree: tree shape must be greedy or chain (got {config.tree_shape})")
        draft_name = config.draft_model or FAMILY_DRAFT.get(problem.model.name, DEFAULT_DRAFT_MODEL)
        draft = get_model(draft_name).with_dtype(problem.model.dtype)
        draft_device = config.draft_device or config.device
        if draft_device != config.device and not problem.platform.shares_memory(draft_device, config.device):
            problem.platform.link(draft_device, config.device)
        if not memory_plan(problem, draft, budget_gb * GB, width, keep).fits:
            storage_link(problem.platform, config.device)
        shape = config.tree_shape
        capacity = 1 + sum(len(p) ** d for d in range(1, depth + 1))
        if shape == "greedy" and width > capacity:
            raise HetSpecError(f"draft-tree: a tree of depth <= {depth} with {len(p)} candidate rank(s) has at most "
                               f"{capacity} tokens (tree_width {width} asked)")
        tree = TokenTree.chain(min(width - 1, depth)) if shape == "chain" else \
            greedy_trees(_accuracy(p, depth), width, depth)[width - 1]
        return replace(config, tree=tree, tree_width=tree.size, draft_depth=depth, draft_model=draft_name,
                       draft_device=draft_device, tree_shape=shape, partition_ratio=None, options=opts)

    # ------------------------------------------------------------------ rounds and costs
    def _draft(self, problem: Problem, config: StrategyConfig) -> ModelSpec:
        return get_model(config.draft_model).with_dtype(problem.model.dtype)

    def rounds(self, problem: Problem, config: StrategyConfig) -> tuple[Round, ...]:
        """The kinds of round the fallback produces, with their stationary probabilities."""
        p = rank_probs(problem.acceptance)
        depth = config.draft_depth
        acc = _accuracy(p, depth)
        if config.option("fallback") == "budget":
            return (Round(config.tree, config.tree.expected_accepted_length(acc), 1.0),)
        measured = measured_rounds(problem.acceptance.meta, config.tree_width, depth) \
            if config.tree_shape == "greedy" else None
        if measured is not None:       # the real decoder's rounds on the calibration prompts
            return tuple(Round(round_tree(passes, size), tokens, weight)
                         for passes, size, weight, tokens in measured if weight > 0)
        if config.tree_shape == "chain":
            prefixes = [TokenTree.chain(k) for k in range(config.tree_width)]
        else:
            prefixes = list(greedy_trees(acc, config.tree_width, depth))
        cap = max(main_branch_depth(prefixes[-1]), 1)
        if config.option("fallback") == "threshold":    # T_c = p0^k < alpha0 stops every round at the same k
            k = stop_depth(float(config.option("alpha0", DEFAULT_ALPHA0)), p[0], cap)
            tree = next((t for t in prefixes if main_branch_depth(t) >= k), prefixes[-1])
            return (Round(tree, tree.expected_accepted_length(acc), 1.0),)
        replayed = replayed_rounds(problem.acceptance.meta, cap)
        trees = [next((t for t in prefixes if main_branch_depth(t) >= k), prefixes[-1]) for k in range(1, cap + 1)]
        speculate = self._speculates(problem, config, trees) if replayed is None else None
        pi = replayed[0] if replayed is not None else fallback_chain(round(p[0], 12), cap, speculate)
        out = []
        for k in range(1, cap + 1):
            tree = trees[k - 1]
            rates = conditioned_accuracy(acc, replayed[1][k - 1]) if replayed is not None else acc
            if pi[k - 1] > 0:
                out.append(Round(tree, tree.expected_accepted_length(rates), float(pi[k - 1])))
        return tuple(out)

    def _speculates(self, problem: Problem, config: StrategyConfig,
                    trees: Sequence[TokenTree]) -> tuple[bool, ...] | None:
        """Per main-branch depth k (``trees[k - 1]``): whether the load leaves the draft time to draft the
        depth-cap tree after its own (option ``speculate``); None without the option."""
        if not config.option("speculate"):
            return None
        plan = self.memory(problem, config)
        if plan.streamed <= 0:
            return (False,) * len(trees)
        load = load_seconds(problem.platform, config.device, plan.streamed)
        draft = _draft_seconds(problem, self._draft(problem, config), config.draft_device,
                               np.array([t.n_internal for t in trees]))
        return tuple(bool(d + draft[-1] <= load) for d in draft)

    def _round_parts(self, problem: Problem, config: StrategyConfig, trees: Sequence[TokenTree],
                     plan: MemoryPlan) -> dict[str, np.ndarray]:
        """Seconds of drafting, loading and verifying each tree (arrays over ``trees``)."""
        platform = problem.platform
        sizes = np.array([t.size for t in trees])
        fed = np.array([t.n_internal for t in trees])
        draft = _draft_seconds(problem, self._draft(problem, config), config.draft_device, fed)
        load = load_seconds(platform, config.device, plan.streamed) if plan.streamed > 0 else 0.0
        resident = self._target_resident(problem, config)
        verify = step_seconds(problem.model, platform, config.device, sizes, problem.context, problem.batch,
                              np.array([t.mask_density for t in trees]), resident=resident) \
            + loop_verify_excess(problem, config.device, self.name, resident)
        host = host_seconds(problem, self.name, config.device, passes=fed, nodes=sizes)
        return {"draft": draft, "load": np.full(len(trees), load), "verify": np.asarray(verify, float),
                "host": np.asarray(host, float) * np.ones(len(trees))}

    def _target_resident(self, problem: Problem, config: StrategyConfig) -> bool | None:
        """With the draft on the target's device, the target stays in the cache only if both fit."""
        if config.draft_device != config.device:
            return None
        return co_resident(problem, config.device, problem.model, self._draft(problem, config))

    def _round_s(self, parts: dict, pipeline: bool):
        if pipeline:
            return np.maximum(parts["draft"], parts["load"]) + parts["verify"] + parts["host"]
        return parts["draft"] + parts["load"] + parts["verify"] + parts["host"]

    def memory(self, problem: Problem, config: StrategyConfig) -> MemoryPlan:
        draft = None if config.option("variant") != "llmcad" else self._draft(problem, config)
        return memory_plan(problem, draft, config.option("memory_budget_gb") * GB, config.tree_width,
                           config.option("resident") == "keep")

    def layer_memory(self, problem: Problem, config: StrategyConfig) -> LayerPlan:
        """Whole layers under the budget with ``staging`` buffers (the real loader's plan)."""
        tokens = config.option("cache_tokens") or problem.context + config.tree_width
        return layer_plan(problem.model, self._draft(problem, config), config.option("memory_budget_gb") * GB,
                          tokens * problem.batch, int(config.option("staging")))

    def staged_rounds(self, problem: Problem, config: StrategyConfig, rounds: Sequence[Round]):
        """The steady-state pipeline round (:func:`pipeline_round`) of each round kind under option ``staging``."""
        from sim.closed_form import op_seconds

        lp = self.layer_memory(problem, config)
        model, platform = problem.model, problem.platform
        sizes = np.array([r.tree.size for r in rounds])
        fed = np.array([r.tree.n_internal for r in rounds])
        draft = _draft_seconds(problem, self._draft(problem, config), config.draft_device, fed)
        host = np.asarray(host_seconds(problem, self.name, config.device, passes=fed, nodes=sizes), float) \
            * np.ones(len(rounds))
        load, share = 0.0, 0.0
        if lp.streamed_layers:
            link = storage_link(platform, config.device)
            load = READS_PER_LAYER * link.latency_s + lp.layer_bytes / (link.bw_bytes_per_s * link.efficiency)
            share = link.host_share
        # the loader and the forward hand the buffer back and forth: a calibrated host's wake-up of a waiting
        # worker thread (the split probe's barrier, sim.strategies.hcmp_threads); 0 elsewhere. A streamed layer
        # computed after the forward waited for it: the device's calibrated ``stream_layer`` (0 elsewhere).
        wake = split_costs(platform, config.device).get("hcmp_sync", 0.0)
        resume = 1e-6 * platform.loop_costs_us(config.device).get("stream_layer", 0.0)
        out = []
        for i, r in enumerate(rounds):
            poly, per_op = op_seconds(model, platform, config.device, r.tree.size, problem.context, problem.batch,
                                      r.tree.mask_density, resident=self._target_resident(problem, config))
            sections = np.asarray(poly.sections)
            layer = float(per_op[sections == "layer"].sum()) / model.n_layers
            embed, tail = float(per_op[sections == "pre"].sum()), float(per_op[sections == "post"].sum())
            out.append(pipeline_round(float(draft[i]), embed, lp.resident_layers * layer, layer,
                                      tail, float(host[i]), load, lp.streamed_layers, lp.staging, wake_s=wake,
                                      resume_s=resume, host_share=share))
        return lp, out

    def estimate(self, problem: Problem, config: StrategyConfig) -> Estimate:
        if config.option("staging") is not None and config.option("variant") == "llmcad":
            return self._staged_estimate(problem, config)
        plan = self.memory(problem, config)
        variant = config.option("variant")
        if variant != "llmcad":
            single = float(step_seconds(problem.model, problem.platform, config.device, 1, problem.context,
                                        problem.batch))
            load = load_seconds(problem.platform, config.device, plan.streamed) if plan.streamed > 0 else 0.0
            step = single + load
            return Estimate(step_s=step, tokens_per_step=1.0, breakdown={"load": load, "decode": single})
        pipeline = bool(config.option("pipeline"))
        rounds = self.rounds(problem, config)
        weight = np.array([r.weight for r in rounds])
        parts = self._round_parts(problem, config, [r.tree for r in rounds], plan)
        time = float(weight @ self._round_s(parts, pipeline))
        tokens = float(weight @ np.array([r.tokens for r in rounds]))
        proposed = float(weight @ np.array([r.tree.size - 1 for r in rounds], dtype=float))
        mean = {k: float(weight @ v) for k, v in parts.items()}
        return Estimate(step_s=time, tokens_per_step=tokens, proposed_per_step=proposed,
                        draft_passes_per_step=_passes(rounds), breakdown={**mean, "streamed_gb": plan.streamed / GB})

    def _staged_estimate(self, problem: Problem, config: StrategyConfig) -> Estimate:
        rounds = self.rounds(problem, config)
        weight = np.array([r.weight for r in rounds])
        lp, staged = self.staged_rounds(problem, config, rounds)

        def mean(values) -> float:
            return float(weight @ np.asarray(values, dtype=float))
        return Estimate(step_s=mean([p.time_s for p in staged]), tokens_per_step=mean([r.tokens for r in rounds]),
                        proposed_per_step=mean([r.tree.size - 1 for r in rounds]), draft_passes_per_step=_passes(rounds),
                        breakdown={"draft": mean([p.draft_wall_s for p in staged]),
                                   "load": mean([p.load_s for p in staged]),
                                   "wait": mean([p.wait_s for p in staged]),
                                   "compute": mean([p.compute_s for p in staged]),
                                   "verify": mean([p.verify_s for p in staged]), "host": mean([p.host_s for p in staged]),
                                   "streamed_gb": lp.streamed_bytes / GB, "resident_layers": float(lp.resident_layers),
                                   "streamed_layers": float(lp.streamed_layers)})

    # ------------------------------------------------------------------ engine plan
    def plan(self, problem: Problem, config: StrategyConfig, rng: np.random.Generator | None = None,
             per_layer: bool = False) -> StepPlan:
        """One round. With ``rng`` the fallback's round kind is drawn from its stationary distribution
        and the accepted path from the tree's acceptance; without it the likeliest kind, expected tokens."""
        plan = self.memory(problem, config)
        platform = problem.platform
        variant = config.option("variant")
        link = storage_link(platform, config.device) if plan.streamed > 0 else None
        if variant != "llmcad":
            return self._baseline_plan(problem, config, plan, link, per_layer)
        rounds = self.rounds(problem, config)
        if rng is None:
            chosen = max(rounds, key=lambda r: r.weight)
        else:
            chosen = rounds[int(rng.choice(len(rounds), p=np.array([r.weight for r in rounds]) /
                                           sum(r.weight for r in rounds)))]
        tree = chosen.tree
        if config.option("staging") is not None:
            accepted = chosen.tokens if rng is None else _sample_tokens(tree, rank_probs(problem.acceptance), rng)
            return self._staged_plan(problem, config, chosen, accepted, per_layer)
        pipeline = bool(config.option("pipeline"))
        tasks = draft_pass_tasks(problem, self._draft(problem, config), config.draft_device, tree.n_internal, per_layer,
                                 self.name, float(full_share_tree(problem.acceptance, tree.n_internal)))
        last_draft = tasks[-1].name
        deps_verify = [last_draft]
        if link is not None:
            load = Task(name="load", kind="transfer", resource=link.name, phase="load", nbytes=plan.streamed,
                        fixed_s=link.latency_s, deps=() if pipeline else (last_draft,), op="load_target_weights")
            tasks.append(load)
            deps_verify.append("load")
        graph = build_step_graph(problem.model, tree.size, problem.context, problem.batch, tree=tree)
        tasks += graph_tasks(graph, platform, config.device, "verify", "verify", tuple(deps_verify), per_layer,
                             resident=self._target_resident(problem, config))
        excess = loop_verify_excess(problem, config.device, self.name, self._target_resident(problem, config))
        if excess > 0:
            tasks.append(delay_task("verify/loop", excess, "verify", (tasks[-1].name,), config.device))
        host = float(host_seconds(problem, self.name, config.device, passes=tree.n_internal, nodes=tree.size))
        if host > 0:
            tasks.append(delay_task("host", host, "accept", (tasks[-1].name,), config.device))
        if rng is None:
            accepted = chosen.tokens
        else:
            accepted = _sample_tokens(tree, rank_probs(problem.acceptance), rng)
        return StepPlan(tasks=tuple(tasks), tokens_accepted=accepted, tokens_proposed=tree.size - 1,
                        count_phase="verify", count_device=config.device)

    def _staged_plan(self, problem: Problem, config: StrategyConfig, chosen: Round, accepted: float,
                     per_layer: bool) -> StepPlan:
        """One steady-state round of the staged loader: the draft's passes, the verification's embedding and
        resident layers, each streamed layer after its read (a read begun in the previous round keeps only
        what is left of it), the tail and the host-side work; the same schedule as the closed form."""
        _, (staged,) = self.staged_rounds(problem, config, [chosen])
        tree, device = chosen.tree, config.device
        tasks = draft_pass_tasks(problem, self._draft(problem, config), config.draft_device, tree.n_internal, per_layer,
                                 self.name, float(full_share_tree(problem.acceptance, tree.n_internal)))
        if staged.draft_wall_s > staged.draft_s:     # the draft slowed by a read in flight beside it
            tasks.append(delay_task("draft/beside_read", staged.draft_wall_s - staged.draft_s, "draft",
                                    (tasks[-1].name,), config.draft_device))
        tasks.append(Task(name="verify/embed_resident", kind="compute", resource=device, phase="verify",
                          fixed_s=staged.pre_wall_s, deps=(tasks[-1].name,), op="resident_layers"))
        before = tasks[-1].name
        link = storage_link(problem.platform, device) if staged.schedule else None
        k, wake = config.option("staging"), staged.wake_s
        for j, (l0, l1, c0, c1) in enumerate(staged.schedule):
            deps = (f"load{j - 1}",) if j else ()
            if j >= k:          # the buffer of layer j - k, freed by its compute this round; the loader woken
                tasks.append(delay_task(f"load{j}/wake", wake, "load", (f"verify/layer{j - k}",)))
                deps += (tasks[-1].name,)
            elif l0 > 0:        # a read the previous round could not start (its buffer was freed late)
                tasks.append(delay_task(f"load{j}/start", l0, "load"))
                deps += (tasks[-1].name,)
            tasks.append(Task(name=f"load{j}", kind="transfer", resource=link.name, phase="load",
                              fixed_s=l1 - max(l0, 0.0), deps=deps, op="load_layer"))
            ready = f"load{j}"
            if c0 > l1:         # the forward waited for the read: woken when it is done
                tasks.append(delay_task(f"load{j}/ready", c0 - l1, "load", (ready,)))
                ready = tasks[-1].name
            tasks.append(Task(name=f"verify/layer{j}", kind="compute", resource=device, phase="verify",
                              fixed_s=c1 - c0, deps=(ready, before), op="streamed_layer"))
            before = tasks[-1].name
        tasks.append(Task(name="verify/tail", kind="compute", resource=device, phase="verify", fixed_s=staged.tail_s,
                          deps=(before,), op="lm_head"))
        if staged.post_wall_s > staged.tail_s:       # the host-side work (and a read in flight beside the tail)
            tasks.append(delay_task("host", staged.post_wall_s - staged.tail_s, "accept", (tasks[-1].name,), device))
        return StepPlan(tasks=tuple(tasks), tokens_accepted=accepted, tokens_proposed=tree.size - 1,
                        count_phase="verify", count_device=device)

    def _baseline_plan(self, problem: Problem, config: StrategyConfig, plan: MemoryPlan, link: Link | None,
                       per_layer: bool) -> StepPlan:
        platform, model = problem.platform, problem.model
        graph = build_step_graph(model, 1, problem.context, problem.batch)
        tasks: list[Task] = []
        if link is None:
            tasks += graph_tasks(graph, platform, config.device, "decode", "decode", (), per_layer)
        else:
            tasks.append(Task(name="load", kind="transfer", resource=link.name, phase="load", nbytes=plan.streamed,
                              fixed_s=link.latency_s, op="load_target_weights"))
            tasks += graph_tasks(graph, platform, config.device, "decode", "decode", ("load",), per_layer)
        return StepPlan(tasks=tuple(tasks), tokens_accepted=1, tokens_proposed=0, count_phase="decode",
                        count_device=config.device)


def _passes(rounds: Sequence[Round]) -> float:
    """Draft passes per round: one per internal node of each kind of round's tree, weighted."""
    return float(sum(r.weight * r.tree.n_internal for r in rounds))


def _draft_seconds(problem: Problem, draft: ModelSpec, device: str, fed: np.ndarray) -> np.ndarray:
    """Seconds of drafting each tree of ``fed`` draft passes (one tree node fed per pass, the cache growing from
    the context; :func:`sim.strategies.chain.draft_cumulative`), each the mix by the share of rounds after one
    that accepted everything (:func:`sim.strategies.loop_passes.full_share_tree`)."""
    from sim.strategies.chain import draft_cumulative

    fed = np.asarray(fed, dtype=int)
    first, second = draft_cumulative(problem, draft, device, int(fed.max()), DraftTreeStrategy.name)
    full = full_share_tree(problem.acceptance, fed)
    return (1.0 - full) * first[fed] + full * second[fed]


def _sample_tokens(tree: TokenTree, p: Sequence[float], rng: np.random.Generator) -> int:
    """Walk the tree: at each node the target's token is the draft's rank-r candidate with probability
    p[r] (ranks exclusive), else none; +1 for the target's own token."""
    node, cum = 0, np.cumsum(p)
    while True:
        rank = int(np.searchsorted(cum, rng.random(), side="right"))
        child = next((c for c in tree.children[node] if tree.ranks[c] == rank), None) if rank < len(p) else None
        if child is None:
            return 1 + tree.depths[node]
        node = child


STRATEGY = DraftTreeStrategy
