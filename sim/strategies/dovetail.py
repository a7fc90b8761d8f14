"""``dovetail``: draft on the accelerator, verify the tree with the target on the CPU (Dovetail).

One round (Dovetail §III-A, Fig. 5):

1. **Draft** on ``draft_device`` (default the accelerator, fp16, option ``draft_dtype``): an
   EAGLE-2 dynamic tree grown by 1 + ``draft_depth`` forward passes of the drafter: pass 0 over the
   ceil(tau) tokens accepted in the previous round (with their hidden states from the target),
   then ``draft_depth`` passes over the ``top_k`` nodes expanded at each level (the drafter's KV
   cache grows by what each pass adds). The drafter (option ``drafter``):

   - ``dgf`` (Dovetail): ``drafter_blocks`` decoder blocks of the target's shape, fed by Dynamic
     Gating Fusion of the hidden state h and the token embedding e (h1 = h W1, h2 = e W2,
     z = sigmoid([h1; h2] Wz), f = z * h1 + (1 - z) * h2; W1, W2: d x d, Wz: 2d x d), then the
     target's final norm and LM head (a frozen copy on the accelerator);
   - ``eagle2``: the same with EAGLE's fusion fc([h; e]) (2d x d) instead of DGF;
   - a model preset (``tinyllama-1.1b``, ``sheared-llama-1.3b``, ...; or ``draft_model``; or the path
     of a ``config.json``, e.g. the real path's demo draft model): a whole small LLM drafts the same
     tree from token ids alone.

   Dovetail §II eq. (1) writes the draft cost of a chain as gamma * T_D; the implementation drafts a
   tree, so a round costs (1 + depth) passes of top-k tokens whatever the verified width (the
   re-ranking keeps the best ``tree_width`` nodes of what was drafted).
2. **Transfer** the ``tree_width`` tokens, their positions and the tree mask to ``device``.
3. **Verify** on ``device`` (default the CPU; the target in the problem's dtype, fp32 in the
   paper): one forward over the ``tree_width`` tokens. Option ``target_gpu_layers`` n (the 7 GB
   mode of Table II) runs the embedding and the first n target layers on the accelerator in
   ``draft_dtype`` and ships their hidden states to the CPU. CPU operators are priced with
   Dovetail's partial-overlap form (§II eq. 3-4), per operator:
   T = T_comp + T_mem - beta * min(T_comp, T_mem), option ``overlap_beta`` (default 1: full
   overlap, the roofline; 0: none).
4. **Transfer back** the accepted tokens and, for feature-level drafters, their hidden states
   (cast to ``draft_dtype``).

Drafter residency (devices with a measured last-level cache, i.e. a calibrated host; presets price
the drafter as they always did): a drafter that fits the cache alone but not with the target is
evicted by every verification when both run on one device or on CPU workers of one memory domain
(one last-level cache): the round's first drafter pass reads its weights from DRAM, the next ones
from the cache, slowed by the device's measured re-warming, as the draft passes of ``chain`` and
``draft-tree`` (:func:`drafter_pass_resident`).

Host-side work (growing and reranking the tree in Python, the acceptance walk) is the draft
device's calibrated loop costs (``dovetail_step`` + ``dovetail_pass`` per drafter pass; the host
calibration's heterogeneous probes write them from the real loop,
:mod:`real.validation.calibration.dovetail_probe`); 0 on presets and hosts calibrated without them.

Tokens per round: option ``tau`` if given (a measured mean acceptance length), else the
acceptance model's tau for (drafter, blocks, width, ``temperature``) (Dovetail Tables I / III,
:func:`tree_tau`); with ``tree_shape`` ``chain``, gamma = ``tree_width`` - 1 one-token draft passes
and Omega(gamma, alpha) tokens (Dovetail §II eq. 1).

Engine and closed form run the same tasks one after another (nothing overlaps within a round),
so they agree to round-off.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from hwmodels.contention import standalone_bw
from hwmodels.dtypes import DTYPE_BYTES, check_dtype
from hwmodels.errors import HetSpecError, UnknownNameError
from sim.closed_form import chain_density, masked_pass, roofline_arrays, step_polynomial, step_seconds
from sim.model_spec import ModelSpec, get_model, model_names
from sim.plan import StepPlan, Task, delay_task, graph_tasks, ops_tasks, transfer_task
from sim.step_graph import ACT_FLOPS_PER_ELEMENT, Op, build_step_graph, elementwise_op, linear_op
from sim.step_timing import price_op
from sim.strategies.base import Estimate, Knob, Problem, Strategy, StrategyConfig, co_resident, fits, host_seconds

#: Feature-level drafters (EAGLE family): blocks of the target's shape on top of a fusion layer.
FEATURE_DRAFTERS = ("dgf", "eagle2")
#: Dovetail's tree settings (§IV "Setup"): top-k 10, depth 7, 16 verified tokens (root included).
DEFAULT_TOP_K = 10
DEFAULT_DEPTH = 7
DEFAULT_WIDTH = 16
#: Dovetail's drafter: "w/ DGF + 4" = 5 blocks (§III-C, Table III; the authors' repository: num_hidden_layers=5).
DEFAULT_DGF_BLOCKS = 5
#: The EAGLE-2 drafter has one decoder block (EAGLE; Dovetail Table III "w/o both").
EAGLE_BLOCKS = 1
#: Bytes of a token id / position id (int64, torch's index dtype) and of one tree-mask entry (bool).
TOKEN_ID_BYTES = 8
MASK_ENTRY_BYTES = 1
#: Chain drafting (an acceptance rate instead of a tau table): gamma searched up to 8, like ``chain``.
MAX_CHAIN_GAMMA = 8
EAGLE_DRAFTER = "eagle2"
#: Reference drafter whose tau-vs-width curve (Table I: 16 and 60 tokens) shapes the others'.
REFERENCE_DRAFTER = ("eagle2", EAGLE_BLOCKS)


# ---------------------------------------------------------------------- acceptance
def _log_interp(points: Sequence[tuple[int, float]], width: float) -> float:
    xs = np.log([p[0] for p in points])
    return float(np.interp(np.log(width), xs, [p[1] for p in points]))


def tree_tau(acceptance, drafter: str, blocks: int | None, width: int, temperature: float = 0.0) -> float:
    """Mean tokens per round of ``drafter`` verifying ``width`` tokens (Dovetail Tables I / III).

    A width the table gives is returned as printed. Otherwise (departure, marked: Dovetail reports
    tau only at 16 and 60 verified tokens) tau is interpolated linearly in log width through
    tau(1) = 1 and the drafter's own entries; a drafter with a single entry (w0, tau0) takes the
    shape of the EAGLE-2 drafter's curve: tau(m) = 1 + (tau0 - 1) (ref(m) - 1) / (ref(w0) - 1).
    Widths above the largest tabulated one are refused (no extrapolation).
    """
    if not acceptance.tau_entries:
        raise HetSpecError(f"acceptance model {acceptance.name}: has no tau table (Dovetail); use one of the "
                           "dovetail-* presets or option tau=<mean tokens per round>")
    if width < 1:
        raise HetSpecError(f"verified tokens must be >= 1 (got {width})")

    def entries(d, b):
        return sorted((e.width, e.tau) for e in acceptance.tau_entries
                      if e.drafter == d and e.blocks == b and math.isclose(e.temperature, temperature))

    own = entries(drafter, blocks)
    if not own:
        acceptance.tau(drafter, blocks, None, temperature)   # raises the table's one-line listing
    exact = [t for w, t in own if w == width]
    if exact:
        return exact[0]
    if width == 1:
        return 1.0
    points = [(1, 1.0)] + own
    if len(own) >= 2:
        hi = own[-1][0]
        if width > hi:
            raise HetSpecError(f"acceptance model {acceptance.name}: tau of {drafter} is tabulated up to {hi} "
                               f"verified tokens; {width} is outside (no extrapolation)")
        return _log_interp(points, width)
    ref = entries(*REFERENCE_DRAFTER)
    if len(ref) < 2:
        raise HetSpecError(f"acceptance model {acceptance.name}: tau of {drafter} is given only at {own[0][0]} "
                           f"verified tokens and there is no EAGLE-2 curve to shape other widths")
    hi = ref[-1][0]
    if width > hi:
        raise HetSpecError(f"acceptance model {acceptance.name}: tau curves reach {hi} verified tokens; "
                           f"{width} is outside (no extrapolation)")
    ref_points = [(1, 1.0)] + ref
    w0, t0 = own[0]
    return 1.0 + (t0 - 1.0) * (_log_interp(ref_points, width) - 1.0) / (_log_interp(ref_points, w0) - 1.0)


def max_tau_width(acceptance, drafter: str, blocks: int | None, temperature: float = 0.0) -> int:
    """Largest verified width :func:`tree_tau` answers for this drafter."""
    own = [e.width for e in acceptance.tau_entries or () if e.drafter == drafter and e.blocks == blocks
           and math.isclose(e.temperature, temperature)]
    ref = [e.width for e in acceptance.tau_entries or () if (e.drafter, e.blocks) == REFERENCE_DRAFTER
           and math.isclose(e.temperature, temperature)]
    if len(own) >= 2:
        return max(own)
    return max(ref) if len(ref) >= 2 else max(own, default=1)


# ---------------------------------------------------------------------- the drafter
def drafter_spec(problem: Problem, drafter: str, blocks: int | None, dtype: str) -> ModelSpec:
    """The drafter as a model: a feature-level drafter is ``blocks`` decoder blocks of the target's
    shape (with the target's vocabulary for its LM head); a model drafter is that preset."""
    if drafter in FEATURE_DRAFTERS:
        return replace(problem.model, name=f"{drafter}-{blocks}x", n_layers=int(blocks), dtype=dtype)
    return get_model(drafter).with_dtype(dtype)


def fusion_ops(model: ModelSpec, drafter: str, tokens: int, dtype: str) -> list[Op]:
    """The fusion of hidden state and token embedding before the drafter's blocks (one pass)."""
    if drafter not in FEATURE_DRAFTERS:
        return []
    dt, h, T = DTYPE_BYTES[dtype], model.hidden, tokens
    if drafter == "eagle2":
        return [linear_op("eagle_fc", T, 2 * h, h, dt, 1, section="pre")]
    return [
        linear_op("dgf_w1", T, h, h, dt, 1, section="pre"),
        linear_op("dgf_w2", T, h, h, dt, 1, section="pre"),
        linear_op("dgf_gate", T, 2 * h, h, dt, 1, section="pre"),
        # z = sigmoid(.), f = z * h1 + (1 - z) * h2: reads z, h1, h2, writes f
        elementwise_op("dgf_mix", "elementwise", T * h, ACT_FLOPS_PER_ELEMENT, dt, 1, reads=3, section="pre"),
    ]


def drafter_weight_bytes(problem: Problem, drafter: str, blocks: int | None, dtype: str) -> float:
    """Accelerator memory of the drafter: its blocks, fusion, embedding and LM head (Dovetail's
    peak-memory accounting, §IV-A: 2.95 GB for the 5-block drafter)."""
    spec = drafter_spec(problem, drafter, blocks, dtype)
    fusion = sum(op.weight_bytes for op in fusion_ops(problem.model, drafter, 1, dtype))
    return spec.weight_bytes() + fusion


@dataclass(frozen=True)
class DraftPass:
    tokens: int
    context: int


def draft_passes(problem: Problem, config: StrategyConfig, n0: int) -> list[DraftPass]:
    """The drafter's passes of one round: the accepted tokens, then one pass per tree level."""
    if config.tree_shape == "chain":
        return [DraftPass(1, problem.context + j) for j in range(config.tree_width - 1)]
    return tree_draft_passes(n0, config.draft_depth, config.option("top_k"), problem.context)


def tree_draft_passes(n0: int, depth: int, top_k: int, context: int) -> list[DraftPass]:
    """An EAGLE-2 tree round's drafter passes: the ``n0`` accepted tokens over ``context`` cached,
    then ``depth`` passes of the ``top_k`` best nodes of the newest level (their K/V pending)."""
    return [DraftPass(n0, context)] + [DraftPass(top_k, context + n0 + j * top_k) for j in range(depth)]


def shares_cache(problem: Problem, drafter: str, verifier: str) -> bool:
    """Whether the verifier's target passes through the drafter's last-level cache: one device, or CPU
    workers of one memory domain (threads of one CPU share its last-level cache)."""
    if drafter == verifier:
        return True
    platform = problem.platform
    return (platform.device(drafter).kind == "cpu" and platform.device(verifier).kind == "cpu"
            and platform.shares_memory(drafter, verifier))


def drafter_pass_resident(problem: Problem, config: StrategyConfig, spec: ModelSpec, j: int) -> bool | None:
    """Whether drafter pass ``j`` of a round finds the drafter in its device's cache (None: the default rule,
    the drafter alone in the cache). As the draft passes of ``chain``: where the target passes through the
    drafter's cache and the two do not fit together, the round's first pass reads the drafter from DRAM."""
    device = config.draft_device
    if problem.platform.device(device).cache_gb is None or not shares_cache(problem, device, config.device):
        return None
    if co_resident(problem, device, problem.model, spec):
        return True
    return j > 0 and co_resident(problem, device, spec)


def drafter_rewarm_seconds(problem: Problem, config: StrategyConfig, spec: ModelSpec, p: "DraftPass", j: int) -> float:
    """Extra seconds of drafter pass ``j`` while the cache re-warms after the target evicted the drafter
    (the device's :meth:`~hwmodels.platform.Device.rewarm_gap_share` of the gap between its cold and its warm
    time; as :func:`sim.strategies.chain.rewarm_seconds`)."""
    device = config.draft_device
    dev = problem.platform.device(device)
    share = dev.rewarm_gap_share(j)
    if j == 0 or share <= 0.0 or not drafter_pass_resident(problem, config, spec, j) \
            or co_resident(problem, device, problem.model, spec):
        return 0.0
    cold, warm = (float(step_seconds(spec, problem.platform, device, p.tokens, p.context, problem.batch, resident=r))
                  for r in (False, True))
    return share * max(cold - warm, 0.0)


# ---------------------------------------------------------------------- verification pricing
def op_costs(model: ModelSpec, problem: Problem, device: str, q: int, s: int):
    """Per-instance compute, memory and fixed seconds, bytes and FLOPs of every operator of the
    target's step (q tokens over s cached), on ``device`` alone; plus names, sections, counts."""
    poly = step_polynomial(model, model.dtype, context=s > 0)
    arr = poly.arrays(problem.batch, q, s)
    nbytes = arr["weight_bytes"] + arr["act_bytes"] + arr["kv_bytes"]
    t = roofline_arrays(problem.platform.device(device), model.dtype, arr["flops"], nbytes, arr["tokens"],
                        chain_density(q), poly.launches, standalone_bw(problem.platform, device), poly.masked,
                        rows=poly.rows, masked_pass=masked_pass(q))
    return {"name": poly.names, "section": poly.sections, "count": poly.count, "compute_s": t["compute_s"],
            "memory_s": t["memory_s"], "fixed_s": t["overhead_s"], "bytes": nbytes, "flops": arr["flops"]}


def overlap_seconds(compute_s, memory_s, beta: float):
    """Dovetail §II eq. (4): T_comp + T_mem - beta * min(T_comp, T_mem) (beta = 1: the roofline)."""
    return compute_s + memory_s - beta * np.minimum(compute_s, memory_s)


@dataclass(frozen=True)
class VerifyPart:
    """The target's operators one device runs in a verification, with the instances each runs."""

    device: str
    model: ModelSpec
    instances: np.ndarray       # per operator of the step graph
    costs: dict


def verify_parts(problem: Problem, config: StrategyConfig) -> list[VerifyPart]:
    """Where the verification runs: all on ``device``, or (``target_gpu_layers`` n > 0) the
    embedding and the first n layers on the draft device in ``draft_dtype``, the rest on ``device``."""
    m, s, L = config.tree_width, problem.context, problem.model.n_layers
    n = config.option("target_gpu_layers")
    main = op_costs(problem.model, problem, config.device, m, s)
    sections = np.array(main["section"])
    if not n:
        return [VerifyPart(config.device, problem.model, main["count"], main)]
    gpu_model = problem.model.with_dtype(config.option("draft_dtype"))
    gpu = op_costs(gpu_model, problem, config.draft_device, m, s)
    layer = sections == "layer"
    on_gpu = np.where(sections == "pre", main["count"], np.where(layer, n, 0.0))
    on_cpu = np.where(sections == "pre", 0.0, np.where(layer, L - n, main["count"]))
    return [VerifyPart(config.draft_device, gpu_model, on_gpu, gpu), VerifyPart(config.device, problem.model, on_cpu, main)]


# ---------------------------------------------------------------------- the strategy
class DovetailStrategy(Strategy):
    name = "dovetail"
    knob_help = {
        "device": "device verifying with the target (default: the CPU)",
        "draft_device": "device running the drafter (default: the accelerator)",
        "tree_width": "verified tokens per round, root included (Dovetail: 16; vanilla EAGLE-2: 60)",
        "draft_depth": "tree depth: 1 + depth drafter passes per round (Dovetail: 7)",
        "drafter": "option: dgf (Dovetail) | eagle2 | a model preset (tinyllama-1.1b, sheared-llama-1.3b)",
        "drafter_blocks": "option: decoder blocks of a dgf / eagle2 drafter (Dovetail: 5)",
        "top_k": "option: nodes expanded per level (Dovetail: 10)",
        "temperature": "option: 0 or 1, selects the tau column of the tables",
        "tau": "option: mean tokens per round, overriding the table",
        "target_gpu_layers": "option: target layers kept on the accelerator (Table II's 7 GB mode: 10)",
        "overlap_beta": "option: overlap of compute and memory time on the verifier, Dovetail eq. (4) (default 1)",
        "draft_dtype": "option: dtype of the drafter and of GPU-resident target layers (default fp16)",
        "tree_shape": "greedy (the drafted tree) | chain (a chain drafter, from the acceptance model's draft_alpha)",
        "draft_model": "a model preset (or config.json) as the drafter, as option drafter=<preset>",
    }

    # ------------------------------------------------------------------ search space
    def search_space(self, problem: Problem) -> tuple[Knob, ...]:
        acc = problem.need_acceptance(self.name)
        verifiers = tuple(d for d in _by_kind(problem, ("cpu", "gpu", "npu")) if fits(problem, problem.model, d))
        placement = (Knob("device", verifiers or (_cpu_name(problem),)),
                     Knob("draft_device", (problem.platform.accelerator.name,)))
        if not acc.tau_entries:
            if acc.draft_alpha is None:
                raise HetSpecError(f"acceptance model {acc.name}: has no tau table (Dovetail) and no draft_alpha; use "
                                   "one of the dovetail-* presets or alpha:<a> with --tree-shape chain")
            # a chain drafter: gamma = 1..MAX_CHAIN_GAMMA one-token passes, Omega(gamma, alpha) tokens
            return (*placement, Knob("drafter", (EAGLE_DRAFTER,)), Knob("tree_shape", ("chain",)),
                    Knob("tree_width", tuple(range(2, MAX_CHAIN_GAMMA + 2))))
        drafter = _default_drafter(acc)
        blocks = acc.tau_blocks(drafter) if drafter in FEATURE_DRAFTERS else (None,)
        top = min(max_tau_width(acc, drafter, blocks[-1]), 1 + DEFAULT_TOP_K * (DEFAULT_DEPTH + 1))
        return (*placement, Knob("drafter", (drafter,)), Knob("drafter_blocks", tuple(blocks)),
                Knob("top_k", (DEFAULT_TOP_K,)), Knob("draft_depth", (DEFAULT_DEPTH,)),
                Knob("tree_width", tuple(range(2, top + 1))))

    # ------------------------------------------------------------------ configs
    def resolve(self, problem: Problem, config: StrategyConfig) -> StrategyConfig:
        verifier = config.device or _cpu_name(problem)
        config = super().resolve(problem, replace(config, device=verifier))
        platform = problem.platform
        draft_device = config.draft_device or platform.accelerator.name
        opts = dict(config.options)
        drafter = config.draft_model or opts.get("drafter") or _default_drafter(problem.acceptance)
        if drafter not in FEATURE_DRAFTERS and drafter not in model_names() and not _is_config_path(drafter):
            raise UnknownNameError("dovetail drafter", drafter, FEATURE_DRAFTERS + ("<model preset>",))
        blocks = opts.get("drafter_blocks")
        if drafter in FEATURE_DRAFTERS:
            blocks = (DEFAULT_DGF_BLOCKS if drafter == "dgf" else EAGLE_BLOCKS) if blocks is None else blocks
            if isinstance(blocks, bool) or not isinstance(blocks, (int, np.integer)) or blocks < 1:
                raise HetSpecError(f"option drafter_blocks must be an integer >= 1 (got {blocks!r})")
            blocks = int(blocks)
        else:
            blocks = None
        draft_dtype = check_dtype(opts.get("draft_dtype", "fp16"), "option draft_dtype")
        top_k = _positive_int(opts.get("top_k", DEFAULT_TOP_K), "top_k")
        depth = config.draft_depth or DEFAULT_DEPTH
        width = config.tree_width if config.tree_width > 1 else DEFAULT_WIDTH
        chain = config.tree_shape == "chain"
        if not chain and width > 1 + top_k * (depth + 1):
            raise HetSpecError(f"a tree from {depth + 1} passes of top-{top_k} has at most {1 + top_k * (depth + 1)} "
                               f"tokens (width {width} asked)")
        beta = opts.get("overlap_beta", 1.0)
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0.0 <= beta <= 1.0:
            raise HetSpecError(f"option overlap_beta must be in [0, 1] (got {beta!r})")
        n_gpu = opts.get("target_gpu_layers", 0) or 0
        if isinstance(n_gpu, bool) or not isinstance(n_gpu, (int, np.integer)) or not 0 <= n_gpu <= problem.model.n_layers:
            raise HetSpecError(f"option target_gpu_layers must be an integer in [0, {problem.model.n_layers}] "
                               f"(got {n_gpu!r})")
        tau = opts.get("tau")
        if tau is not None and (isinstance(tau, bool) or not isinstance(tau, (int, float)) or not 1.0 <= tau <= width):
            raise HetSpecError(f"option tau must be a number in [1, {width}] (got {tau!r})")
        temperature = float(opts.get("temperature", 0.0))
        if draft_device != config.device:
            platform.link(draft_device, config.device)          # one line if they are not linked
        _require_memory(problem, config.device, draft_device, drafter, blocks, draft_dtype, int(n_gpu))
        resolved = replace(config, draft_device=draft_device, tree_width=int(width), draft_depth=0 if chain else int(depth),
                           partition_ratio=None, tree=None, tree_shape="chain" if chain else "greedy",
                           draft_model=None if drafter in FEATURE_DRAFTERS else drafter,
                           options={**opts, "drafter": drafter, "drafter_blocks": blocks, "top_k": top_k,
                                    "draft_dtype": draft_dtype, "overlap_beta": float(beta),
                                    "target_gpu_layers": int(n_gpu), "temperature": temperature})
        self.tokens_per_round(problem, resolved)               # the acceptance model must answer
        return resolved

    def tokens_per_round(self, problem: Problem, config: StrategyConfig) -> float:
        if config.option("tau") is not None:
            return float(config.option("tau"))
        acc = problem.need_acceptance(self.name)
        if config.tree_shape == "chain":
            return float(acc.chain_tokens(config.tree_width - 1))
        return tree_tau(acc, config.option("drafter"), config.option("drafter_blocks"), config.tree_width,
                        config.option("temperature"))

    # ------------------------------------------------------------------ closed form
    def _draft_seconds(self, problem: Problem, config: StrategyConfig, n0: int) -> float:
        drafter, dtype = config.option("drafter"), config.option("draft_dtype")
        spec = drafter_spec(problem, drafter, config.option("drafter_blocks"), dtype)
        dev = problem.platform.device(config.draft_device)
        bw = standalone_bw(problem.platform, config.draft_device)
        total = 0.0
        for j, p in enumerate(draft_passes(problem, config, n0)):
            total += float(step_seconds(spec, problem.platform, config.draft_device, p.tokens, p.context, problem.batch,
                                        resident=drafter_pass_resident(problem, config, spec, j)))
            total += drafter_rewarm_seconds(problem, config, spec, p, j)
            total += sum(price_op(op, dev, dtype, bw).time_s for op in fusion_ops(problem.model, drafter,
                                                                                   p.tokens * problem.batch, dtype))
        return total

    def _transfers(self, problem: Problem, config: StrategyConfig, n0: int) -> dict[str, float]:
        """Bytes over the link per round: to the verifier, back to the drafter, and (7 GB mode) hidden states."""
        b, m, h = problem.batch, config.tree_width, problem.model.hidden
        dt_draft = DTYPE_BYTES[config.option("draft_dtype")]
        feature = config.option("drafter") in FEATURE_DRAFTERS
        to_verifier = b * (m * 2 * TOKEN_ID_BYTES + m * m * MASK_ENTRY_BYTES)       # tokens, positions, mask
        to_drafter = b * n0 * (TOKEN_ID_BYTES + (h * dt_draft if feature else 0))   # accepted ids (+ hidden states)
        hidden = b * m * h * dt_draft if config.option("target_gpu_layers") else 0.0
        return {"to_verifier": to_verifier, "to_drafter": to_drafter, "hidden": hidden}

    def estimate(self, problem: Problem, config: StrategyConfig) -> Estimate:
        tokens = self.tokens_per_round(problem, config)
        n0 = max(int(math.ceil(tokens)), 1)
        draft = self._draft_seconds(problem, config, n0)
        beta = config.option("overlap_beta")
        verify = comp = mem = 0.0
        for part in verify_parts(problem, config):
            c, k = part.costs, part.instances
            if part.device == config.device:
                t = overlap_seconds(c["compute_s"], c["memory_s"], beta)
                comp += float((k * c["compute_s"]).sum())
                mem += float((k * c["memory_s"]).sum())
            else:
                t = np.maximum(c["compute_s"], c["memory_s"])
            verify += float((k * (c["fixed_s"] + t)).sum())
        transfer = 0.0
        if config.draft_device != config.device:
            link = problem.platform.link(config.draft_device, config.device)
            transfer = sum(link.transfer_s(v) for v in self._transfers(problem, config, n0).values())
        host = self._host_seconds(problem, config)
        return Estimate(step_s=draft + transfer + verify + host, tokens_per_step=tokens,
                        proposed_per_step=config.tree_width - 1,
                        breakdown={"draft": draft, "transfer": transfer, "verify": verify, "host": host,
                                   "verify_compute": comp, "verify_memory": mem})

    def _host_seconds(self, problem: Problem, config: StrategyConfig) -> float:
        """The round's host-side work beyond the forwards (growing and reranking the tree, building
        its mask, the acceptance walk): the drafter device's measured ``dovetail`` host costs, per
        round and per drafter pass (0 where the platform does not describe them: only calibrated
        hosts do)."""
        passes = len(draft_passes(problem, config, 1))
        return float(host_seconds(problem, self.name, config.draft_device, passes=passes, nodes=config.tree_width))

    # ------------------------------------------------------------------ engine plan
    def plan(self, problem: Problem, config: StrategyConfig, rng: np.random.Generator | None = None,
             per_layer: bool = False) -> StepPlan:
        expected = self.tokens_per_round(problem, config)
        n0 = max(int(math.ceil(expected)), 1)
        platform = problem.platform
        drafter, dtype = config.option("drafter"), config.option("draft_dtype")
        spec = drafter_spec(problem, drafter, config.option("drafter_blocks"), dtype)
        tasks: list[Task] = []
        for j, p in enumerate(draft_passes(problem, config, n0)):
            deps = (tasks[-1].name,) if tasks else ()
            fusion = fusion_ops(problem.model, drafter, p.tokens * problem.batch, dtype)
            if fusion:
                tasks += ops_tasks(fusion, platform, config.draft_device, dtype, f"draft{j}", "draft", deps)
                deps = (tasks[-1].name,)
            graph = build_step_graph(spec, p.tokens, p.context, problem.batch)
            tasks += graph_tasks(graph, platform, config.draft_device, f"draft{j}", "draft", deps, per_layer,
                                 resident=drafter_pass_resident(problem, config, spec, j))
            rewarm = drafter_rewarm_seconds(problem, config, spec, p, j)
            if rewarm > 0:
                tasks.append(delay_task(f"draft{j}/rewarm", rewarm, "draft", (tasks[-1].name,), config.draft_device))
        moves = self._transfers(problem, config, n0) if config.draft_device != config.device else {}
        if moves:
            tasks.append(transfer_task(platform, config.draft_device, config.device, moves["to_verifier"], "to_verifier",
                                       deps=(tasks[-1].name,)))
        beta = config.option("overlap_beta")
        parts = verify_parts(problem, config)
        for i, part in enumerate(parts):
            if i and moves.get("hidden"):
                tasks.append(transfer_task(platform, parts[i - 1].device, part.device, moves["hidden"], "hidden",
                                           deps=(tasks[-1].name,)))
            c = part.costs
            for k, name in enumerate(c["name"]):
                n = float(part.instances[k])
                if n == 0:
                    continue
                body = overlap_seconds(c["compute_s"][k], c["memory_s"][k], beta if part.device == config.device else 1.0)
                tasks.append(Task(name=f"verify/{part.device}/{name}", kind="compute", resource=part.device,
                                  phase="verify", compute_s=float(n * body), nbytes=float(n * c["bytes"][k]),
                                  fixed_s=float(n * c["fixed_s"][k]), deps=(tasks[-1].name,), op=name,
                                  flops=float(n * c["flops"][k])))
        if moves:
            tasks.append(transfer_task(platform, config.device, config.draft_device, moves["to_drafter"], "to_drafter",
                                       deps=(tasks[-1].name,)))
        host = self._host_seconds(problem, config)
        if host > 0:
            tasks.append(delay_task("host", host, "accept", (tasks[-1].name,), config.draft_device))
        if rng is None:
            accepted = expected
        elif config.tree_shape == "chain" and config.option("tau") is None:
            accepted = problem.acceptance.sample_chain_tokens(config.tree_width - 1, rng)
        else:
            low = math.floor(expected)
            accepted = int(low + (rng.random() < expected - low))
        return StepPlan(tasks=tuple(tasks), tokens_accepted=accepted, tokens_proposed=config.tree_width - 1,
                        count_phase="verify", count_device=config.device)


# ---------------------------------------------------------------------- helpers
def _is_config_path(name: str) -> bool:
    """A drafter given as a Hugging Face ``config.json`` (file or folder), as ``draft_model`` of the other
    draft-model strategies takes it (e.g. the real path's demo draft model: real/validation/hetero.py)."""
    from pathlib import Path

    path = Path(name)
    return path.suffix == ".json" and path.is_file() or (path / "config.json").is_file()


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise HetSpecError(f"option {name} must be an integer >= 1 (got {value!r})")
    return int(value)


def _by_kind(problem: Problem, kinds: Sequence[str]) -> tuple[str, ...]:
    devs = problem.platform.devices
    return tuple(n for k in kinds for n, d in devs.items() if d.kind == k)


def _cpu_name(problem: Problem) -> str:
    cpu = problem.platform.cpu
    if cpu is None:
        raise HetSpecError(f"dovetail verifies on a CPU; platform {problem.platform.name} has none (give --device)")
    return cpu.name


def _default_drafter(acceptance) -> str:
    drafters = {e.drafter for e in (acceptance.tau_entries or ())} if acceptance is not None else set()
    for name in FEATURE_DRAFTERS:
        if name in drafters:
            return name
    return FEATURE_DRAFTERS[0]


def _require_memory(problem: Problem, verifier: str, draft_device: str, drafter: str, blocks, dtype: str,
                    n_gpu: int) -> None:
    """One line if the drafter (plus GPU-resident target layers) or the target does not fit."""
    platform = problem.platform
    need = drafter_weight_bytes(problem, drafter, blocks, dtype)
    if n_gpu:
        dt = DTYPE_BYTES[dtype]
        need += (n_gpu * problem.model.params_per_layer + problem.model.embedding_params) * dt
    if draft_device == verifier:
        need += problem.model.weight_bytes()
    cap = platform.device(draft_device).mem_capacity_bytes
    if need > cap:
        raise HetSpecError(f"dovetail: drafter {drafter}"
                           f"{'' if blocks is None else f' ({blocks} blocks)'}{f' + {n_gpu} target layers' if n_gpu else ''}"
                           f" needs {need / 1e9:.1f} GB but {draft_device} of {platform.name} has "
                           f"{platform.device(draft_device).mem_capacity_gb:g} GB")
    if draft_device != verifier and not fits(problem, problem.model, verifier):
        raise HetSpecError(f"dovetail: target {problem.model.name} does not fit on {verifier} of {platform.name}")


STRATEGY = DovetailStrategy
