"""The operators of one forward step: q new tokens over a KV cache of s tokens, batch b.

Each :class:`Op` carries FLOPs and bytes moved (weights, activations, KV cache) per instance,
its token (GEMM M) dimension, and how many identical instances the step runs (``count``: one
per layer for layer operators). The accounting follows the Medusa paper's roofline appendix
(App. G.1, Table 5) exactly, so the intensities reproduce its Tables 6-8 (App. G.2):

- a linear layer on T = b*q tokens with an h x i weight: FLOPs 2*T*h*i, bytes
  dt*(T*h + T*i + h*i), intensity T*h*i / (T*(h+i) + h*i);
- attention scores QK^T against s cached keys, per batch element and head:
  FLOPs 2*q*s*d, bytes dt*(q*d + s*d + q*s), intensity q*s*d / (q*d + s*d + q*s); PV likewise.

Attention is split as Ghidorah splits it: the *dense* part (new queries against the s cached
keys/values: ``attn_score``, ``attn_value``) and the *sparse* part among the q new tokens under
the tree mask (``tree_score``, ``tree_value``, with ``density`` = kept fraction of the q x q
block). The attention sub-operators after ``attn_score`` run in the same fused kernel
(``launches = 0``), as FlashAttention on a GPU and ``scaled_dot_product_attention`` on a CPU do.
With GQA the K/V reads shrink to the KV heads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from hwmodels.dtypes import DTYPE_BYTES, check_dtype
from hwmodels.errors import HetSpecError
from hwmodels.profile import linear_dims
from sim.model_spec import ModelSpec
from sim.tree import TokenTree

SECTIONS = ("pre", "layer", "post")

# FLOPs per element of the small operators (counted so they are not free; they are
# memory-bound at any realistic size, so these constants barely matter).
NORM_FLOPS_PER_ELEMENT = 4       # square, mean-accumulate, rsqrt-scale, weight-scale
ROPE_FLOPS_PER_ELEMENT = 3       # x*cos + rotate(x)*sin
SOFTMAX_FLOPS_PER_ELEMENT = 5    # max, subtract, exp, sum, divide
ACT_FLOPS_PER_ELEMENT = 5        # silu (sigmoid + multiply) and the gating multiply / gelu
ADD_FLOPS_PER_ELEMENT = 1
#: Kernels HetSpec's eager real model (real/model) launches per RMSNorm, RoPE (q and k) and SwiGLU product;
#: used only by a profiled device in eager mode for operators its profile does not cover (sim.op_timing).
EAGER_NORM_LAUNCHES = 8
EAGER_ROPE_LAUNCHES = 10
EAGER_ACT_LAUNCHES = 2


@dataclass(frozen=True)
class Op:
    name: str
    kind: str
    section: str          # "pre" (once, before the layers), "layer" (once per layer), "post"
    flops: float          # per instance
    weight_bytes: float   # per instance
    act_bytes: float
    kv_bytes: float
    tokens: int           # GEMM M dimension (b*q for linears, q for per-head attention)
    count: int = 1        # identical instances in one step (n_layers for layer operators)
    density: float = 1.0  # kept fraction of a tree-masked block
    launches: int = 1     # kernel launches per instance (0 = fused into the previous operator)
    # For a measured profile (sim.op_timing; the roofline ignores these): the profile operator and shape
    # that time it, the keys an attention call attends (cached + new) and its batch, and the kernels
    # HetSpec's eager real model (real/model) launches for it (None: ``launches``).
    table: str = ""
    shape: str = ""
    keys: int = 0
    batch: int = 1
    eager_launches: int | None = None
    profile_tokens: int = 0   # token count a profile looks the operator up at (0: ``tokens``)
    #: a linear run as one batched GEMM over stacked weights (torch.matmul, HetSpec's Medusa heads), which
    #: a calibrated device prices with its batched curves (hwmodels.platform.Device)
    batched: bool = False
    #: how the operator's weights are stored: the compute dtype (``fp16``), or a GGUF tensor type (``Q4_1``)
    #: where the model's spec keeps one (:attr:`sim.model_spec.ModelSpec.weight_formats`); "" without weights
    #: and for the operators a strategy adds (Medusa heads, drafter layers: at the compute dtype)
    weight_type: str = ""
    #: the operator belongs to a forward of several new tokens per sequence, which HetSpec's real model runs
    #: under an attention mask (a one-token forward needs none): its fixed costs are a masked pass's
    #: (:meth:`hwmodels.platform.Device.overhead_s`)
    masked_pass: bool = False

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.act_bytes + self.kv_bytes

    @property
    def weight_rows(self) -> int:
        """Rows of a linear layer's weight (its output features, ``d_out``); 0 for other operators."""
        return linear_dims(self.shape)[1] if self.table == "linear" else 0

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP per byte."""
        return self.flops / self.bytes if self.bytes else float("inf")


@dataclass(frozen=True)
class StepGraph:
    model: ModelSpec
    tokens: int      # q: new tokens per sequence in this step
    context: int     # s: tokens already in the KV cache
    batch: int
    dtype: str
    density: float   # tree-mask density of the q x q block
    ops: tuple[Op, ...]
    #: Operators HetSpec's eager real model launches that ``ops`` does not price (KV-cache writes, position
    #: and mask building): priced only on a profiled device in eager mode (:mod:`sim.op_timing`).
    eager_ops: tuple[Op, ...] = ()

    def section(self, name: str) -> tuple[Op, ...]:
        return tuple(op for op in self.ops if op.section == name)

    def op(self, name: str) -> Op:
        for op in self.ops:
            if op.name == name:
                return op
        raise HetSpecError(f"step graph has no operator {name!r}; it has: {', '.join(o.name for o in self.ops)}")

    @property
    def total_flops(self) -> float:
        return sum(op.flops * op.count for op in self.ops)

    @property
    def total_bytes(self) -> float:
        return sum(op.bytes * op.count for op in self.ops)


def linear_op(name: str, tokens: int, d_in: int, d_out: int, dt: float, count: int,
              kind: str = "linear", section: str = "layer", batched: bool = False,
              weight: tuple[float, str] | None = None) -> Op:
    """A GEMM of ``tokens`` rows by a ``d_in x d_out`` weight (Medusa App. accounting); ``batched``: one
    batched GEMM over stacked weights whose outputs total ``d_out`` (:attr:`Op.batched`); ``weight``:
    (bytes per weight, type name) of weights stored otherwise than at ``dt`` (:func:`stored_weight`)."""
    wdt, wtype = weight if weight is not None else (dt, "")
    return Op(name, kind, section, flops=2.0 * tokens * d_in * d_out, weight_bytes=wdt * d_in * d_out,
              act_bytes=dt * tokens * (d_in + d_out), kv_bytes=0.0, tokens=tokens, count=count,
              table="linear", shape=f"{d_in}x{d_out}", batched=batched, weight_type=wtype)


def stored_weight(model: ModelSpec, op: str, dtype: str) -> tuple[float, str]:
    """(bytes per weight, type name) of operator ``op``'s weights: as the model's file stores them
    (:attr:`ModelSpec.weight_formats`, block scales included), else at the compute ``dtype``."""
    fmt = model.weight_format(op)
    return (fmt.bytes_per_weight, fmt.type) if fmt is not None else (DTYPE_BYTES[dtype], dtype)


def elementwise_op(name: str, kind: str, elements: float, flops_per_element: float, dt: float,
                   count: int, reads: int = 1, writes: int = 1, weight_bytes: float = 0.0,
                   section: str = "layer", tokens: int = 0, launches: int = 1, table: str = "", shape: str = "",
                   eager_launches: int | None = None, keys: int = 0, batch: int = 1, profile_tokens: int = 0,
                   weight_type: str = "") -> Op:
    return Op(name, kind, section, flops=flops_per_element * elements, weight_bytes=weight_bytes,
              act_bytes=dt * elements * (reads + writes), kv_bytes=0.0, tokens=tokens, count=count,
              launches=launches, table=table, shape=shape, eager_launches=eager_launches, keys=keys, batch=batch,
              profile_tokens=profile_tokens, weight_type=weight_type)


def attention_ops(model: ModelSpec, q: int, s: int, b: int, dt: float, density: float) -> list[Op]:
    """Dense part (q x s cached), sparse part (q x q under the tree mask), softmax, per layer."""
    nh, nkv, d, L = model.n_heads, model.n_kv_heads, model.head_dim, model.n_layers
    # one fused attention call (SDPA) in a profile: its whole time goes to the operator that launches it
    prof = {"table": "attention", "shape": f"h{nh}kv{nkv}d{d}", "keys": s + q, "batch": b, "profile_tokens": q}
    ops: list[Op] = []
    if s > 0:
        ops.append(Op("attn_score", "attention", "layer", flops=2.0 * b * nh * q * s * d, weight_bytes=0.0,
                      act_bytes=dt * b * (nh * q * d + nh * q * s), kv_bytes=dt * b * nkv * s * d,
                      tokens=q, count=L, **prof))
    ops.append(Op("tree_score", "tree_attention", "layer", flops=2.0 * b * nh * q * q * d, weight_bytes=0.0,
                  act_bytes=dt * b * (nh * q * d + nkv * q * d + nh * q * q), kv_bytes=0.0,
                  tokens=q, count=L, density=density, launches=0 if s > 0 else 1, **prof))
    ops.append(elementwise_op("softmax", "softmax", b * nh * q * (s + q), SOFTMAX_FLOPS_PER_ELEMENT, dt, L,
                              launches=0, **prof))
    if s > 0:
        ops.append(Op("attn_value", "attention", "layer", flops=2.0 * b * nh * q * s * d, weight_bytes=0.0,
                      act_bytes=dt * b * (nh * q * s + nh * q * d), kv_bytes=dt * b * nkv * s * d,
                      tokens=q, count=L, launches=0, **prof))
    ops.append(Op("tree_value", "tree_attention", "layer", flops=2.0 * b * nh * q * q * d, weight_bytes=0.0,
                  act_bytes=dt * b * (nh * q * q + nkv * q * d + nh * q * d), kv_bytes=0.0,
                  tokens=q, count=L, density=density, launches=0, **prof))
    return ops


@lru_cache(maxsize=256)
def weight_working_set(model: ModelSpec, dtype: str | None = None) -> float:
    """Bytes of weights one step reads (every operator's weights once; of the embedding table only
    the looked-up rows): what must fit in a device's cache for the model to run cache-resident."""
    graph = build_step_graph(model, 1, 1, 1, dtype)
    return float(sum(op.weight_bytes * op.count for op in graph.ops))


def build_step_graph(model: ModelSpec, tokens: int, context: int, batch: int = 1, dtype: str | None = None,
                     tree: TokenTree | None = None) -> StepGraph:
    """Operators of one forward step of ``model`` for ``tokens`` new tokens per sequence.

    ``tree`` (if given, its size must equal ``tokens``) sets the density of the new-token
    attention block; without one the block is causal (a chain / prefill).
    """
    for label, value, low in (("tokens", tokens, 1), ("context", context, 0), ("batch", batch, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise HetSpecError(f"{label} must be an integer >= {low} (got {value!r})")
    dtype = check_dtype(dtype or model.dtype)
    if tree is not None and tree.size != tokens:
        raise HetSpecError(f"tree has {tree.size} tokens but the step has {tokens}")
    q, s, b, dt = tokens, context, batch, DTYPE_BYTES[dtype]
    density = tree.mask_density if tree is not None else (q + 1) / (2 * q)
    h, i, L = model.hidden, model.intermediate, model.n_layers
    hq, kv, T = model.n_heads * model.head_dim, model.kv_dim, b * q

    # profile keys of the elementwise operators (sim.op_timing; the roofline ignores them), and the kernels
    # HetSpec's eager real model launches for them (real/model: RMSNorm casts, squares, means, adds eps, takes
    # rsqrt, scales, casts back, weights: 8; RoPE on q and k: negate, concatenate, two products, a sum: 2 x 5;
    # SwiGLU: silu, then the product: 2)
    ew = {"profile_tokens": T}
    llama = model.arch == "llama"
    norm = {**ew, "table": "norm", "shape": str(h), "eager_launches": EAGER_NORM_LAUNCHES if llama else None}
    add = {**ew, "table": "add", "shape": str(h)}
    def w(op: str) -> dict:      # how ``op``'s weights are stored (linear_op's ``weight``)
        return {"weight": stored_weight(model, op, dtype)}

    def norm_w(op: str) -> dict:
        per, wtype = stored_weight(model, op, dtype)
        return {"weight_bytes": per * h, "weight_type": wtype}

    # the embedding's looked-up rows are read as activations (weight_bytes 0); its type is shown
    ops: list[Op] = [elementwise_op("embed", "embedding", T * h, 0, dt, 1, reads=1, writes=1, section="pre",
                                    table="embedding", shape=str(h), weight_type=stored_weight(model, "embed",
                                                                                               dtype)[1], **ew)]
    if model.arch == "gpt2":
        ops.append(elementwise_op("pos_embed_add", "elementwise", T * h, ADD_FLOPS_PER_ELEMENT, dt, 1, reads=2,
                                  section="pre", **add))
    ops += [
        elementwise_op("attn_norm", "norm", T * h, NORM_FLOPS_PER_ELEMENT, dt, L, **norm_w("attn_norm"), **norm),
        linear_op("q_proj", T, h, hq, dt, L, **w("q_proj")),
        linear_op("k_proj", T, h, kv, dt, L, **w("k_proj")),
        linear_op("v_proj", T, h, kv, dt, L, **w("v_proj")),
    ]
    if model.arch == "llama":
        ops.append(elementwise_op("rope", "elementwise", T * (hq + kv), ROPE_FLOPS_PER_ELEMENT, dt, L, table="rope",
                                  shape=f"h{model.n_heads}kv{model.n_kv_heads}d{model.head_dim}",
                                  eager_launches=EAGER_ROPE_LAUNCHES, **ew))
    ops += attention_ops(model, q, s, b, dt, density)
    ops += [
        linear_op("o_proj", T, hq, h, dt, L, **w("o_proj")),
        elementwise_op("attn_residual", "elementwise", T * h, ADD_FLOPS_PER_ELEMENT, dt, L, reads=2, **add),
        elementwise_op("mlp_norm", "norm", T * h, NORM_FLOPS_PER_ELEMENT, dt, L, **norm_w("mlp_norm"), **norm),
    ]
    if model.arch == "llama":
        ops += [
            linear_op("gate_proj", T, h, i, dt, L, **w("gate_proj")),
            linear_op("up_proj", T, h, i, dt, L, **w("up_proj")),
            elementwise_op("act_mul", "elementwise", T * i, ACT_FLOPS_PER_ELEMENT, dt, L, reads=2, table="act_mul",
                           shape=str(i), eager_launches=EAGER_ACT_LAUNCHES, **ew),
        ]
    else:
        ops += [
            linear_op("up_proj", T, h, i, dt, L, **w("up_proj")),
            elementwise_op("gelu", "elementwise", T * i, ACT_FLOPS_PER_ELEMENT, dt, L, table="gelu", shape=str(i),
                           **ew),
        ]
    ops += [
        linear_op("down_proj", T, i, h, dt, L, **w("down_proj")),
        elementwise_op("mlp_residual", "elementwise", T * h, ADD_FLOPS_PER_ELEMENT, dt, L, reads=2, **add),
        elementwise_op("final_norm", "norm", T * h, NORM_FLOPS_PER_ELEMENT, dt, 1, **norm_w("final_norm"),
                       section="post", **norm),
        linear_op("lm_head", T, h, model.vocab, dt, 1, kind="lm_head", section="post", **w("lm_head")),
    ]
    if q > 1:
        ops = [replace(op, masked_pass=True) for op in ops]
    return StepGraph(model=model, tokens=q, context=s, batch=b, dtype=dtype, density=density, ops=tuple(ops),
                     eager_ops=eager_extra_ops(model, q, s, b, dt) if llama else ())


def forward_key(model: ModelSpec) -> str:
    """A model's profile key for its whole eager forward (the ``forward_rest`` rows of a measured profile):
    ``L<layers>H<hidden>I<intermediate>h<heads>kv<KV heads>d<head dim>V<vocabulary>``."""
    return (f"L{model.n_layers}H{model.hidden}I{model.intermediate}h{model.n_heads}kv{model.n_kv_heads}"
            f"d{model.head_dim}V{model.vocab}")


def eager_extra_ops(model: ModelSpec, q: int, s: int, b: int, dt: float) -> tuple[Op, ...]:
    """What HetSpec's eager real model (real/model, ``Transformer.forward``) launches beyond :func:`build_step_graph`'s
    operators, per forward: the position ids (``arange``; ``int(positions.max())``: a reduction and a
    device-to-host copy that synchronises), the RoPE rows of those positions (cos and sin gathers), the
    attention mask (the committed prefix's ``ones`` and its ``cat`` with the tree mask); per layer: the new
    keys and values written into the KV cache (two copies); and ``forward_rest``: what the model's eager
    forward spends beyond every operator's row (Python module and argument handling, the operators' caches
    disturbed by one another), measured per model shape and token count by ``hetspec calibrate``
    (:mod:`real.validation.forward_launch`), nothing where the profile has no row for the model.

    Only a profiled device in eager mode prices them (each launch costs at least a host dispatch there);
    the roofline does not, so roofline results do not change (see docs/simulator.md).
    """
    T, L, kv, hd = b * q, model.n_layers, model.kv_dim, model.head_dim
    one = {"section": "pre", "profile_tokens": q}
    return (
        elementwise_op("positions", "elementwise", q, 0, 8.0, 1, reads=1, writes=2, table="positions",
                       shape="1", eager_launches=3, launches=3, **one),
        elementwise_op("rope_gather", "elementwise", 2 * q * hd, 0, dt, 1, reads=1, writes=1, table="rope_gather",
                       shape=str(hd), eager_launches=2, launches=2, **one),
        elementwise_op("mask_build", "elementwise", q * (s + q), 0, 1.0, 1, reads=1, writes=2, table="mask_build",
                       shape="1", eager_launches=2, launches=2, **one),
        elementwise_op("kv_write", "elementwise", 2 * T * kv, 0, dt, L, reads=1, writes=1, table="kv_write",
                       shape=f"kv{model.n_kv_heads}d{hd}", eager_launches=2, launches=2, profile_tokens=T),
        elementwise_op("forward_rest", "elementwise", 0, 0, dt, 1, reads=0, writes=0, table="forward_rest",
                       shape=forward_key(model), eager_launches=0, launches=0, section="post", profile_tokens=T),
    )
