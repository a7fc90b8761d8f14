"""``hcmp``: Ghidorah's hetero-core model parallelism, Medusa verification split over two devices.

Ghidorah (§IV-B) runs one Medusa step (the target's
forward over the q = ``tree_width`` tree tokens, then the K heads) on a CPU and a GPU that share
one DRAM (zero-copy, unified memory). ``partition_ratio`` r is the share of the primary device
``device`` (default the GPU); the secondary (option ``secondary``, default the other device of its
memory domain) takes 1 - r. Two ways to split (option ``split``):

- ``hcmp`` (Ghidorah): EVERY linear is split by output columns. Both devices read the whole input
  (same M = q rows: the token dimension is not divided, §IV-C), each multiplies it by its column
  slice and writes its own slice of the output; no all-reduce. Elementwise operators follow the
  columns. Attention is split *inside every head* by affinity: the dense part (the q queries
  against the s cached keys / values) goes to the primary, the sparse tree-masked part among the
  q new tokens to the secondary, which prices it with its sparse kernel
  (``sparse_attn_efficiency``). Option ``attention_split``: ``static`` keeps exactly that;
  ``dynamic`` (default) moves part of the busier side's work to the other side so that both finish
  together (Ghidorah's context-dependent partitioning, Fig. 10(a)). Each side's softmax is local;
  the online-softmax merge (rescale both partial outputs with their max / sum statistics) is
  fused into the next operator's input read: each device reads the *other* partial output and the
  statistics once more (:data:`MERGE_FLOPS_PER_ELEMENT` FLOPs per output element).
- ``megatron`` (the paper's Medusa+EM baseline: Megatron-LM TP on zero-copy memory): per pair of
  linears the first is split by columns (by heads for attention), the second by rows, and one
  all-reduce joins the pair: each device writes a full-size partial sum; after a page sync both
  partials (and the residual) are read and the sum written back (split by columns), then another
  sync. Norms are replicated on both devices, attention is split by heads and computed dense
  (masked; EM has no sparse kernel). EdgeNN's ratio from standalone times is
  :func:`standalone_ratio` (the optimizer searches the ratio like for ``hcmp`` unless it is fixed).

Timing: the step is a sequence of *groups*, one operator's two parts that start together (a
barrier after each group: the next operator needs the whole previous output), some followed by a
page sync (the unified link's latency: Ghidorah §II-D, < 0.1 ms on Xavier NX). A page sync
follows every point where a device reads what the other wrote: after the embedding, after
Q/K/V (+ RoPE), after attention, after the attention residual (the MLP norm reads the whole row),
after the MLP activation, after the MLP residual, after the final norm, after the LM head / head
ResBlocks and after the heads; 5 per layer for ``hcmp``, 4 per layer for ``megatron``.
Both parts of a group stream from the same DRAM, so the closed form prices each group with
:func:`sim.concurrent_parts.concurrent_seconds` (the engine's own fluid contention rule) and equals
the engine's step time; the engine plan is the same groups as tasks with the same barriers.

**Two worker threads** (a calibrated host, :mod:`sim.strategies.hcmp_threads`): the primary's loop
costs ``hcmp_*`` (``hetspec calibrate``'s split probe) price a page sync as a barrier between two Python
threads, each side's fixed costs of a split layer as measured, the two threads' Python taking turns on
one interpreter in every group, and the step's hand-offs to the secondary worker. Presets have none.

Ratio 0 or 1 is the single-device Medusa step of :mod:`sim.strategies.medusa` plus nothing
(no sync, no merge). The decode loop's host-side work (acceptance walk, cache compaction; the
device's calibrated loop costs, only calibrated hosts have them) is the Medusa loop's at every
ratio, run by the primary: the split step adds it after the heads as the single-device step does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from hwmodels.contention import standalone_bw
from hwmodels.dtypes import DTYPE_BYTES
from hwmodels.errors import HetSpecError, UnknownNameError
from hwmodels.roofline import roofline_time
from sim.concurrent_parts import concurrent_seconds
from sim.plan import StepPlan, Task, delay_task
from sim.step_graph import Op, build_step_graph
from sim.strategies.base import Estimate, EstimateArrays, Knob, Problem, Strategy, StrategyConfig, host_seconds
from sim.strategies.hcmp_step import EMPTY, Group, Part, SplitStep
from sim.strategies.hcmp_threads import calibrated_layer_fixed, serial_share, split_costs
from sim.strategies.medusa import (DEFAULT_MAX_WIDTH, MedusaStrategy, batched_heads, head_ops, head_rows, heads_run,
                                   proposal_ops)

SPLITS = ("hcmp", "megatron")
ATTENTION_SPLITS = ("dynamic", "static")

#: FLOPs per output element of the online-softmax merge on each device: rescale the two partial
#: outputs by exp(m_i - m) * l_i (2 multiplies), add them, divide by the merged sum (Ghidorah
#: §IV-B after FlashAttention / Ring Attention: "fused with the reduce operation").
MERGE_FLOPS_PER_ELEMENT = 4
#: Bytes per row statistic of the merge: the running max and sum of each head, kept in fp32.
MERGE_STAT_BYTES = 4
#: Grid resolution of the dynamic attention split (fraction of the busier side's work moved).
ATTENTION_SPLIT_POINTS = 257
#: Operators after which a page sync follows under ``hcmp`` (the next one reads the other's slice).
HCMP_SYNC_AFTER = frozenset({"embed", "rope", "attention", "attn_residual", "act_mul", "mlp_residual", "final_norm",
                             "lm_head", "medusa_resblock", "medusa_head"})
#: Operators after which a page sync follows under ``megatron`` (before and after each all-reduce).
MEGATRON_SYNC_AFTER = frozenset({"o_proj", "attn_residual", "down_proj", "mlp_residual", "lm_head",
                                 "medusa_resblock", "medusa_head"})
#: Attention sub-operators (X = QK^T, A = softmax(X), O = AV: Ghidorah Eq. 1).
DENSE_ATTENTION = ("attn_score", "attn_value")
SPARSE_ATTENTION = ("tree_score", "tree_value")
#: Megatron pairs: the second linear of each pair is split by rows and ends in an all-reduce.
ROW_SPLIT = frozenset({"o_proj", "down_proj"})
#: The residual adds that carry the all-reduce under ``megatron`` (read both partials + residual).
ALLREDUCE_ADDS = frozenset({"attn_residual", "mlp_residual"})
#: Norms replicated on both devices under ``megatron`` (each holds the whole row after the reduce).
REPLICATED = frozenset({"embed", "attn_norm", "mlp_norm", "final_norm"})


def linear_dims(model, name: str) -> tuple[int, int]:
    """(d_in, d_out) of a linear operator of the step graph or the Medusa heads, by name."""
    h, hq, kv, i, v = model.hidden, model.n_heads * model.head_dim, model.kv_dim, model.intermediate, model.vocab
    dims = {"q_proj": (h, hq), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (hq, h), "gate_proj": (h, i),
            "up_proj": (h, i), "down_proj": (i, h), "lm_head": (h, v), "medusa_resblock": (h, h),
            "medusa_head": (h, v)}
    if name not in dims:
        raise HetSpecError(f"hcmp: no column-split rule for linear operator {name!r}")
    return dims[name]


# ---------------------------------------------------------------------- pricing helpers
def _price(problem: Problem, device: str, op: Op, dtype: str, density: float | None = None):
    """Compute seconds and fixed overhead of one instance of ``op`` alone on ``device``."""
    dev = problem.platform.device(device)
    t = roofline_time(dev, op.flops, op.bytes, dtype, tokens=op.tokens or None,
                      density=op.density if density is None else density, launches=op.launches,
                      bw_bytes_per_s=standalone_bw(problem.platform, device), rows=op.weight_rows, batched=op.batched,
                      masked_pass=op.masked_pass)
    return t.compute_s, t.overhead_s


def _op_dims(problem, op: Op, dtype: str) -> tuple[int, int]:
    """(d_in, d_out) of a linear operator: d_in by its name, d_out from its FLOPs (batched Medusa heads
    stack K heads' outputs; the weights may be stored quantized); checked against its activation bytes."""
    d_in = linear_dims(problem.model, op.name)[0]
    dt = DTYPE_BYTES[dtype]
    d_out = int(round(op.flops / (2.0 * op.tokens * d_in)))
    if not np.isclose(op.act_bytes, dt * op.tokens * (d_in + d_out)):
        raise HetSpecError(f"hcmp: operator {op.name} does not have the {d_in}-input weight its name implies")
    return d_in, d_out


def _column_part(problem, device, op: Op, dtype: str) -> Part:
    """A linear split by output columns: the whole input is read, weights and output scale."""
    d_in, d_out = _op_dims(problem, op, dtype)
    dt = DTYPE_BYTES[dtype]
    c, o = _price(problem, device, op, dtype)
    return Part(op=op.name, compute_s=c, fixed_s=o, act0_bytes=dt * op.tokens * d_in,
                bytes1=op.weight_bytes + dt * op.tokens * d_out, flops=op.flops, wkv_bytes=op.weight_bytes)


def _row_part(problem, device, op: Op, dtype: str) -> Part:
    """A linear split by input rows (Megatron's second linear): input share and weights scale, each
    device writes a full-size partial sum."""
    d_in, d_out = _op_dims(problem, op, dtype)
    dt = DTYPE_BYTES[dtype]
    c, o = _price(problem, device, op, dtype)
    return Part(op=op.name, compute_s=c, fixed_s=o, act0_bytes=dt * op.tokens * d_out,
                bytes1=op.weight_bytes + dt * op.tokens * d_in, flops=op.flops, wkv_bytes=op.weight_bytes)


def _elementwise_part(problem, device, op: Op, dtype: str, split: bool = True, extra_read_bytes: float = 0.0,
                      density: float | None = None) -> Part:
    """An operator whose every byte and FLOP follows the share (columns or heads), or a whole
    (replicated) one; ``extra_read_bytes`` are share-scaled reads the unsplit operator does not do."""
    c, o = _price(problem, device, op, dtype, density)
    return Part(op=op.name, compute_s=c, fixed_s=o, act0_bytes=0.0, bytes1=op.bytes + extra_read_bytes,
                flops=op.flops, wkv_bytes=op.weight_bytes + op.kv_bytes, split=split)


# ---------------------------------------------------------------------- attention split (hcmp)
@dataclass(frozen=True)
class AttentionSplit:
    """Where the attention of one layer runs: ``dense_moved`` of the dense part runs on the
    secondary, ``sparse_moved`` of the sparse part on the primary; the parts and their time."""

    dense_moved: float
    sparse_moved: float
    primary: Part
    secondary: Part
    seconds: float      # one layer's attention group, both sides concurrent


def _attention_work(problem: Problem, graph, device: str):
    """(compute s, fixed s, bytes, FLOPs, KV bytes) of the dense and the sparse attention of one
    layer alone on ``device``; softmax is divided between them by their share of the row."""
    ops = {op.name: op for op in graph.section("layer")}
    q, s = graph.tokens, graph.context
    soft = ops["softmax"]
    out = {}
    for label, names, frac in (("dense", DENSE_ATTENTION, s / (s + q)), ("sparse", SPARSE_ATTENTION, q / (s + q))):
        comp = flops = nbytes = kv = 0.0
        for name in names:
            if name not in ops:
                continue
            c, _ = _price(problem, device, ops[name], graph.dtype)
            comp, flops, nbytes, kv = comp + c, flops + ops[name].flops, nbytes + ops[name].bytes, kv + ops[name].kv_bytes
        c, _ = _price(problem, device, soft, graph.dtype)
        out[label] = (comp + frac * c, flops + frac * soft.flops, nbytes + frac * soft.bytes, kv)
    fixed = problem.platform.device(device).op_overhead_s   # one fused attention kernel per device
    return out, fixed


def attention_split(problem: Problem, graph, primary: str, secondary: str, mode: str) -> AttentionSplit:
    """The attention of one layer split dense (primary) / sparse (secondary); ``dynamic`` moves the
    fraction of the busier side's work to the other side that minimises the group's time."""
    work_p, fixed_p = _attention_work(problem, graph, primary)
    work_s, fixed_s = _attention_work(problem, graph, secondary)
    if mode == "static":
        x = np.array([0.0])
        y = np.array([0.0])
    else:
        grid = np.linspace(0.0, 1.0, ATTENTION_SPLIT_POINTS)
        x = np.concatenate([grid, np.zeros_like(grid)])   # dense work moved to the secondary
        y = np.concatenate([np.zeros_like(grid), grid])   # sparse work moved to the primary
    dp, sp, ds, ss = work_p["dense"], work_p["sparse"], work_s["dense"], work_s["sparse"]
    comp = np.stack([(1 - x) * dp[0] + y * sp[0], x * ds[0] + (1 - y) * ss[0]], axis=-1)
    nbytes = np.stack([(1 - x) * dp[2] + y * sp[2], x * ds[2] + (1 - y) * ss[2]], axis=-1)
    busy = (comp > 0) | (nbytes > 0)
    fixed = np.where(busy, np.array([fixed_p, fixed_s]), 0.0)
    ends = concurrent_seconds(problem.platform, (primary, secondary), fixed, comp, nbytes).max(axis=-1)
    k = int(np.argmin(ends))
    xk, yk = float(x[k]), float(y[k])

    def part(i: int) -> Part:
        w_d, w_s = (1 - xk, yk) if i == 0 else (xk, 1 - yk)
        d, sp_ = (dp, sp) if i == 0 else (ds, ss)
        return Part(op="attention", compute_s=float(comp[k, i]), fixed_s=float(fixed[k, i]), act0_bytes=0.0,
                    bytes1=float(nbytes[k, i]), flops=w_d * d[1] + w_s * sp_[1], wkv_bytes=w_d * d[3] + w_s * sp_[3],
                    split=False)

    return AttentionSplit(dense_moved=xk, sparse_moved=yk, primary=part(0), secondary=part(1), seconds=float(ends[k]))


def _merge_part(problem: Problem, device: str, graph) -> Part:
    """The online-softmax merge on one device: read the other partial output and both statistics,
    rescale and add (fused into the next operator, no launch of its own)."""
    model, dt = problem.model, DTYPE_BYTES[graph.dtype]
    rows = graph.batch * graph.tokens
    elements = rows * model.n_heads * model.head_dim
    flops = MERGE_FLOPS_PER_ELEMENT * elements
    nbytes = dt * elements + 2 * 2 * MERGE_STAT_BYTES * rows * model.n_heads
    op = Op("softmax_merge", "elementwise", "layer", flops=flops, weight_bytes=0.0, act_bytes=nbytes, kv_bytes=0.0,
            tokens=0, count=model.n_layers, launches=0)
    c, o = _price(problem, device, op, graph.dtype)
    return Part(op="softmax_merge", compute_s=c, fixed_s=o, act0_bytes=0.0, bytes1=nbytes, flops=flops, split=False)


# ---------------------------------------------------------------------- the split step
def build_split_step(problem: Problem, config: StrategyConfig) -> SplitStep:
    """The groups of a resolved ``hcmp`` config's step (independent of the ratio)."""
    tree = config.tree
    primary, secondary = config.device, config.option("secondary")
    split = config.option("split", "hcmp")
    graph = build_step_graph(problem.model, tree.size, problem.context, problem.batch, tree=tree)
    n_heads = heads_run(config)
    # the heads as the medusa strategy runs them (option medusa_heads_impl: every tree row, or the accepted one)
    rows, batched = head_rows(config) * problem.batch, batched_heads(config)
    ops = list(graph.ops) + head_ops(problem.model, rows, n_heads, graph.dtype, batched=batched)
    L = problem.model.n_layers
    sync_s = problem.platform.link(primary, secondary, "unified").latency_s
    groups: list[Group] = []

    def add(name: str, p: Part, s: Part, count: int, sync_set) -> None:
        phase = "draft" if name.startswith("medusa") else "verify"
        # the LM head shares its stage with the heads' ResBlock when there are heads
        sync = name in sync_set and not (name == "lm_head" and n_heads > 0)
        syncs = 0 if not sync else (1 if name.startswith("medusa") else count)
        groups.append(Group(name, p, s, count, syncs, phase))

    if split == "hcmp":
        att = attention_split(problem, graph, primary, secondary, config.option("attention_split", "dynamic"))
        for op in ops:
            if op.name in DENSE_ATTENTION + SPARSE_ATTENTION or op.name == "softmax":
                if op.name == "softmax":   # the attention group stands where the fused kernel starts
                    add("attention", att.primary, att.secondary, L, HCMP_SYNC_AFTER)
                continue
            if op.name == "o_proj":
                add("softmax_merge", _merge_part(problem, primary, graph), _merge_part(problem, secondary, graph), L,
                    HCMP_SYNC_AFTER)
            parts = [(_column_part if op.kind in ("linear", "lm_head") else _elementwise_part)(problem, d, op, graph.dtype)
                     for d in (primary, secondary)]
            add(op.name, parts[0], parts[1], op.count, HCMP_SYNC_AFTER)
    elif split == "megatron":
        dt = DTYPE_BYTES[graph.dtype]
        for op in ops:
            if op.kind in ("linear", "lm_head"):
                build = _row_part if op.name in ROW_SPLIT else _column_part
                parts = [build(problem, d, op, graph.dtype) for d in (primary, secondary)]
            elif op.name in REPLICATED:
                parts = [_elementwise_part(problem, d, op, graph.dtype, split=False) for d in (primary, secondary)]
            elif op.name in ALLREDUCE_ADDS:
                # all-reduce fused with the residual add: the second partial sum is one more read
                extra = dt * graph.batch * graph.tokens * problem.model.hidden
                parts = [_elementwise_part(problem, d, op, graph.dtype, extra_read_bytes=extra) for d in (primary, secondary)]
            else:
                # attention split by heads, masked block computed dense (no sparse kernel in EM)
                dens = 1.0 if op.kind == "tree_attention" else None
                parts = [_elementwise_part(problem, d, op, graph.dtype, density=dens) for d in (primary, secondary)]
            add(op.name, parts[0], parts[1], op.count, MEGATRON_SYNC_AFTER)
    else:
        raise UnknownNameError("hcmp split", split, SPLITS)
    if batched:
        # HetSpec's loop around the split heads, on the primary alone (real/hetero/hcmp.py): the accepted row
        # handed to the heads before them, each head's top-k over the gathered logits after
        for op in proposal_ops(problem.model, rows, n_heads, graph.dtype):
            groups.append(Group(op.name, _elementwise_part(problem, primary, op, graph.dtype, split=False), EMPTY,
                                op.count, 0, "draft"))
    serial, bare_sync = 0.0, None
    costs = split_costs(problem.platform, primary) if split == "hcmp" else {}
    if costs:    # a host calibrated with the split probe (sim.strategies.hcmp_threads)
        if "hcmp_sync" in costs:
            sync_s, bare_sync = costs["hcmp_sync"], min(costs.get("hcmp_bare_sync", 0.0), costs["hcmp_sync"])
        layer_ops = {op.name for op in graph.section("layer")} | {"attention", "softmax_merge"}
        groups = calibrated_layer_fixed(problem, groups, layer_ops, costs, (primary, secondary))
        serial = serial_share(costs)
    return SplitStep(primary=primary, secondary=secondary, groups=tuple(groups), sync_s=sync_s, serial=serial,
                     bare_sync_s=bare_sync)


def standalone_ratio(problem: Problem, config: StrategyConfig) -> float:
    """EdgeNN's ratio (the Medusa+EM baseline): each device's share proportional to its speed
    alone, r = T_secondary / (T_primary + T_secondary) with T the whole Medusa step on one device."""
    strategy = HcmpStrategy()
    t_p = strategy.estimate(problem, replace(config, partition_ratio=1.0)).step_s
    t_s = strategy.estimate(problem, replace(config, partition_ratio=0.0)).step_s
    return t_s / (t_p + t_s)


# ---------------------------------------------------------------------- the strategy
class HcmpStrategy(Strategy):
    name = "hcmp"
    knob_help = {
        "tree_width": "tokens verified per step, root included (the Medusa tree, as for medusa)",
        "draft_depth": "tree depth budget = Medusa heads used",
        "tree_shape": "greedy | dp | medusa-list | cartesian (as for medusa)",
        "partition_ratio": "share of every split operator on `device` (the rest on the secondary); 0 or 1 = one device",
        "device": "primary device (default: the accelerator)",
        "secondary": "option: the other device (default: the other device of the primary's memory domain)",
        "split": "option: hcmp (Ghidorah: column split, dense/sparse attention) | megatron (Medusa+EM baseline)",
        "attention_split": "option (hcmp): dynamic (balance the attention, default) | static (dense on the primary, "
                           "sparse on the secondary)",
        "tree": "a fixed tree (--tree-choices FILE of Medusa choice paths), as for medusa",
        "cartesian_sizes": "option (tree_shape cartesian): candidates per head, as for medusa",
        "medusa_heads": "option: heads computed per step, as for medusa",
        "medusa_heads_impl": "option: reference | hetspec, as for medusa",
    }
    budget_knobs = ("draft_depth",)     # a cap, as for medusa (sim.optimizer)

    def __init__(self) -> None:
        self._medusa = MedusaStrategy()

    # ------------------------------------------------------------------ search space
    def search_space(self, problem: Problem, max_width: int = DEFAULT_MAX_WIDTH) -> tuple[Knob, ...]:
        knobs = [k for k in self._medusa.search_space(problem, max_width) if k.name != "device"]
        primary = problem.platform.accelerator.name
        return (Knob("device", (primary,)), *knobs, Knob("split", ("hcmp",)),
                Knob("attention_split", ("dynamic",)), Knob("partition_ratio", low=0.0, high=1.0))

    # ------------------------------------------------------------------ configs
    def resolve(self, problem: Problem, config: StrategyConfig) -> StrategyConfig:
        config = Strategy.resolve(self, problem, config)
        split = config.option("split", "hcmp")
        if split not in SPLITS:
            raise UnknownNameError("hcmp split", split, SPLITS)
        mode = config.option("attention_split", "dynamic")
        if mode not in ATTENTION_SPLITS:
            raise UnknownNameError("hcmp attention split", mode, ATTENTION_SPLITS)
        primary = config.device
        secondary = config.option("secondary") or _other_device(problem, primary)
        problem.platform.device(secondary)
        if secondary == primary:
            raise HetSpecError(f"hcmp needs two different devices (primary and secondary are both {primary})")
        if not problem.platform.shares_memory(primary, secondary) or not problem.platform.has_link(primary, secondary,
                                                                                                   "unified"):
            raise HetSpecError(f"hcmp needs {primary} and {secondary} in one memory domain with a unified link "
                               f"(Ghidorah's zero-copy); platform {problem.platform.name} has none")
        ratio = 0.5 if config.partition_ratio is None else config.partition_ratio
        tree_cfg = self._medusa.resolve(problem, replace(config, method="medusa", partition_ratio=None))
        return replace(tree_cfg, method=self.name, partition_ratio=ratio, draft_device=None, draft_model=None,
                       options={**config.options, "split": split, "attention_split": mode, "secondary": secondary})

    # ------------------------------------------------------------------ closed form
    def _single(self, problem: Problem, config: StrategyConfig, device: str) -> Estimate:
        return self._medusa.estimate(problem, replace(config, method="medusa", device=device, partition_ratio=None))

    def ratio_pricer(self, problem: Problem, config: StrategyConfig):
        """The split step built once and priced at any ratios in (0, 1); the endpoints: the unsplit step."""
        step, host = build_split_step(problem, config), _split_host_seconds(problem, config)

        def price(ratios) -> np.ndarray:
            ratios = np.atleast_1d(np.asarray(ratios, dtype=float))
            out = np.empty_like(ratios)
            inner = (ratios > 0.0) & (ratios < 1.0)
            if inner.any():
                out[inner] = step.seconds(problem.platform, ratios[inner]) + host
            for mask, device in ((ratios >= 1.0, config.device), (ratios <= 0.0, config.option("secondary"))):
                if mask.any():
                    out[mask] = self._single(problem, config, device).step_s
            return out

        return price

    def estimate_ratios(self, problem: Problem, config: StrategyConfig, ratios: np.ndarray) -> np.ndarray:
        return self.ratio_pricer(problem, config)(ratios)

    def acceptance_many(self, problem: Problem, configs: Sequence[StrategyConfig]) -> tuple[np.ndarray, np.ndarray]:
        tokens = problem.acceptance.trees_tokens([c.tree for c in configs])
        return tokens, np.array([c.tree.size - 1 for c in configs], dtype=float)

    def estimate(self, problem: Problem, config: StrategyConfig) -> Estimate:
        r = config.partition_ratio
        tokens = problem.acceptance.tree_tokens(config.tree)
        if r in (0.0, 1.0):
            single = self._single(problem, config, config.device if r == 1.0 else config.option("secondary"))
            return replace(single, breakdown={**single.breakdown, "sync": 0.0})
        step = build_split_step(problem, config)
        ends, serial, syncs = (a[0] for a in step.priced(problem.platform, [r]))
        split, turns, sync = float((ends * step.counts).sum()), float((serial * step.counts).sum()), float(syncs.sum())
        host = _split_host_seconds(problem, config)
        return Estimate(step_s=split + turns + sync + host, tokens_per_step=tokens,
                        proposed_per_step=config.tree.size - 1,
                        breakdown={"split": split, "python_turns": turns, "sync": sync, "host": host})

    def estimate_many(self, problem: Problem, configs: Sequence[StrategyConfig]) -> EstimateArrays:
        step = np.array([self.estimate_ratios(problem, c, np.array([c.partition_ratio]))[0] for c in configs])
        tokens = problem.acceptance.trees_tokens([c.tree for c in configs])
        proposed = np.array([c.tree.size - 1 for c in configs], dtype=float)
        return EstimateArrays(step_s=step, tokens_per_step=tokens, proposed_per_step=proposed)

    # ------------------------------------------------------------------ engine plan
    def plan(self, problem: Problem, config: StrategyConfig, rng: np.random.Generator | None = None,
             per_layer: bool = False) -> StepPlan:
        r = config.partition_ratio
        acc = problem.acceptance
        tree = config.tree
        accepted = acc.tree_tokens(tree) if rng is None else acc.sample_tree_tokens(tree, rng)
        if r in (0.0, 1.0):
            single = self._medusa.plan(problem, replace(config, method="medusa", partition_ratio=None,
                                                        device=config.device if r == 1.0 else config.option("secondary")),
                                       rng=None, per_layer=per_layer)
            return replace(single, tokens_accepted=accepted)
        step = build_split_step(problem, config)
        _, serial_s, sync_s = (a[0] for a in step.priced(problem.platform, [r]))
        tasks: list[Task] = []
        last: tuple[str, ...] = ()
        L = problem.model.n_layers

        def emit(i: int, prefix: str, count: int) -> None:
            nonlocal last
            group = step.groups[i]
            started = []
            for side, device, f in (("primary", step.primary, r), ("secondary", step.secondary, 1.0 - r)):
                part: Part = getattr(group, side)
                share = float(part.share(f))
                name = f"{prefix}/{device}"
                tasks.append(Task(name=name, kind="compute", resource=device, phase=group.phase,
                                  compute_s=share * part.compute_s * count,
                                  nbytes=(part.act0_bytes + share * part.bytes1) * count,
                                  fixed_s=part.fixed_s * count, deps=last, op=group.name, flops=share * part.flops * count))
                started.append(name)
            last = tuple(started)
            if serial_s[i] > 0:     # the two sides' Python taking turns (calibrated hosts)
                tasks.append(delay_task(f"{prefix}/serial", float(serial_s[i]) * count, "sync", deps=last))
                last = (tasks[-1].name,)
            if group.syncs:
                n_syncs = group.syncs if count == group.count else 1
                tasks.append(delay_task(f"{prefix}/sync", float(sync_s[i]) / group.syncs * n_syncs, "sync", deps=last))
                last = (tasks[-1].name,)

        layer_groups = [i for i, g in enumerate(step.groups) if g.count == L and g.count > 1]
        names = [g.name for g in step.groups]
        if per_layer and layer_groups:
            first, lastg = layer_groups[0], layer_groups[-1]
            for i in range(first):
                emit(i, names[i], step.groups[i].count)
            for layer in range(L):
                for i in range(first, lastg + 1):
                    emit(i, f"L{layer}/{names[i]}", 1)
            for i in range(lastg + 1, len(names)):
                emit(i, names[i], step.groups[i].count)
        else:
            for i, g in enumerate(step.groups):
                emit(i, g.name, g.count)
        host = _split_host_seconds(problem, config)
        if host > 0:
            tasks.append(delay_task("host", host, "accept", last, config.device))
        return StepPlan(tasks=tuple(tasks), tokens_accepted=accepted, tokens_proposed=tree.size - 1,
                        count_phase="verify", count_device=config.device)


def _split_host_seconds(problem: Problem, config: StrategyConfig) -> float:
    """Host-side work of the Medusa loop around a split step, on the primary (0 without measured host costs),
    and the split step's hand-offs to the secondary worker (``hcmp_step``, calibrated hosts only)."""
    handoffs = split_costs(problem.platform, config.device).get("hcmp_step", 0.0) \
        if config.option("split", "hcmp") == "hcmp" else 0.0
    return float(host_seconds(problem, "medusa", config.device, nodes=config.tree.size, forwards=False)) + handoffs


def _other_device(problem: Problem, device: str) -> str:
    """The first other device of ``device``'s memory domain (Ghidorah's CPU next to the GPU)."""
    domain = problem.platform.domain_of(device)
    others = [d for d in (domain.devices if domain else ()) if d != device]
    if not others:
        raise HetSpecError(f"hcmp needs a second device in the memory domain of {device} on "
                           f"{problem.platform.name}; give option secondary=<device>")
    return others[0]


STRATEGY = HcmpStrategy
