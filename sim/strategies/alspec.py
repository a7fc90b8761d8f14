"""``alspec``: attention-level speculation ("Attention-Level Speculation", Cai, Vora, Zhang,
O'Connor, Jeffrey; ICML 2025).

Decode one token, batch 1, on two device groups ("Scenario 3" of the paper, §3.3, Fig. 4): in every
layer the *sender* group computes exact attention with the speculative flash-decode kernel
(SFD, App. B), whose first work item is the attention over the first and last ``S`` cached
tokens (a sink + window approximation). That partial goes at once over one link hop to the
*receiver* group, which starts the rest of the layer (O-proj, residual, norm, FF) and the next
layer's pre-attention ops on it. When the sender's exact attention is done, the norm check
``||A~ - A|| < lambda ||A||`` decides: a *hit* (probability = the layer's hit rate) commits the
receiver's work and the two groups swap roles (SGDC priority gating, Alg. 2); a *miss*
discards it and the sender runs the post-attention ops on the exact output itself (rollback).
Each group is ``tp`` devices doing tensor parallelism (heads for attention, the inner dimension
for FF), joined 1:1 to the other group (TP + SP). ``sp=0`` is plain tensor parallelism on one
group, the paper's baseline.

The closed form is App. F's formula (:mod:`sim.strategies.alspec_formulas`); the paper's kernel
tables, precisions and kernel layouts are read by :mod:`sim.strategies.alspec_tables`. This module
prices the formula's inputs and plans the engine's token. The operator times come from the roofline
(:mod:`hwmodels.roofline`) of the group's representative device, per TP shard (:func:`layer_costs`):

- pre-attention: all-gather of the sharded residual (TP), norm, fused QKV projection (heads / tp),
  RoPE, KV-cache update; attention: flash decode over the cached KV of the device's KV heads;
  post-attention: O-proj, reduce-scatter, residual, all-gather, norm, gate and up projections,
  SiLU * mul, down projection, reduce-scatter, residual (the kernels of ALSpec Tables 4-7);
- collectives: a ring over the group, ``tp - 1`` exposed hops (§3.4) of the link between the
  representative and its peer, each moving ``1 / tp`` of the tensor; activations move in the
  device's token tile (TT-Metalium stores a decode activation as a 32-row tile: ``[32, hidden]``);
- speculated partial (``SFD_R``): flash decode spreads the KV over the device's ``cores``; the
  worker of each KV head that owns chunks 1 and m reads those ``min(s, 2S)`` tokens first at its
  share ``bw / active workers`` of the device's bandwidth (Alg. 3), then one hop of the link
  carries the partial ``[heads / tp, head_dim]`` (tile-padded) to the receiver.

Departures, marked: a TP group is priced as ``tp`` identical copies of its representative device
(the engine plays the representative; its peers do the same work at the same time, and every
collective hop uses the representative's link); the L2-norm check is not priced (§3.4: the cost
of a LayerNorm, negligible).

The names of the tables and formulas modules stay importable from here (re-exported below).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from hwmodels.contention import standalone_bw
from hwmodels.errors import HetSpecError, UnknownNameError
from hwmodels.platform import Device, Link, MemoryDomain, Platform
from hwmodels.roofline import quantized_tokens, roofline_time
from sim.plan import StepPlan, Task, transfer_task
from sim.step_graph import ACT_FLOPS_PER_ELEMENT, ADD_FLOPS_PER_ELEMENT, NORM_FLOPS_PER_ELEMENT, ROPE_FLOPS_PER_ELEMENT
from sim.strategies import alspec_loop
from sim.strategies.alspec_formulas import LAYER_ROUNDINGS, app_f_latency, layer_hits, projection_latency, tp_latency
from sim.strategies.alspec_loop import LOOPS
from sim.strategies.alspec_tables import (KERNELS_FILE, KERNELS_FORMAT, MODEL_PRECISION, RUNTIME_COLLECTIVES, Precision,
                                          Runtime, default_runtime, get_precision, get_runtime, kernel_tables,
                                          precision_names, runtime_names)
from sim.strategies.base import Estimate, Knob, Problem, Strategy, StrategyConfig

#: Speculation window S (tokens of the sink and of the recent window): the chunk size of the
#: paper's performance runs (Fig. 7 caption: "speculative flash decode kernel with chunk size 256").
DEFAULT_WINDOW = 256
#: The paper's recommended verification threshold lambda (§3.2; Fig. 2 uses 0.10).
DEFAULT_LAMBDA = 0.10

#: Public names, the tables' and formulas' included (this module was their home before the split).
__all__ = [
    "DEFAULT_LAMBDA", "DEFAULT_WINDOW", "KERNELS_FILE", "KERNELS_FORMAT", "LAYER_ROUNDINGS", "MODEL_PRECISION",
    "RUNTIME_COLLECTIVES", "STRATEGY", "AlspecStrategy", "LayerCosts", "Precision", "Runtime", "ShardOp",
    "app_f_latency", "default_runtime", "get_precision", "get_runtime", "identical", "kernel_tables", "layer_costs",
    "layer_hits", "one_shot_allreduce_s", "peer_of", "precision_names", "projection_latency", "replicated_node",
    "ring_collective_s", "runtime_names", "tp_latency", "twins",
]


# ---------------------------------------------------------------------- operators of one TP shard
@dataclass(frozen=True)
class ShardOp:
    """One operator of one TP shard on the representative device, priced alone (seconds)."""

    name: str
    block: str        # "pre" | "attn" | "post" | "embed" | "final"
    time_s: float
    nbytes: float
    flops: float
    collective: bool = False


@dataclass(frozen=True)
class LayerCosts:
    """Seconds of one token's parts on one TP group (App. F's quantities, priced by the roofline)."""

    ops: tuple[ShardOp, ...]
    fd_s: float          # flash decode = SFD_S, the sender's exact attention
    spec_s: float        # until the sender holds the speculated partial (chunks 1 and m)
    hop_s: float         # one link hop carrying the partial to the receiver (0 without SP)
    hop_bytes: float     # the partial's bytes on that hop
    layers: int

    def block_s(self, block: str) -> float:
        return sum(op.time_s for op in self.ops if op.block == block)

    @property
    def pre_s(self) -> float:
        return self.block_s("pre")

    @property
    def post_s(self) -> float:
        return self.block_s("post")

    @property
    def per_layer_s(self) -> float:
        """App. F ``per_layer_latency``: every operator of a layer except flash decode."""
        return self.pre_s + self.post_s

    @property
    def fixed_s(self) -> float:
        """App. F ``fixed_latency``: embedding, final norm and LM head (and their collectives)."""
        return self.block_s("embed") + self.block_s("final")

    @property
    def sfd_r_s(self) -> float:
        """Receiver's SFD duration: the speculated partial computed and sent one hop."""
        return self.spec_s + self.hop_s

    @property
    def speculation_pays(self) -> bool:
        """Whether the speculated partial reaches the receiver before the exact attention is done."""
        return self.sfd_r_s < self.fd_s

    @property
    def useful_sfd_r_s(self) -> float:
        """SFD_R as the strategy uses it. Departure from Alg. 2, marked: when the partial would arrive
        after the exact attention (tiny KV, slow hop), the sender keeps the layer instead of waiting
        for the receiver, so a hit never costs more than a miss (``min(SFD_R, SFD_S)`` in App. F)."""
        return min(self.sfd_r_s, self.fd_s)

    @property
    def ccl_s(self) -> float:
        return sum(op.time_s for op in self.ops if op.collective and op.block in ("pre", "post"))


def ring_collective_s(device: Device, link: Link | None, tp: int, tensor_bytes: float) -> float:
    """A ring all-gather or reduce-scatter over ``tp`` devices: one kernel launch, then ``tp - 1``
    exposed hops (ALSpec §3.4), each moving ``1 / tp`` of the tensor over the link."""
    if tp <= 1:
        return 0.0
    per_hop = link.latency_s + (tensor_bytes / tp) / (link.bw_bytes_per_s * link.efficiency)
    return device.op_overhead_s + (tp - 1) * per_hop


def one_shot_allreduce_s(device: Device, link: Link | None, tp: int, tensor_bytes: float) -> float:
    """A one-stage all-reduce: one launch, one exposed hop, every device reads its ``tp - 1`` peers'
    copies of the tensor over its link (small decode tensors: latency-bound)."""
    if tp <= 1:
        return 0.0
    return device.op_overhead_s + link.latency_s + (tp - 1) * tensor_bytes / (link.bw_bytes_per_s * link.efficiency)


def layer_costs(problem: Problem, device: str, tp: int, precision: Precision, runtime: Runtime, window: int,
                link: Link | None, sp: bool, fd_fixed_s: float = 0.0, ccl_layer_s: float | None = None) -> LayerCosts:
    """Roofline seconds of every operator of one TP shard of ``problem.model`` on ``device``.

    ``ccl_layer_s``: a measured duration of one layer's collectives (e.g. ALSpec Tables 5-7's AllGather,
    ReduceScatter and AllGatherMatmul rows); the layer's collectives are then scaled to it, in the shares the
    link model gives them. None: the link model alone."""
    model, platform = problem.model, problem.platform
    dev = platform.device(device)
    bw = standalone_bw(platform, device)
    T, s = problem.batch, problem.context                     # new tokens (one per sequence), cached tokens
    h, i, hd, L = model.hidden, model.intermediate, model.head_dim, model.n_layers
    heads, kv_heads = model.n_heads // tp, model.n_kv_heads // tp
    hq, kv = heads * hd, kv_heads * hd                       # this shard's query and KV widths
    act, kvb, math_dt = precision.bytes("activations"), precision.bytes("kv_cache"), precision.math
    # rows of an activation as it moves: a tile of token_tile rows on a tilized runtime (TT: [32, hidden])
    rows = quantized_tokens(T, dev.token_tile) if runtime.tilized_activations else T
    ring = runtime.collective == "ring"
    ops: list[ShardOp] = []

    def compute(name: str, block: str, flops: float, nbytes: float, tokens: int | None = None,
                launches: int = 1, weight_rows: int = 0) -> None:
        t = roofline_time(dev, flops, nbytes, math_dt, tokens=tokens, launches=launches, bw_bytes_per_s=bw,
                          rows=weight_rows)
        ops.append(ShardOp(name, block, t.time_s, nbytes, flops))

    def linear(name: str, block: str, d_in: int, d_out: int, weight: str) -> None:
        # [T, d_in] x [d_in, d_out]: FLOPs 2 T d_in d_out; bytes: the weight shard + activations
        compute(name, block, 2.0 * T * d_in * d_out,
                precision.bytes(weight) * d_in * d_out + act * T * (d_in + d_out), tokens=T, weight_rows=d_out)

    def elementwise(name: str, block: str, elements: float, flops_per: float, reads: int = 1,
                    weight_elements: float = 0.0) -> None:
        compute(name, block, flops_per * elements, act * elements * (reads + 1) + act * weight_elements)

    def collective(name: str, block: str, width: int) -> None:
        if tp <= 1:
            return
        nbytes = rows * width * act
        seconds = ring_collective_s(dev, link, tp, nbytes) if ring else one_shot_allreduce_s(dev, link, tp, nbytes)
        ops.append(ShardOp(name, block, seconds, nbytes, 0.0, collective=True))

    # embedding (once per token): a row gather of the table
    compute("embed", "embed", 0.0, 2.0 * T * h * precision.bytes("embedding"))
    # pre-attention: (ring) all-gather the sharded residual; norm (+ the previous residual add when
    # fused), fused QKV of this shard's heads, RoPE, KV-cache update
    if ring:
        collective("all_gather_attn", "pre", h)
    elementwise("attn_norm", "pre", T * h, NORM_FLOPS_PER_ELEMENT + (ADD_FLOPS_PER_ELEMENT if runtime.fused_residual_norm
                                                                      else 0), reads=2 if runtime.fused_residual_norm
                else 1, weight_elements=h)
    linear("qkv_proj", "pre", h, hq + 2 * kv, "qkv")
    elementwise("rope", "pre", T * (hq + kv), ROPE_FLOPS_PER_ELEMENT)
    compute("kv_update", "pre", 0.0, T * 2 * kv * (act + kvb))
    # attention: flash decode over s cached tokens of this shard's KV heads (Q [T, heads, hd])
    kv_bytes = 2.0 * s * kv * kvb
    fd = roofline_time(dev, 4.0 * T * heads * s * hd, kv_bytes + 2 * act * T * hq, math_dt,
                       launches=runtime.fd_launches, bw_bytes_per_s=bw)
    fd_s = fd.time_s + fd_fixed_s
    ops.append(ShardOp("flash_decode", "attn", fd_s, kv_bytes, 4.0 * T * heads * s * hd))
    # post-attention: O-proj (row split) and its reduction, residual, norm, SwiGLU FF (inner dim split)
    linear("o_proj", "post", hq, h, "o_proj")
    if ring:
        collective("reduce_scatter_attn", "post", h)
        elementwise("attn_residual", "post", T * h / tp, ADD_FLOPS_PER_ELEMENT, reads=2)
        collective("all_gather_mlp", "post", h)
        elementwise("mlp_norm", "post", T * h, NORM_FLOPS_PER_ELEMENT, weight_elements=h)
    else:
        collective("all_reduce_attn", "post", h)
        if not runtime.fused_residual_norm:
            elementwise("attn_residual", "post", T * h, ADD_FLOPS_PER_ELEMENT, reads=2)
        elementwise("mlp_norm", "post", T * h, NORM_FLOPS_PER_ELEMENT + (ADD_FLOPS_PER_ELEMENT if
                    runtime.fused_residual_norm else 0), reads=2 if runtime.fused_residual_norm else 1,
                    weight_elements=h)
    if runtime.fused_gate_up:
        linear("gate_up_proj", "post", h, 2 * (i // tp), "gate_up")
    else:
        linear("gate_proj", "post", h, i // tp, "gate_up")
        linear("up_proj", "post", h, i // tp, "gate_up")
    elementwise("act_mul", "post", T * i / tp, ACT_FLOPS_PER_ELEMENT, reads=2)
    linear("down_proj", "post", i // tp, h, "down")
    if ring:
        collective("reduce_scatter_mlp", "post", h)
        elementwise("mlp_residual", "post", T * h / tp, ADD_FLOPS_PER_ELEMENT, reads=2)
    else:
        collective("all_reduce_mlp", "post", h)
        if not runtime.fused_residual_norm:
            elementwise("mlp_residual", "post", T * h, ADD_FLOPS_PER_ELEMENT, reads=2)
    # final: (ring) all-gather; norm; LM head (vocabulary split); (one-shot) gather the logits
    if ring:
        collective("all_gather_final", "final", h)
    elementwise("final_norm", "final", T * h, NORM_FLOPS_PER_ELEMENT, weight_elements=h)
    linear("lm_head", "final", h, model.vocab // tp, "lm_head")
    if not ring:
        collective("all_gather_logits", "final", model.vocab // tp)

    if ccl_layer_s is not None and tp > 1:
        modelled = sum(op.time_s for op in ops if op.collective and op.block in ("pre", "post"))
        ops = [replace(op, time_s=op.time_s * ccl_layer_s / modelled)
               if op.collective and op.block in ("pre", "post") else op for op in ops]
    spec_s = hop_s = partial_bytes = 0.0
    if sp:
        # Alg. 3: per KV head, the worker owning chunks 1 and m reads those min(s, 2S) tokens first, at
        # its share of the bandwidth: all workers that have a chunk stream at once.
        chunks = max(math.ceil(s / window), 1)
        cores = dev.cores or 1
        active = min(cores, kv_heads * chunks)
        spec_bytes = min(s, 2 * window) * 2 * hd * kvb
        # the flash-decode fixed cost (the cross-core reduction, fd_fixed_s) comes after the partial is sent
        spec_s = dev.op_overhead_s + spec_bytes / (bw / active)
        # the partial output [heads, hd] of this shard (tile-padded rows on a tilized runtime), one hop (§3.4)
        partial_bytes = (max(heads, dev.token_tile) if runtime.tilized_activations else heads) * hd * act * T
        hop_s = link.transfer_s(partial_bytes)
    return LayerCosts(ops=tuple(ops), fd_s=max(fd_s, spec_s), spec_s=spec_s, hop_s=hop_s, hop_bytes=partial_bytes,
                      layers=L)


# ---------------------------------------------------------------------- device groups
def identical(a: Device, b: Device) -> bool:
    """Same hardware (everything but the name and description)."""
    return replace(a, name="", description="", sources={}) == replace(b, name="", description="", sources={})


def twins(platform: Platform, device: str) -> tuple[str, ...]:
    """Devices of the platform identical to ``device`` (itself first)."""
    dev = platform.device(device)
    return (device, *(n for n, d in platform.devices.items() if n != device and identical(d, dev)))


def peer_of(platform: Platform, device: str) -> str | None:
    """The first device identical to ``device`` that a link joins to it (the SP partner / TP ring peer)."""
    for other in twins(platform, device)[1:]:
        if platform.has_link(device, other):
            return other
    return None


def replicated_node(platform: Platform, device: str, count: int) -> Platform:
    """A platform of ``count`` copies of ``device`` and of its link to its peer, joined in a ring.

    For presets that list a pair of a node's identical accelerators (``h100-sxm``: two of a DGX
    H100's eight NVSwitch-connected GPUs): every number is the preset's; only the count changes.
    """
    peer = peer_of(platform, device)
    if peer is None:
        raise HetSpecError(f"platform {platform.name}: device {device} has no linked identical peer to replicate")
    dev, link = platform.device(device), platform.link(device, peer)
    domain = platform.domain_of(device)
    names = [f"{device}{k}" for k in range(count)]
    devices = {n: replace(dev, name=n) for n in names}
    links = tuple(replace(link, name=f"{link.name}-{k}", src=names[k], dst=names[(k + 1) % count])
                  for k in range(count if count > 2 else count - 1))
    domains = () if domain is None else tuple(
        MemoryDomain(name=f"{domain.name}-{n}", devices=(n,), bw_gbps=domain.bw_gbps, capacity_gb=domain.capacity_gb,
                     contention_efficiency=domain.contention_efficiency, description=domain.description,
                     sources=domain.sources) for n in names)
    return Platform(name=f"{platform.name}-x{count}", description=f"{count} x {device} of {platform.name}",
                    devices=devices, links=links, memory_domains=domains, path=platform.path)


# ---------------------------------------------------------------------- the strategy
def _int_option(config: StrategyConfig, name: str, default: int, low: int) -> int:
    value = config.option(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise HetSpecError(f"alspec: option {name} must be an integer >= {low} (got {value!r})")
    return int(value)


class AlspecStrategy(Strategy):
    name = "alspec"
    knob_help = {
        "device": "representative device of the sender group (exact attention); default: the accelerator",
        "draft_device": "representative device of the receiver group (speculated post-attention ops); "
                        "default: the first identical device linked to `device`",
        "tp": "option: tensor-parallel degree of each group (divides the KV heads)",
        "sp": "option: 1 = ALSpec (two groups, 2 x tp devices), 0 = plain tensor parallelism (tp devices)",
        "hit_rate": "option: per-layer speculation hit rate (default: from the acceptance model at lambda)",
        "lam": f"option: verification threshold lambda (default {DEFAULT_LAMBDA}, the paper's recommendation)",
        "task": "option: task of the acceptance table (default: the mean over its tasks)",
        "window": f"option: speculation window S, tokens of the sink and of the recent window (default {DEFAULT_WINDOW})",
        "precision": "option: tensor dtypes: 'model' (all in the model dtype) or a named config of "
                     "sim/presets/alspec_kernels.json (tt-llama3-performance: TT-Metalium's Llama 3.1 8B)",
        "runtime": "option: kernel layout of a layer: tt-metalium (ALSpec Tables 4-7: ring all-gather/reduce-scatter) "
                   "or sglang (fused GEMMs, one-shot all-reduce); default: sglang on GPUs, else tt-metalium",
        "layer_rounding": "option: floor (App. F: floor(L r) hits) or expected (L r hits, the mean of per-layer draws)",
        "fd_fixed_us": "option: fixed cost added to every flash-decode call, us (default 0: the roofline alone)",
        "ccl_layer_us": "option: measured duration of one layer's collectives, us (default: the link model alone)",
        "loop": "option: paper (App. F, default) or hetspec (Alg. 1 as HetSpec's real path runs it on two CPU "
                "workers: sim.strategies.alspec_loop)",
    }

    # ------------------------------------------------------------------ search space
    def search_space(self, problem: Problem) -> tuple[Knob, ...]:
        device = problem.platform.accelerator.name
        n = len(twins(problem.platform, device))
        has_peer = peer_of(problem.platform, device) is not None
        combos = []
        for tp in _tp_degrees(problem.model):
            if tp <= n:
                combos.append((tp, 0))
            if has_peer and 2 * tp <= n:
                combos.append((tp, 1))
        return (Knob("device", (device,)), Knob("tp", tuple(sorted({c[0] for c in combos}))),
                Knob("sp", tuple(sorted({c[1] for c in combos}))))

    # ------------------------------------------------------------------ configs
    def resolve(self, problem: Problem, config: StrategyConfig) -> StrategyConfig:
        config = super().resolve(problem, config)
        platform, model = problem.platform, problem.model
        tp = _int_option(config, "tp", 1, 1)
        sp = _int_option(config, "sp", 1, 0)
        if sp not in (0, 1):
            raise HetSpecError(f"alspec: option sp must be 0 (tensor parallelism) or 1 (ALSpec) (got {sp})")
        if model.n_kv_heads % tp or model.n_heads % tp or model.intermediate % tp:
            raise HetSpecError(f"alspec: tp {tp} must divide the KV heads ({model.n_kv_heads}), heads and FF width "
                               f"of {model.name}")
        window = _int_option(config, "window", DEFAULT_WINDOW, 1)
        rounding = config.option("layer_rounding", "floor")
        if rounding not in LAYER_ROUNDINGS:
            raise UnknownNameError("layer rounding", rounding, LAYER_ROUNDINGS)
        precision = get_precision(str(config.option("precision", MODEL_PRECISION)), model.dtype)
        runtime = get_runtime(str(config.option("runtime", default_runtime(platform.device(config.device)))))
        fd_fixed_us = config.option("fd_fixed_us", 0.0)
        if isinstance(fd_fixed_us, bool) or not isinstance(fd_fixed_us, (int, float)) or fd_fixed_us < 0:
            raise HetSpecError(f"alspec: option fd_fixed_us must be a number >= 0 (got {fd_fixed_us!r})")
        ccl_layer_us = config.option("ccl_layer_us")
        if ccl_layer_us is not None and (isinstance(ccl_layer_us, bool) or not isinstance(ccl_layer_us, (int, float))
                                         or ccl_layer_us <= 0):
            raise HetSpecError(f"alspec: option ccl_layer_us must be a number > 0 (got {ccl_layer_us!r})")
        group = twins(platform, config.device)
        need = tp * (1 + sp)
        if need > len(group):
            raise HetSpecError(f"alspec: tp {tp} with sp {sp} needs {need} devices identical to {config.device}; "
                               f"{platform.name} has {len(group)}")
        receiver = None
        if sp:
            receiver = config.draft_device or peer_of(platform, config.device)
            if receiver is None or receiver == config.device or receiver not in group:
                raise HetSpecError(f"alspec: the receiver group needs a device identical to {config.device} "
                                   f"(got {receiver!r})")
            platform.link(config.device, receiver)  # one line if they are not linked
        if tp > 1 and peer_of(platform, config.device) is None:
            raise HetSpecError(f"alspec: tp {tp} needs a device linked to {config.device}")
        self._check_memory(problem, config.device, tp, precision)
        loop = config.option("loop", "paper")
        if loop not in LOOPS:
            raise UnknownNameError("alspec loop", loop, LOOPS)
        if loop == "hetspec" and tp != 1:
            raise HetSpecError(f"alspec: loop hetspec runs one worker per group (tp 1), got tp {tp}")
        opts = {**config.options, "tp": tp, "sp": sp, "window": window, "layer_rounding": rounding,
                "precision": precision.name, "runtime": runtime.name, "fd_fixed_us": float(fd_fixed_us), "loop": loop,
                "ccl_layer_us": None if ccl_layer_us is None else float(ccl_layer_us)}
        opts.pop("hit_rates", None)
        if sp:
            opts["hit_rate"] = self._hit_rate(problem, config)
            by_layer = problem.acceptance.alspec_hit_rate_by_layer if problem.acceptance is not None else None
            if config.option("hit_rate") is None and by_layer is not None and len(by_layer) == model.n_layers:
                opts["hit_rates"] = tuple(float(r) for r in by_layer)   # a measured profile: draw per layer
        else:
            opts.pop("hit_rate", None)
        return replace(config, draft_device=receiver, draft_model=None, partition_ratio=None, tree_width=1,
                       draft_depth=0, tree_shape="chain", tree=None, options=opts)

    def _hit_rate(self, problem: Problem, config: StrategyConfig) -> float:
        given = config.option("hit_rate")
        if given is not None:
            if isinstance(given, bool) or not isinstance(given, (int, float)) or not 0.0 <= given <= 1.0:
                raise HetSpecError(f"alspec: option hit_rate must be in [0, 1] (got {given!r})")
            return float(given)
        acc = problem.need_acceptance(self.name)
        lam = config.option("lam")
        return acc.alspec_hit_rate(task=config.option("task"), lam=None if lam is None else float(lam))

    def _check_memory(self, problem: Problem, device: str, tp: int, precision: Precision) -> None:
        model, dev = problem.model, problem.platform.device(device)
        h, i, V, L = model.hidden, model.intermediate, model.vocab, model.n_layers
        weights = (L * (h * (model.n_heads * model.head_dim + 2 * model.kv_dim) * precision.bytes("qkv")
                        + model.n_heads * model.head_dim * h * precision.bytes("o_proj")
                        + 2 * h * i * precision.bytes("gate_up") + i * h * precision.bytes("down"))
                   + h * V * precision.bytes("lm_head")) / tp + h * V * precision.bytes("embedding")
        kv = 2 * L * model.kv_dim / tp * (problem.context + 1) * problem.batch * precision.bytes("kv_cache")
        if weights + kv > dev.mem_capacity_bytes:
            raise HetSpecError(f"alspec: {model.name} at tp {tp} ({precision.name} precision) needs "
                               f"{(weights + kv) / 1e9:.1f} GB per device but {device} has {dev.mem_capacity_gb:g} GB")

    # ------------------------------------------------------------------ costs
    def costs(self, problem: Problem, config: StrategyConfig) -> LayerCosts:
        """The App. F quantities of a resolved config, priced by the roofline."""
        o = config.options
        link = None
        peer = config.draft_device or peer_of(problem.platform, config.device)
        if peer is not None:
            link = problem.platform.link(config.device, peer)
        return layer_costs(problem, config.device, o["tp"], get_precision(o["precision"], problem.model.dtype),
                           get_runtime(o["runtime"]), o["window"], link, bool(o["sp"]), o["fd_fixed_us"] * 1e-6,
                           None if o.get("ccl_layer_us") is None else o["ccl_layer_us"] * 1e-6)

    def estimate(self, problem: Problem, config: StrategyConfig) -> Estimate:
        if config.option("loop") == "hetspec":
            return alspec_loop.estimate(problem, config)
        c = self.costs(problem, config)
        o = config.options
        L = c.layers
        if o["sp"]:
            step = app_f_latency(c.fixed_s, c.per_layer_s, c.fd_s, c.useful_sfd_r_s, o["hit_rate"], L,
                                 o["layer_rounding"])
            hits = layer_hits(L, o["hit_rate"], o["layer_rounding"])
        else:
            step = tp_latency(c.fixed_s, c.per_layer_s, c.fd_s, L)
            hits = 0.0
        return Estimate(step_s=float(step), tokens_per_step=1.0, proposed_per_step=0.0,
                        breakdown={"fixed": c.fixed_s, "per_layer": c.per_layer_s, "fd": c.fd_s, "sfd_r": c.sfd_r_s,
                                   "ccl_per_layer": c.ccl_s, "hit_layers": hits})

    # ------------------------------------------------------------------ engine plan
    def plan(self, problem: Problem, config: StrategyConfig, rng: np.random.Generator | None = None,
             per_layer: bool = False) -> StepPlan:
        """One token: per layer, exact attention on the holder group and (SP) the speculated rest of the
        layer on the other group; hits swap the groups' roles. Without ``rng`` the first
        ``floor(L r)`` layers hit (App. F's count); with it every layer draws its own outcome.
        ``per_layer`` splits each block into its operators (readable traces)."""
        if config.option("loop") == "hetspec":
            return alspec_loop.plan(problem, config, rng)
        c = self.costs(problem, config)
        o = config.options
        L, sp = c.layers, bool(o["sp"])
        a, b = config.device, config.draft_device
        if sp:
            if rng is None:
                hits = [k < int(layer_hits(L, o["hit_rate"], "floor")) for k in range(L)]
            else:
                rates = np.asarray(o.get("hit_rates") or (o["hit_rate"],) * L, dtype=float)
                hits = list(rng.random(L) < rates)
        else:
            hits = [False] * L
        if not c.speculation_pays:
            hits = [False] * L      # the sender keeps every layer (see LayerCosts.useful_sfd_r_s)
        builder = _PlanBuilder(c, per_layer)
        holder = a
        last = builder.block(holder, "embed", "embed", "decode", ())
        last = builder.block(holder, "L0/pre", "pre", "decode", (last,))
        for k in range(L):
            other = b if holder == a else a
            with_next_pre = k < L - 1
            if sp:
                spec = builder.single(holder, f"L{k}/sfd_spec", "attention", c.spec_s, (last,))
                rest = builder.single(holder, f"L{k}/sfd_rest", "attention", c.fd_s - c.spec_s, (spec,))
                send = builder.add(transfer_task(problem.platform, holder, other, c.hop_bytes, f"L{k}/send_spec",
                                                 deps=(spec,)))
                spec_post = builder.layer_ops(other, f"L{k}/spec", (send,), with_next_pre,
                                              "decode" if hits[k] else "draft")
                if hits[k]:
                    last = builder.join(f"L{k}/commit", (rest, spec_post))
                    holder = other
                else:
                    last = builder.layer_ops(holder, f"L{k}/exact", (rest,), with_next_pre, "recompute")
            else:
                fd = builder.single(holder, f"L{k}/flash_decode", "attention", c.fd_s, (last,))
                last = builder.layer_ops(holder, f"L{k}", (fd,), with_next_pre, "decode")
        last = builder.block(holder, "final", "final", "decode", (last,))
        return StepPlan(tasks=tuple(builder.tasks), tokens_accepted=1, tokens_proposed=0, count_phase="decode",
                        count_device=holder)


def _tp_degrees(model) -> tuple[int, ...]:
    return tuple(t for t in (1, 2, 4, 8, 16) if model.n_kv_heads % t == 0 and model.n_heads % t == 0
                 and model.intermediate % t == 0)


class _PlanBuilder:
    """Builds the tasks of one ALSpec token (a small helper; its state lives for one ``plan`` call)."""

    def __init__(self, costs: LayerCosts, per_layer: bool):
        self.c = costs
        self.per_layer = per_layer
        self.tasks: list[Task] = []

    def add(self, task: Task) -> str:
        self.tasks.append(task)
        return task.name

    def single(self, device: str, name: str, phase: str, seconds: float, deps) -> str:
        return self.add(Task(name=name, kind="compute", resource=device, phase=phase, fixed_s=max(seconds, 0.0),
                             deps=tuple(deps), op=name.split("/")[-1]))

    def _ops(self, device: str, prefix: str, ops, phase: str, deps) -> str:
        ops = list(ops)
        if not self.per_layer:
            return self.single(device, prefix, phase, sum(op.time_s for op in ops), deps)
        last = tuple(deps)
        for op in ops:
            last = (self.single(device, f"{prefix}/{op.name}", phase, op.time_s, last),)
        return last[0]

    def block(self, device: str, name: str, block: str, phase: str, deps) -> str:
        return self._ops(device, name, [op for op in self.c.ops if op.block == block], phase, deps)

    def layer_ops(self, device: str, prefix: str, deps, with_next_pre: bool, phase: str) -> str:
        """This layer's post-attention ops and (unless it is the last layer) the next layer's pre-attention ops."""
        ops = [op for op in self.c.ops if op.block == "post"]
        if with_next_pre:
            ops += [op for op in self.c.ops if op.block == "pre"]
        return self._ops(device, prefix, ops, phase, deps)

    def join(self, name: str, deps) -> str:
        return self.add(Task(name=name, kind="delay", resource="", phase="sync", fixed_s=0.0, deps=tuple(deps),
                             op="commit"))


STRATEGY = AlspecStrategy
