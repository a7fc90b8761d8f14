"""``offload``: a target whose weights do not fit on the accelerator, layer by layer.

Two modes (option ``mode``), both with ``resident_layers`` R of the L layers kept on ``device``
(a knob; default: as many as the memory budget holds, option ``mem_budget_gb``, default the
device's capacity, after the embedding, final norm, LM head, KV cache and two streaming buffers):

- ``stream`` (HF Accelerate / DeepSpeed offload, the baseline of Dovetail §I and Table II): every
  step, each of the L - R other layers is copied to ``device`` (over the host link from host
  memory, option ``source`` ``host``; or from storage, ``source`` ``storage``, through the host
  if ``device`` is not the CPU) and computed there. Loading overlaps with compute, layer by layer:
  layer i+1 loads while layer i computes, with two layer buffers (a load waits until the buffer of
  layer i-2 is free) and one transfer at a time per link. Resident layers run first, so the first
  loads hide behind them. Dovetail §II prices offloading as max(T_compute, P / (B_pcie eta_pcie));
  this pipeline tends to it when loading dominates. Departure, marked: no prefetch across steps
  (the next step's first load starts with that step), so with R = 0 the first load is exposed.
- ``split`` (llama.cpp ``-ngl R``, Dovetail Fig. 1's "partial offload"): the L - R other layers
  run on the CPU from host memory (in option ``cpu_dtype``, default the model's dtype), the
  R resident layers and the LM head on ``device``; the hidden states of the step's tokens cross
  the link once and the logits come back (fp32).

Engine and closed form run the same recurrence (tasks on the device and on each link hop), so
they agree exactly; nothing shares a memory domain.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from hwmodels.dtypes import DTYPE_BYTES, check_dtype
from hwmodels.errors import HetSpecError, UnknownNameError
from hwmodels.platform import STORAGE
from hwmodels.contention import standalone_bw
from sim.plan import StepPlan, Task, op_task, ops_tasks, transfer_task
from sim.step_graph import build_step_graph
from sim.step_timing import price_op
from sim.strategies.base import Estimate, Knob, Problem, Strategy, StrategyConfig

MODES = ("stream", "split")
SOURCES = ("host", "storage")
#: Layer buffers on the device while streaming: one layer computes while the next loads.
STREAM_BUFFERS = 2
#: Bytes per logit sent back to the host in split mode (fp32 logits, llama.cpp).
LOGIT_BYTES = 4


def layer_bytes(model, dtype: str) -> float:
    """Weight bytes of one decoder layer (norms included) at ``dtype``."""
    return model.params_per_layer * DTYPE_BYTES[dtype]


def fixed_bytes(model, dtype: str) -> float:
    """Weights outside the layers (embedding, final norm, LM head) at ``dtype``."""
    return (model.params - model.n_layers * model.params_per_layer) * DTYPE_BYTES[dtype]


def max_resident_layers(problem: Problem, device: str, budget_bytes: float | None = None) -> int:
    """Layers that fit on ``device`` next to the non-layer weights, the KV cache and two streaming
    buffers (within ``budget_bytes``, default the device's capacity); -1 if not even those fit."""
    model, dt = problem.model, problem.model.dtype
    budget = problem.platform.device(device).mem_capacity_bytes if budget_bytes is None else budget_bytes
    kv = model.kv_bytes_per_token() * (problem.context + 1) * problem.batch
    base = fixed_bytes(model, dt) + kv
    per_layer = layer_bytes(model, dt)
    if base > budget:
        return -1
    if base + model.n_layers * per_layer <= budget:
        return model.n_layers
    return max(int(math.floor((budget - base - STREAM_BUFFERS * per_layer) / per_layer)), 0)


def stream_path(problem: Problem, device: str, source: str) -> tuple[str, ...]:
    """Endpoints a streamed layer crosses, in order: (storage, host, device), (storage, device) or
    (host, device); one line if the platform has no such links."""
    platform = problem.platform
    host = platform.cpu.name if platform.cpu is not None else None
    if source == "storage":
        via = host if host is not None and platform.storage_link(host) is not None else device
        if platform.storage_link(via) is None:
            raise HetSpecError(f"platform {platform.name} has no storage link to stream weights from")
        path = (STORAGE, via) if via == device else (STORAGE, via, device)
    else:
        if host is None or device == host:
            raise HetSpecError(f"offload from host memory needs a device other than the host CPU on {platform.name} "
                               "(use option source=storage to stream from storage)")
        path = (host, device)
    for a, b in zip(path, path[1:]):
        platform.link(a, b)
    return path


def _hops(problem: Problem, device: str, source: str):
    """The links of :func:`stream_path`, in order."""
    path = stream_path(problem, device, source)
    return [problem.platform.link(a, b) for a, b in zip(path, path[1:])]


class OffloadStrategy(Strategy):
    name = "offload"
    knob_help = {
        "device": "device that computes the resident layers (default: the accelerator)",
        "resident_layers": "option: layers kept on the device (default: as many as the budget holds)",
        "mem_budget_gb": "option: device memory the target may use (default: the device's capacity)",
        "source": "option: host (weights stream over the host link, default) | storage",
        "mode": "option: stream (load the other layers every step) | split (compute them on the CPU, llama.cpp -ngl)",
        "cpu_dtype": "option (split): dtype of the CPU's layers (default: the model's)",
    }

    # ------------------------------------------------------------------ search space
    def search_space(self, problem: Problem) -> tuple[Knob, ...]:
        device = problem.platform.accelerator.name
        top = max_resident_layers(problem, device)
        if top < 0:
            raise HetSpecError(f"offload: the non-layer weights and KV cache of {problem.model.name} do not fit on "
                               f"{device} of {problem.platform.name}")
        return (Knob("device", (device,)), Knob("mode", ("stream",)), Knob("source", ("host",)),
                Knob("resident_layers", tuple(range(0, top + 1))))

    # ------------------------------------------------------------------ configs
    def resolve(self, problem: Problem, config: StrategyConfig) -> StrategyConfig:
        # the point of offloading: the accelerator by default, even though the model does not fit there
        config = super().resolve(problem, replace(config, device=config.device or problem.platform.accelerator.name))
        device = config.device
        mode = config.option("mode", "stream")
        if mode not in MODES:
            raise UnknownNameError("offload mode", mode, MODES)
        source = config.option("source", "host")
        if source not in SOURCES:
            raise UnknownNameError("offload source", source, SOURCES)
        budget = config.option("mem_budget_gb")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget <= 0):
            raise HetSpecError(f"option mem_budget_gb must be a number > 0 (got {budget!r})")
        dev = problem.platform.device(device)
        budget_bytes = dev.mem_capacity_bytes if budget is None else min(budget * 1e9, dev.mem_capacity_bytes)
        top = max_resident_layers(problem, device, budget_bytes)
        if top < 0:
            raise HetSpecError(f"offload: {problem.model.name}'s embedding, LM head and KV cache alone do not fit in "
                               f"{budget_bytes / 1e9:.1f} GB of {device}")
        L = problem.model.n_layers
        resident = config.option("resident_layers")
        if resident is None:
            resident = top
        if isinstance(resident, bool) or not isinstance(resident, (int, np.integer)) or not 0 <= resident <= L:
            raise HetSpecError(f"option resident_layers must be an integer in [0, {L}] (got {resident!r})")
        if resident > top:
            raise HetSpecError(f"{resident} resident layers of {problem.model.name} do not fit in "
                               f"{budget_bytes / 1e9:.1f} GB of {device} (at most {top})")
        cpu_dtype = check_dtype(config.option("cpu_dtype") or problem.model.dtype, "option cpu_dtype")
        if mode == "stream" and resident < L:
            _hops(problem, device, source)           # one line if there is no path to stream over
        if mode == "split":
            cpu = problem.platform.cpu
            if cpu is None or cpu.name == device:
                raise HetSpecError(f"offload mode split needs a CPU next to {device} on {problem.platform.name}")
            problem.platform.link(cpu.name, device)
        return replace(config, partition_ratio=None, tree_width=1, draft_depth=0, tree_shape="chain", tree=None,
                       draft_device=None, draft_model=None,
                       options={**config.options, "mode": mode, "source": source, "resident_layers": int(resident),
                                "cpu_dtype": cpu_dtype})

    # ------------------------------------------------------------------ pricing
    def _sections(self, problem: Problem, device: str, dtype: str):
        """Seconds of the pre ops, of one layer, and of the post ops alone on ``device`` at ``dtype``."""
        model = problem.model.with_dtype(dtype)
        graph = build_step_graph(model, 1, problem.context, problem.batch)
        dev = problem.platform.device(device)
        bw = standalone_bw(problem.platform, device)
        secs = {}
        for section in ("pre", "layer", "post"):
            secs[section] = sum(price_op(op, dev, dtype, bw).timing.time_s * (1 if section == "layer" else op.count)
                                for op in graph.section(section))
        return graph, secs

    def _stream_times(self, problem: Problem, config: StrategyConfig):
        """The layer pipeline: (step seconds, compute seconds, load seconds of one layer per hop)."""
        device, R = config.device, config.option("resident_layers")
        dtype = problem.model.dtype
        _, secs = self._sections(problem, device, dtype)
        L = problem.model.n_layers
        hops = _hops(problem, device, config.option("source")) if R < L else []
        nbytes = layer_bytes(problem.model, dtype)
        hop_s = [h.transfer_s(nbytes) for h in hops]
        t = secs["pre"]
        comp_end = [0.0] * L
        hop_free = [0.0] * len(hops)
        for i in range(L):
            ready = t if i == 0 else comp_end[i - 1]
            if i >= R:
                # the buffer of layer i - STREAM_BUFFERS (if it was streamed) must be free
                j = i - STREAM_BUFFERS
                start = comp_end[j] if j >= R else 0.0
                for k, dur in enumerate(hop_s):
                    start = max(start, hop_free[k]) + dur
                    hop_free[k] = start
                ready = max(ready, start)
            comp_end[i] = ready + secs["layer"]
        total = comp_end[-1] + secs["post"]
        return total, secs["pre"] + L * secs["layer"] + secs["post"], hop_s

    def _split_times(self, problem: Problem, config: StrategyConfig):
        """(step seconds, device seconds, cpu seconds, transfer seconds) of the llama.cpp-style split."""
        device, R = config.device, config.option("resident_layers")
        cpu = problem.platform.cpu.name
        L = problem.model.n_layers
        _, dev_secs = self._sections(problem, device, problem.model.dtype)
        _, cpu_secs = self._sections(problem, cpu, config.option("cpu_dtype"))
        link = problem.platform.link(cpu, device)
        T = problem.batch
        hidden = DTYPE_BYTES[config.option("cpu_dtype")] * T * problem.model.hidden
        on_cpu = cpu_secs["pre"] + (L - R) * cpu_secs["layer"]
        on_dev = R * dev_secs["layer"] + dev_secs["post"]
        transfers = link.transfer_s(hidden) + link.transfer_s(LOGIT_BYTES * T * problem.model.vocab)
        return on_cpu + on_dev + transfers, on_dev, on_cpu, transfers

    def estimate(self, problem: Problem, config: StrategyConfig) -> Estimate:
        if config.option("mode") == "split":
            step, on_dev, on_cpu, transfers = self._split_times(problem, config)
            return Estimate(step_s=step, tokens_per_step=1.0, breakdown={"decode": on_dev, "cpu": on_cpu,
                                                                           "transfer": transfers})
        step, compute, hop_s = self._stream_times(problem, config)
        streamed = problem.model.n_layers - config.option("resident_layers")
        return Estimate(step_s=step, tokens_per_step=1.0,
                        breakdown={"decode": compute, "load": streamed * (max(hop_s) if hop_s else 0.0)})

    # ------------------------------------------------------------------ engine plan
    def plan(self, problem: Problem, config: StrategyConfig, rng: np.random.Generator | None = None,
             per_layer: bool = False) -> StepPlan:
        device, R = config.device, config.option("resident_layers")
        platform, L = problem.platform, problem.model.n_layers
        if config.option("mode") == "split":
            return self._split_plan(problem, config)
        dtype = problem.model.dtype
        graph = build_step_graph(problem.model, 1, problem.context, problem.batch)
        layer_ops = graph.section("layer")
        tasks: list[Task] = list(ops_tasks(graph.section("pre"), platform, device, dtype, "pre", "decode"))
        last = tasks[-1].name
        path = stream_path(problem, device, config.option("source")) if R < L else ()
        nbytes = layer_bytes(problem.model, dtype)
        layer_end: dict[int, str] = {}
        for i in range(L):
            deps = [last]
            if i >= R:
                j = i - STREAM_BUFFERS
                prev = (layer_end[j],) if j >= R else ()
                for k, (src, dst) in enumerate(zip(path, path[1:])):
                    t = transfer_task(platform, src, dst, nbytes, f"L{i}/load{k}", "load", deps=prev)
                    tasks.append(t)
                    prev = (t.name,)
                deps.append(prev[0])
            for op in layer_ops:
                name = f"L{i}/{op.name}"
                tasks.append(op_task(op, platform, device, dtype, name, "decode", deps, instances=1))
                deps = [name]
            last = layer_end[i] = tasks[-1].name
        tasks += ops_tasks(graph.section("post"), platform, device, dtype, "post", "decode", deps=(last,))
        return StepPlan(tasks=tuple(tasks), tokens_accepted=1, tokens_proposed=0, count_phase="decode",
                        count_device=device)

    def _split_plan(self, problem: Problem, config: StrategyConfig) -> StepPlan:
        device, R = config.device, config.option("resident_layers")
        platform, L = problem.platform, problem.model.n_layers
        cpu = platform.cpu.name
        cpu_model = problem.model.with_dtype(config.option("cpu_dtype"))
        g_cpu = build_step_graph(cpu_model, 1, problem.context, problem.batch)
        g_dev = build_step_graph(problem.model, 1, problem.context, problem.batch)
        tasks: list[Task] = list(ops_tasks(g_cpu.section("pre"), platform, cpu, g_cpu.dtype, "cpu/pre", "decode"))
        for op in g_cpu.section("layer"):
            if L - R:
                tasks.append(op_task(op, platform, cpu, g_cpu.dtype, f"cpu/{op.name}", "decode", (tasks[-1].name,),
                                     instances=L - R))
        hidden = DTYPE_BYTES[g_cpu.dtype] * problem.batch * problem.model.hidden
        tasks.append(transfer_task(platform, cpu, device, hidden, "to_device", deps=(tasks[-1].name,)))
        for op in g_dev.section("layer"):
            if R:
                tasks.append(op_task(op, platform, device, g_dev.dtype, f"dev/{op.name}", "decode", (tasks[-1].name,),
                                     instances=R))
        tasks += ops_tasks(g_dev.section("post"), platform, device, g_dev.dtype, "dev/post", "decode",
                           deps=(tasks[-1].name,))
        tasks.append(transfer_task(platform, device, cpu, LOGIT_BYTES * problem.batch * problem.model.vocab, "logits",
                                   deps=(tasks[-1].name,)))
        return StepPlan(tasks=tuple(tasks), tokens_accepted=1, tokens_proposed=0, count_phase="decode",
                        count_device=device)


STRATEGY = OffloadStrategy
