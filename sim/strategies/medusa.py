"""``medusa``: Medusa heads propose a sparse tree; the target verifies it in one pass (Medusa §2).

One step = the target's forward over the tree's q = ``tree_width`` tokens (root included; the
tree mask's density prices the new-token attention block) followed by the K heads that propose
the next tree. Heads: K = the tree's depth (unused heads are dropped at no cost, Medusa §2.1.2);
each is a ResBlock ``h + SiLU(W1 h)`` with W1: d x d and a d x V projection (Medusa §2.1.1),
applied to the hidden states of all q verified tokens, as the Medusa implementation does
(``medusa_logits`` over the whole tree, the accepted path's row kept).

The tree comes from the acceptance model:

- per-head accuracies -> ``tree_shape`` ``greedy`` (Medusa §2.3.3; ``draft_depth`` > 0 caps its
  depth) or ``dp`` (the optimal tree of that size within ``draft_depth`` levels,
  :mod:`sim.tree_search`). The depth matters because every level costs one head;
- a length table / curve only (Ghidorah Table I, Medusa App. G) -> ``medusa-list``: the first
  q - 1 nodes of Medusa's ``mc_sim_7b_63`` list price the tree's shape, the table gives the
  tokens (departure: the papers' own trees are not published);
- ``cartesian`` with option ``cartesian_sizes`` (Medusa §2.1.2), or an explicit ``tree``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from hwmodels.contention import standalone_bw
from hwmodels.dtypes import DTYPE_BYTES
from hwmodels.errors import HetSpecError
from sim.closed_form import roofline_arrays, step_seconds
from sim.model_spec import ModelSpec
from sim.op_timing import fallback_launches, measured_or
from sim.plan import StepPlan, delay_task, graph_tasks, ops_tasks
from sim.step_graph import ACT_FLOPS_PER_ELEMENT, ADD_FLOPS_PER_ELEMENT, Op, build_step_graph, elementwise_op, linear_op
from sim.step_timing import price_op
from sim.strategies.base import (Estimate, EstimateArrays, Knob, Problem, Strategy, StrategyConfig,
                                 co_resident, fitting_devices, host_seconds, require_fit)
from sim.tree import TokenTree
from sim.tree_search import dp_table, greedy_trees, medusa_list_tree

#: Widths searched by default: up to Medusa's 64-token tree (Medusa Fig. 6 / App. C) and Ghidorah's
#: largest width (Table I). ``--max-width`` raises it.
DEFAULT_MAX_WIDTH = 64
#: The Medusa choice list has 63 nodes + root.
MEDUSA_LIST_WIDTH = 64


def head_ops(model: ModelSpec, tokens: int, n_heads: int, dtype: str | None = None, batched: bool = False) -> list[Op]:
    """The operators of ``n_heads`` Medusa heads on ``tokens`` hidden states (batch folded in).

    ``batched``: all heads in one batched GEMM per projection (``[K, d, d]`` and ``[K, V, d]`` weights,
    as :mod:`real.model.medusa_heads` runs them): one launch per projection instead of one per head; the
    FLOPs and weight bytes are those of K heads (a linear with K x the output features), marked
    :attr:`~sim.step_graph.Op.batched` so a device that measured batched GEMMs prices them as such.
    """
    if n_heads <= 0:
        return []
    dt = DTYPE_BYTES[dtype or model.dtype]
    h, T = model.hidden, tokens
    if batched:
        return [
            linear_op("medusa_resblock", T, h, n_heads * h, dt, 1, section="post", batched=True),
            # three kernels in MedusaHeads.residual: the bias add, the SiLU, the residual add
            elementwise_op("medusa_silu_add", "elementwise", T * h * n_heads,
                           ACT_FLOPS_PER_ELEMENT + ADD_FLOPS_PER_ELEMENT, dt, 1, reads=2, section="post", launches=3),
            linear_op("medusa_head", T, h, n_heads * model.vocab, dt, 1, kind="lm_head", section="post", batched=True),
        ]
    return [
        linear_op("medusa_resblock", T, h, h, dt, n_heads, section="post"),
        # SiLU of W1 h and the residual add, fused: reads W1 h and h, writes one tensor
        elementwise_op("medusa_silu_add", "elementwise", T * h, ACT_FLOPS_PER_ELEMENT + ADD_FLOPS_PER_ELEMENT, dt,
                       n_heads, reads=2, section="post"),
        linear_op("medusa_head", T, h, model.vocab, dt, n_heads, kind="lm_head", section="post"),
    ]


def proposal_ops(model: ModelSpec, tokens: int, n_heads: int, dtype: str | None = None) -> list[Op]:
    """What HetSpec's Medusa decode loop launches around its batched heads over ``tokens`` hidden rows
    (``head_proposals`` in real/decode/medusa.py): the accepted nodes' hidden rows picked out (``index_select``)
    before them, each head's top-k over its logits after (a selection: the logits read, no arithmetic counted)."""
    if n_heads <= 0:
        return []
    dt = DTYPE_BYTES[dtype or model.dtype]
    return [elementwise_op("medusa_row_select", "elementwise", tokens * model.hidden, 0, dt, 1, section="post"),
            elementwise_op("medusa_topk", "elementwise", tokens * n_heads * model.vocab, 0, dt, 1, writes=0,
                           section="post")]


def heads_step_ops(model: ModelSpec, tokens: int, n_heads: int, dtype: str | None = None,
                   batched: bool = False) -> list[Op]:
    """The heads' part of a medusa step: :func:`head_ops`, and with ``batched`` (HetSpec's real path) the
    loop's :func:`proposal_ops` around them."""
    return head_ops(model, tokens, n_heads, dtype, batched) + (proposal_ops(model, tokens, n_heads, dtype)
                                                               if batched else [])


def heads_resident(problem: Problem, device: str, n_heads) -> bool:
    """Whether the target and the weights of ``n_heads`` heads (the largest count asked) fit in
    ``device``'s cache together (each evicts the other every step otherwise)."""
    h, v = problem.model.hidden, problem.model.vocab
    per_head = (h * h + h * v) * DTYPE_BYTES[problem.model.dtype]
    return co_resident(problem, device, problem.model, extra_bytes=per_head * float(np.max(n_heads)))


#: How the heads run: ``reference`` (Medusa's code: one ResBlock and projection per head, on every
#: verified token's hidden state, ``medusa_logits`` over the whole tree) or ``hetspec`` (HetSpec's
#: real path: all heads in one batched GEMM per projection, on the last accepted token's hidden
#: state only, after the acceptance: real/decode/medusa.py ``head_proposals``).
HEADS_IMPLS = ("reference", "hetspec")


def heads_impl(config: StrategyConfig) -> str:
    return config.option("medusa_heads_impl", "reference")


def batched_heads(config: StrategyConfig) -> bool:
    """Whether the heads run as HetSpec's real path runs them: batched, around the loop's row select and top-k."""
    return heads_impl(config) == "hetspec"


def head_rows(config: StrategyConfig) -> int:
    """Hidden-state rows the heads read per step (see :data:`HEADS_IMPLS`)."""
    return 1 if batched_heads(config) else config.tree.size


def heads_seconds(problem: Problem, device: str, width: int, n_heads: int, batched: bool = False) -> float:
    """Seconds of the heads over ``width`` hidden-state rows (all instances) on ``device`` alone."""
    dev = problem.platform.device(device)
    bw = standalone_bw(problem.platform, device)
    resident = heads_resident(problem, device, n_heads)
    return float(sum((price_op(op, dev, problem.model.dtype, bw, resident).time_s
                      for op in heads_step_ops(problem.model, width * problem.batch, n_heads, batched=batched)),
                     0.0))


def heads_run(config: StrategyConfig) -> int:
    """Heads computed per step: option ``medusa_heads`` (e.g. 5: Medusa's reference code runs every
    head of the model each step, whatever the tree uses), else the tree's depth."""
    heads = config.option("medusa_heads")
    return int(heads) if heads is not None else config.tree.depth


def tree_capacity(ranks: int, depth: int) -> int:
    """Tokens of the full tree with ``ranks`` children per node and ``depth`` levels, root included."""
    return 1 + sum(ranks ** d for d in range(1, depth + 1))


def heads_seconds_many(problem: Problem, device: str, widths: np.ndarray, n_heads: np.ndarray) -> np.ndarray:
    """:func:`heads_seconds` over arrays of widths and head counts (same operators, priced on arrays)."""
    widths = np.asarray(widths, dtype=float)
    n_heads = np.asarray(n_heads, dtype=float)
    dev = problem.platform.device(device)
    bw = standalone_bw(problem.platform, device)
    ops = head_ops(problem.model, 1, 1)          # per-token coefficients: every head op is linear in T
    T = widths * problem.batch
    total = np.zeros_like(widths)
    resident = heads_resident(problem, device, n_heads) if n_heads.size else False
    for op in ops:
        # flops and activation bytes scale with T; weight bytes do not (sim.step_graph.linear_op)
        t = roofline_arrays(dev, problem.model.dtype, op.flops * T, op.weight_bytes + op.act_bytes * T + op.kv_bytes * T,
                            T if op.tokens else 0.0, 1.0, fallback_launches(op, dev), bw, resident=resident,
                            rows=op.weight_rows)["time_s"]
        t = measured_or(dev, op, problem.model.dtype, T, t, resident)   # a profiled device's measured head GEMMs
        total += t
    return total * n_heads


class MedusaStrategy(Strategy):
    name = "medusa"
    knob_help = {
        "tree_width": "tokens verified per step, root included",
        "draft_depth": "tree depth budget = Medusa heads used (0: no cap for greedy)",
        "tree_shape": "greedy | dp (optimal under size and depth budgets) | medusa-list | cartesian",
        "device": "device running the target and the heads",
        "medusa_heads": "option: heads computed per step (default: the tree depth; Medusa's reference code runs all)",
        "medusa_heads_impl": "option: reference (default: one GEMM per head over every verified token, as "
                             "Medusa's code) | hetspec (one batched GEMM for all heads over the last accepted "
                             "token, as HetSpec's real path)",
        "tree": "a fixed tree (--tree-choices FILE of Medusa choice paths) instead of one built per width",
        "cartesian_sizes": "option (tree_shape cartesian): candidates per head, e.g. 2,3",
    }
    budget_knobs = ("draft_depth",)     # a cap: trees come out as deep as they need, up to it (sim.optimizer)

    # ------------------------------------------------------------------ search space
    def search_space(self, problem: Problem, max_width: int = DEFAULT_MAX_WIDTH) -> tuple[Knob, ...]:
        acc_model = problem.need_acceptance(self.name)
        devices = fitting_devices(problem, problem.model) or (problem.platform.accelerator.name,)
        if acc_model.medusa_accuracy is not None:
            depth = acc_model.max_depth
            widths = tuple(range(1, max_width + 1))
            return (Knob("device", devices), Knob("tree_shape", ("greedy", "dp")),
                    Knob("draft_depth", tuple(range(1, depth + 1))), Knob("tree_width", widths))
        rng = acc_model.width_range
        if rng is None:
            raise HetSpecError(f"acceptance model {acc_model.name}: has no tree acceptance for medusa "
                               "(needs medusa_accuracy or an acceptance_length table)")
        hi = min(rng[1], max_width, MEDUSA_LIST_WIDTH)
        return (Knob("device", devices), Knob("tree_shape", ("medusa-list",)), Knob("draft_depth", (0,)),
                Knob("tree_width", tuple(range(max(rng[0], 1), hi + 1))))

    # ------------------------------------------------------------------ configs
    def resolve(self, problem: Problem, config: StrategyConfig) -> StrategyConfig:
        config = super().resolve(problem, config)
        acc_model = problem.need_acceptance(self.name)
        require_fit(problem, problem.model, config.device)
        tree = config.tree
        shape = config.tree_shape
        if tree is None:
            tree, shape = self._build_tree(acc_model, config)
        acc_model.check_tree(tree)
        heads = config.option("medusa_heads")
        if heads is not None and (isinstance(heads, bool) or not isinstance(heads, (int, np.integer))
                                  or heads < tree.depth):
            raise HetSpecError(f"option medusa_heads must be an integer >= the tree depth {tree.depth} (got {heads!r})")
        if heads_impl(config) not in HEADS_IMPLS:
            raise HetSpecError(f"option medusa_heads_impl must be {' or '.join(HEADS_IMPLS)} (got {heads_impl(config)!r})")
        return replace(config, tree=tree, tree_shape=shape, tree_width=tree.size, draft_depth=tree.depth,
                       partition_ratio=None, draft_device=None, draft_model=None)

    def _build_tree(self, acc_model, config: StrategyConfig) -> tuple[TokenTree, str]:
        width, shape, depth = config.tree_width, config.tree_shape, config.draft_depth
        if shape == "cartesian":
            sizes = config.option("cartesian_sizes")
            if not sizes:
                raise HetSpecError("tree shape cartesian needs option cartesian_sizes, e.g. 2,3")
            return TokenTree.cartesian(tuple(int(s) for s in sizes)), shape
        if shape == "chain":
            return TokenTree.chain(width - 1), shape
        acc = acc_model.accuracy
        if acc is None or shape == "medusa-list":
            return medusa_list_tree(width), "medusa-list"
        budget = min(depth or acc.shape[0], acc.shape[0])
        capacity = tree_capacity(acc.shape[1], budget)
        if width > capacity:
            raise HetSpecError(f"a tree of depth <= {budget} with {acc.shape[1]} ranks has at most {capacity} tokens "
                               f"(width {width} asked)")
        # one DP / greedy run at the largest searched width serves every smaller width (cached)
        size = min(max(width, DEFAULT_MAX_WIDTH), capacity)
        if shape == "dp":
            return dp_table(acc, size, budget).tree(width), shape
        return greedy_trees(acc, size, budget)[width - 1], "greedy"

    # ------------------------------------------------------------------ closed form
    def estimate(self, problem: Problem, config: StrategyConfig) -> Estimate:
        tree = config.tree
        verify = float(step_seconds(problem.model, problem.platform, config.device, tree.size, problem.context,
                                    problem.batch, tree.mask_density,
                                    resident=heads_resident(problem, config.device, heads_run(config))))
        heads = heads_seconds(problem, config.device, head_rows(config), heads_run(config),
                              batched=batched_heads(config))
        host = float(host_seconds(problem, self.name, config.device, nodes=tree.size))
        tokens = problem.acceptance.tree_tokens(tree)
        return Estimate(step_s=verify + heads + host, tokens_per_step=tokens, proposed_per_step=tree.size - 1,
                        draft_passes_per_step=0.0,
                        breakdown={"verify": verify, "heads": heads, "host": host})

    def estimate_many(self, problem: Problem, configs: Sequence[StrategyConfig]) -> EstimateArrays:
        n = len(configs)
        step = np.zeros(n)
        tokens = problem.acceptance.trees_tokens([c.tree for c in configs])
        proposed = np.array([c.tree.size - 1 for c in configs], dtype=float)
        for device in sorted({c.device for c in configs}):
            idx = np.array([i for i, c in enumerate(configs) if c.device == device])
            q = np.array([configs[i].tree.size for i in idx])
            rows = np.array([head_rows(configs[i]) for i in idx])
            depth = np.array([heads_run(configs[i]) for i in idx])
            dens = np.array([configs[i].tree.mask_density for i in idx])
            batched = np.array([batched_heads(configs[i]) for i in idx])
            heads = heads_seconds_many(problem, device, rows, depth)
            if batched.any():
                heads = np.where(batched, [heads_seconds(problem, device, r, d, batched=True)
                                           for r, d in zip(rows, depth)], heads)
            verify = np.array([float(step_seconds(problem.model, problem.platform, device, qi, problem.context,
                                                  problem.batch, di, resident=heads_resident(problem, device, ki)))
                               for qi, di, ki in zip(q, dens, depth)]) if problem.platform.device(device).cache_gb \
                else step_seconds(problem.model, problem.platform, device, q, problem.context, problem.batch, dens)
            step[idx] = verify + heads + host_seconds(problem, self.name, device, nodes=q)
        return EstimateArrays(step_s=step, tokens_per_step=tokens, proposed_per_step=proposed)

    # ------------------------------------------------------------------ engine plan
    def plan(self, problem: Problem, config: StrategyConfig, rng: np.random.Generator | None = None,
             per_layer: bool = False) -> StepPlan:
        tree = config.tree
        graph = build_step_graph(problem.model, tree.size, problem.context, problem.batch, tree=tree)
        tasks = graph_tasks(graph, problem.platform, config.device, "verify", "verify", per_layer=per_layer,
                            resident=heads_resident(problem, config.device, heads_run(config)))
        tasks += ops_tasks(heads_step_ops(problem.model, head_rows(config) * problem.batch, heads_run(config),
                                          batched=batched_heads(config)),
                           problem.platform, config.device, graph.dtype, "heads", "draft", deps=(tasks[-1].name,),
                           resident=heads_resident(problem, config.device, heads_run(config)))
        host = float(host_seconds(problem, self.name, config.device, nodes=tree.size))
        if host > 0:
            tasks.append(delay_task("host", host, "accept", (tasks[-1].name,), config.device))
        acc_model = problem.acceptance
        accepted = acc_model.tree_tokens(tree) if rng is None else acc_model.sample_tree_tokens(tree, rng)
        return StepPlan(tasks=tuple(tasks), tokens_accepted=accepted, tokens_proposed=tree.size - 1,
                        count_phase="verify", count_device=config.device)


STRATEGY = MedusaStrategy
