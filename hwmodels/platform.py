"""Devices, links, memory domains and platforms: plain frozen dataclasses.

Fields carry their unit in their name (``mem_bw_gbps``, ``op_overhead_us``); the ``*_per_s`` /
``*_s`` / ``*_bytes`` properties convert to SI for the timing code. Every number in a preset has
a source, kept in the ``sources`` mapping (field name -> source text).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hwmodels.errors import HetSpecError, UnknownNameError

DEVICE_KINDS = ("cpu", "gpu", "npu")
LINK_KINDS = ("pcie", "unified", "storage", "ethernet", "nvlink")
#: Link endpoint that stands for the platform's storage (weights streamed from disk/flash).
STORAGE = "storage"

GB = 1e9     # datasheets quote decimal gigabytes
TERA = 1e12
US = 1e-6
#: The ``[[tokens, value], ...]`` fields of a device (efficiencies, and the row costs among them).
CURVE_FIELDS = ("gemm_efficiency_curve", "cache_gemm_efficiency_curve", "gemm_row_ns_curve",
                "batched_gemm_efficiency_curve", "batched_gemm_row_ns_curve")
#: Those of them whose values are costs (ns >= 0), not efficiencies.
COST_CURVE_FIELDS = ("gemm_row_ns_curve", "batched_gemm_row_ns_curve")


def curve_at(curve: tuple[tuple[int, float], ...], tokens: int) -> float:
    """A ``[[tokens, value], ...]`` device curve read as a step function at ``tokens`` (below its first
    point: the first value)."""
    i = bisect.bisect_right([t for t, _ in curve], int(tokens)) - 1
    return curve[max(i, 0)][1]


@dataclass(frozen=True)
class Device:
    """A processing unit and the memory it reads.

    ``mem_bw_gbps`` is what the device can draw on its own; when it shares DRAM with others the
    :class:`MemoryDomain` caps what they draw together. ``compute_efficiency`` and
    ``bw_efficiency`` are the achievable fractions of the peaks for large GEMMs and streaming
    reads. ``token_tile`` quantizes the token (GEMM M) dimension: compute time is that of
    ``ceil(M / token_tile) * token_tile`` tokens, so latency rises in steps (wave / tile
    quantization; a vector unit's lane count on a CPU). ``sparse_attn_efficiency`` is the
    throughput of a tree-masked sparse attention kernel relative to the dense kernel, per useful
    FLOP (0 = the device has no sparse kernel and computes the dense block).
    ``gemm_efficiency_curve`` optionally replaces ``compute_efficiency`` with a measured
    efficiency per token count (from host calibration); it is read as a step function.

    Optional last-level cache (host calibration writes it): a model whose weights fit in
    ``cache_gb`` keeps them there from one step to the next, so its operators are priced
    *resident*: memory at ``cache_bw_gbps`` instead of the DRAM bandwidth, and compute at
    ``cache_gemm_efficiency_curve`` (GEMM rates measured with the weights in the cache) when given,
    and with ``cache_op_overhead_us`` per operator launch when given (small operators of a resident
    model find their data in the cache; a model streaming its weights evicts it between them).
    ``cache_loop_op_overhead_us`` (optional) replaces it for a resident model's passes when given: the
    fixed cost per operator of a cache-resident model of a draft's width run pass after pass, as a
    decode loop runs it (host calibration measures both: the bare ``cache_op_overhead_us`` on a forward
    too narrow to compute, this one on a draft-sized model, where the threads of multi-threaded operators
    sleep between them and the model's data leaves the cache between its passes); the bare one stays the
    reference of costs measured on the narrow forward (``hcmp``'s split step, the drift check).
    ``masked_overhead_factor`` (optional, > 0): the fixed costs of a forward of several new tokens under an
    attention mask (a verification, a prefill) relative to those of a one-token forward, which needs no mask
    (``ar``, a draft pass); every per-operator fixed cost above is a one-token pass's, and a masked pass
    multiplies it by this factor (host calibration times both passes of one probe, paired).
    ``cache_rewarm`` (fraction in [0, 1], default 1): how much of the cold-to-warm gap a small model
    recovers on each pass after a larger one evicted it from the cache (1 = fully warm from its second
    pass, as an LRU cache would; a cache shared with busy neighbours re-warms more slowly).
    ``cache_rewarm_keep`` (optional, fraction in [0, 1]): the same pass by pass, where measured: the share
    of the cold-to-warm gap a pass still pays is ``keep ** j`` on the ``j``-th pass after the eviction (the
    cache refills over several passes, not at once); it replaces ``cache_rewarm`` when given.
    ``gemv_cache_gb`` (optional, at least ``cache_gb``): the larger set one-token passes (GEMVs) keep in
    the cache; a pass that feeds more tokens keeps less (host calibration measures both: a one-token pass
    reads each weight row once and moves on, a many-token pass holds rows and activations longer), so
    ``cache_gb`` is the multi-token passes' set and :meth:`holds` takes the token count.
    Without these fields nothing is resident (every preset taken from datasheets and papers).

    Optional ``gemm_row_ns_curve`` (``[[tokens, ns], ...]``, a step function like the efficiency
    curve): the start-up nanoseconds per weight row (output feature) of a linear layer at that token
    count whose weight streams from memory, added to its compute time. A CPU GEMM kernel at small M
    reads the weight row by row, each row a short stream of its own that costs a start-up beyond its
    bytes (measured on this project's calibration host: ~140 ns per row at M = 1, so a 384-wide row
    streams at half the rate of a 2048-wide one). Host calibration fits it with the row-free rate at
    each M over weight shapes of several widths (:mod:`real.validation.calibrate`); the streamed
    ``gemm_efficiency_curve`` is then that row-free rate. Datasheet presets leave it out.

    Optional ``batched_gemm_efficiency_curve`` and ``batched_gemm_row_ns_curve``: the same two curves for
    a batched GEMM over stacked weights (``torch.matmul`` of ``[1, M, K]`` by ``[H, K, N/H]``, one launch
    for H weight matrices, as HetSpec's Medusa heads run), with the weight streamed from memory. Such a
    kernel walks its weight differently from a linear layer's (measured on this project's calibration
    host: ~35 ns per row at M = 1 where ``F.linear`` pays ~100), so operators marked ``batched``
    (:attr:`sim.step_graph.Op.batched`) are priced with these curves where they are given, else with the
    linear ones. Cache-resident batched GEMMs use ``cache_gemm_efficiency_curve``.

    Optional ``derived_peaks`` (dtype -> (source dtype, factor)): peaks that were not measured but are
    derived from a measured one, ``peak_tflops[dtype] = factor * peak_tflops[source]`` (host calibration
    measures fp32 GEMMs only, and prices fp16/bf16 from them). ``peak_tflops`` holds the derived values
    too (computed here), so every dtype prices the same way; ``measured_peaks`` leaves them out.

    Optional ``dtype_gemm_efficiency_curves`` (dtype -> ``[[tokens, efficiency], ...]``): a dtype's own
    streamed GEMM curve, the rate of a linear in that dtype with its weight streamed from memory over that
    dtype's peak, start-up of the weight rows included. A CPU's small-M kernels differ by dtype (a
    one-token bf16 product can run at memory speed while its peak is far from fp32's, an fp16 one
    converted to fp32 the reverse), so fp32's curve scaled by a dtype's peak misprices a decode step.
    Where a dtype has one, it replaces ``gemm_efficiency_curve`` and ``gemm_row_ns_curve`` for the
    streamed, non-batched linears of that dtype.
    """

    name: str
    kind: str
    peak_tflops: Mapping[str, float]
    mem_bw_gbps: float
    mem_capacity_gb: float
    bw_efficiency: float
    compute_efficiency: float
    op_overhead_us: float
    token_tile: int
    sparse_attn_efficiency: float
    cores: int | None = None
    gemm_efficiency_curve: tuple[tuple[int, float], ...] | None = None
    cache_gb: float | None = None
    gemv_cache_gb: float | None = None
    cache_bw_gbps: float | None = None
    cache_gemm_efficiency_curve: tuple[tuple[int, float], ...] | None = None
    cache_op_overhead_us: float | None = None
    cache_loop_op_overhead_us: float | None = None
    masked_overhead_factor: float | None = None
    cache_rewarm: float | None = None
    cache_rewarm_keep: float | None = None
    gemm_row_ns_curve: tuple[tuple[int, float], ...] | None = None
    batched_gemm_efficiency_curve: tuple[tuple[int, float], ...] | None = None
    batched_gemm_row_ns_curve: tuple[tuple[int, float], ...] | None = None
    derived_peaks: Mapping[str, tuple[str, float]] = field(default_factory=dict)
    dtype_gemm_efficiency_curves: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    #: How operators are timed: None = the roofline; a :class:`hwmodels.profile.DeviceTiming` (backend
    #: ``profiled``: a measured operator profile and an execution mode, priced by :mod:`sim.op_timing`).
    timing: Any = field(default=None, compare=False)
    description: str = ""
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in DEVICE_KINDS:
            raise HetSpecError(f"device {self.name}: kind {self.kind!r} unknown; valid: {', '.join(DEVICE_KINDS)}")
        if self.derived_peaks:
            peaks = dict(self.peak_tflops)
            for dtype, (source, factor) in self.derived_peaks.items():
                if source in self.derived_peaks or source not in peaks:
                    raise HetSpecError(f"device {self.name}: peak for {dtype} derives from {source!r}, which has no "
                                       f"measured peak; measured: {', '.join(self.measured_peaks) or '(none)'}")
                if not factor > 0:
                    raise HetSpecError(f"device {self.name}: derived peak factor for {dtype} must be > 0 (got {factor})")
                peaks[dtype] = float(factor) * peaks[source]
            object.__setattr__(self, "peak_tflops", peaks)
        for name in CURVE_FIELDS:
            if getattr(self, name) is not None:
                curve = tuple(sorted((int(t), float(e)) for t, e in getattr(self, name)))
                object.__setattr__(self, name, curve)
        if self.dtype_gemm_efficiency_curves:
            for dtype in self.dtype_gemm_efficiency_curves:
                if dtype not in self.peak_tflops:
                    raise HetSpecError(f"device {self.name}: dtype_gemm_efficiency_curve for {dtype!r}, which has "
                                       f"no peak; it has: {', '.join(self.peak_tflops)}")
            object.__setattr__(self, "dtype_gemm_efficiency_curves", {
                dt: tuple(sorted((int(t), float(e)) for t, e in c))
                for dt, c in self.dtype_gemm_efficiency_curves.items()})

    @property
    def mem_bw_bytes_per_s(self) -> float:
        return self.mem_bw_gbps * GB

    @property
    def mem_capacity_bytes(self) -> float:
        return self.mem_capacity_gb * GB

    @property
    def op_overhead_s(self) -> float:
        return self.op_overhead_us * US

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(self.peak_tflops)

    @property
    def measured_peaks(self) -> dict[str, float]:
        """The peaks that were measured or quoted (``peak_tflops`` without the derived ones)."""
        return {dt: v for dt, v in self.peak_tflops.items() if dt not in self.derived_peaks}

    def peak_flops_per_s(self, dtype: str) -> float:
        """Peak FLOP/s at ``dtype``; a dtype the device has no rate for is an error."""
        if dtype not in self.peak_tflops:
            raise HetSpecError(
                f"device {self.name} has no peak FLOP/s for dtype {dtype!r}; it has: {', '.join(self.peak_tflops)}"
            )
        return self.peak_tflops[dtype] * TERA

    def holds(self, nbytes: float, tokens: int | None = None) -> bool:
        """Whether a working set of ``nbytes`` stays resident in the device's last-level cache from one pass
        to the next: in one-token passes (``tokens`` 1) up to ``gemv_cache_gb`` where given, else (passes of
        more tokens, or ``tokens`` unknown) up to ``cache_gb``."""
        if self.cache_gb is None:
            return False
        limit = self.gemv_cache_gb if tokens == 1 and self.gemv_cache_gb is not None else self.cache_gb
        return nbytes <= limit * GB

    def overhead_s(self, resident: bool = False, masked_pass: bool = False) -> float:
        """Fixed seconds per operator launch (resident: ``cache_loop_op_overhead_us``, else
        ``cache_op_overhead_us``, when given), times ``masked_overhead_factor`` in a ``masked_pass`` (a forward
        of several new tokens per sequence)."""
        factor = self.masked_factor if masked_pass else 1.0
        if not resident:
            return self.op_overhead_s * factor
        if self.cache_loop_op_overhead_us is not None:
            return self.cache_loop_op_overhead_us * US * factor
        return self.bare_cache_overhead_s * factor

    @property
    def masked_factor(self) -> float:
        """``masked_overhead_factor``, 1 where not given."""
        return float(self.masked_overhead_factor) if self.masked_overhead_factor is not None else 1.0

    def rewarm_gap_share(self, j: int) -> float:
        """The share of the cold-to-warm gap a small model's ``j``-th pass after an eviction still pays
        (``j`` >= 1; the first pass, ``j`` = 0, is cold): ``cache_rewarm_keep ** j`` where measured pass by
        pass, else ``1 - cache_rewarm``, else 0 (warm from its second pass)."""
        if j <= 0:
            return 1.0
        if self.cache_rewarm_keep is not None:
            return float(self.cache_rewarm_keep) ** j
        if self.cache_rewarm is not None:
            return max(1.0 - float(self.cache_rewarm), 0.0)
        return 0.0

    @property
    def bare_cache_overhead_s(self) -> float:
        """Fixed seconds per operator of a resident forward too narrow to compute (``cache_op_overhead_us``;
        ``op_overhead_us`` without it): the reference of costs measured on such a forward."""
        return self.cache_op_overhead_us * US if self.cache_op_overhead_us is not None else self.op_overhead_s

    def own_dtype_curve(self, dtype: str | None, resident: bool = False,
                        batched: bool = False) -> tuple[tuple[int, float], ...] | None:
        """``dtype``'s own streamed GEMM curve where the device has one and the linear is streamed and not
        batched (``dtype_gemm_efficiency_curves``), else None."""
        if dtype is None or resident or batched:
            return None
        return self.dtype_gemm_efficiency_curves.get(dtype)

    def row_curve(self, batched: bool = False, dtype: str | None = None) -> tuple[tuple[int, float], ...] | None:
        """The row start-up curve of a streamed linear (``batched``: of a batched GEMM, where measured);
        None for a dtype with its own curve, whose rates include the rows' start-up."""
        if self.own_dtype_curve(dtype, batched=batched):
            return None
        if batched and self.batched_gemm_row_ns_curve is not None:
            return self.batched_gemm_row_ns_curve
        return self.gemm_row_ns_curve

    def efficiency_curve(self, resident: bool = False, batched: bool = False,
                         dtype: str | None = None) -> tuple[tuple[int, float], ...] | None:
        """The GEMM efficiency curve by token count: in the cache where ``resident`` (and measured there),
        else streamed: ``dtype``'s own where measured, of a batched GEMM where ``batched`` (and measured),
        else the fp32 linears'."""
        if resident and self.cache_gemm_efficiency_curve:
            return self.cache_gemm_efficiency_curve
        own = self.own_dtype_curve(dtype, resident, batched)
        if own:
            return own
        if batched and self.batched_gemm_efficiency_curve:
            return self.batched_gemm_efficiency_curve
        return self.gemm_efficiency_curve

    def row_start_s(self, tokens: int | None, rows: int, resident: bool = False, batched: bool = False,
                    dtype: str | None = None) -> float:
        """Start-up seconds of the ``rows`` weight rows of a linear at ``tokens`` tokens whose weight streams
        from memory (``gemm_row_ns_curve``; ``batched_gemm_row_ns_curve`` for a batched GEMM where given); 0
        without the curve, in the cache, without a token count, or for a dtype with its own curve."""
        curve = self.row_curve(batched, dtype)
        if not curve or resident or not tokens or not rows:
            return 0.0
        return rows * curve_at(curve, tokens) * 1e-9

    def resident_bw_bytes_per_s(self) -> float | None:
        """Bytes/s of a cache-resident working set (None without a measured cache bandwidth)."""
        return self.cache_bw_gbps * GB if self.cache_bw_gbps is not None else None

    def compute_efficiency_at(self, tokens: int, resident: bool = False, batched: bool = False,
                              dtype: str | None = None) -> float:
        """Achievable fraction of peak for a GEMM with ``tokens`` rows (weights in the cache if ``resident``;
        a batched GEMM over stacked weights if ``batched``; in ``dtype``, whose own curve is used where the
        device has one)."""
        curve = self.efficiency_curve(resident, batched, dtype)
        if not curve:
            return self.compute_efficiency
        return curve_at(curve, max(int(tokens), 1))


@dataclass(frozen=True)
class Link:
    """A path that moves bytes: PCIe, unified-memory page sync, storage read, Ethernet, NVLink.

    Optional ``host_share`` (in [0, 1), default 0): the share of the receiving device's compute that a
    transfer in flight takes away (a CPU reading from a disk through the kernel loses part of every core
    to the read; a DMA engine takes none). Compute beside a transfer runs at ``1 - host_share`` of its speed.
    """

    name: str
    kind: str
    src: str
    dst: str
    bw_gbps: float
    latency_us: float
    efficiency: float
    description: str = ""
    host_share: float = 0.0
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def bw_bytes_per_s(self) -> float:
        return self.bw_gbps * GB

    @property
    def latency_s(self) -> float:
        return self.latency_us * US

    def transfer_s(self, nbytes: float) -> float:
        """Latency plus bytes over the achievable bandwidth (0 bytes costs nothing)."""
        if nbytes <= 0:
            return 0.0
        return self.latency_s + nbytes / (self.bw_bytes_per_s * self.efficiency)

    def connects(self, a: str, b: str) -> bool:
        return {self.src, self.dst} == {a, b}


@dataclass(frozen=True)
class MemoryDomain:
    """Devices that share one DRAM and therefore its bandwidth.

    Alone, a device streams at ``min(device bw * bw_efficiency, domain bw * bw_efficiency)``.
    When several stream at the same time, together they get at most
    ``bw_gbps * contention_efficiency`` (row-buffer and arbitration losses make the shared
    ceiling lower than the sum of the parts).
    """

    name: str
    devices: tuple[str, ...]
    bw_gbps: float
    capacity_gb: float
    contention_efficiency: float
    description: str = ""
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def bw_bytes_per_s(self) -> float:
        return self.bw_gbps * GB


@dataclass(frozen=True)
class LoopCosts:
    """Host-side work of HetSpec's real decode loops on one device of a calibrated machine.

    Not a property of the hardware but a calibration of the software that runs on it (``hetspec
    calibrate`` fits it; presets have none): per method, microseconds per decode step
    (``<method>_step``), per draft pass (``<method>_pass``) and per verified token
    (``<method>_node``) beyond the forwards the roofline prices (building inputs and masks, argmax,
    the acceptance walk, cache compaction, a tree grown in Python); ``<method>_forward_<term>``
    (:data:`FORWARD_COST`): what the loop's forwards took beyond the roofline's price of them. The
    strategies price it through :func:`sim.strategies.base.host_seconds`; absent keys cost nothing. A
    step split over two worker threads (``hcmp``) also has costs per synchronisation point
    (``<method>_sync``) and per decoder layer (``<method>_layer``; :mod:`sim.strategies.hcmp` reads them).

    The work grows with the model's width, so a calibration measures the loops on two probes: ``costs_us`` on
    one whose LM head has ``lm_head`` weights (vocabulary x hidden), ``narrow_us`` on one of ``narrow_lm_head``.
    """

    device: str
    costs_us: Mapping[str, float]
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    lm_head: float | None = None
    narrow_us: Mapping[str, float] = field(default_factory=dict)
    narrow_lm_head: float | None = None

    def __post_init__(self) -> None:
        for key, value in [*self.costs_us.items(), *self.narrow_us.items()]:
            if key.rsplit("_", 1)[-1] not in LOOP_COST_TERMS:
                raise HetSpecError(f"loop cost {key!r} of {self.device}: keys are <method>_<term>, term one of "
                                   f"{', '.join(LOOP_COST_TERMS)}")
            if not value >= 0:
                raise HetSpecError(f"loop cost {key} of {self.device} must be >= 0 (got {value})")
        if self.narrow_us and not (self.lm_head and self.narrow_lm_head and self.narrow_lm_head < self.lm_head):
            raise HetSpecError(f"loop costs of {self.device}: a narrow probe's costs need both probes' LM-head "
                               f"sizes, the narrow one smaller (got {self.narrow_lm_head} and {self.lm_head})")

    def costs_for(self, lm_head: float | None = None) -> Mapping[str, float]:
        """The costs of a model whose LM head has ``lm_head`` weights: linear in its log between the probes, held
        at the nearer outside them (one probe, or ``lm_head`` None: the wide probe's)."""
        if not self.narrow_us or lm_head is None:
            return self.costs_us
        lo, hi = math.log(self.narrow_lm_head), math.log(self.lm_head)
        t = min(max((math.log(max(lm_head, 1.0)) - lo) / (hi - lo), 0.0), 1.0)
        return {k: v if k not in self.narrow_us else self.narrow_us[k] + t * (v - self.narrow_us[k])
                for k, v in self.costs_us.items()}


#: The counts a loop cost is charged by: per step, draft pass, verified token, synchronisation point, layer.
LOOP_COST_TERMS = ("step", "pass", "node", "sync", "layer")
#: Infix of the loop costs that are a loop's traced forwards beyond the roofline's price of them
#: (``draft-tree_forward_pass``).
FORWARD_COST = "_forward_"


@dataclass(frozen=True)
class Platform:
    name: str
    description: str
    devices: Mapping[str, Device]
    links: tuple[Link, ...] = ()
    memory_domains: tuple[MemoryDomain, ...] = ()
    path: str = ""
    loop_costs: Mapping[str, LoopCosts] = field(default_factory=dict)   # device -> its calibrated loop costs

    def loop_costs_us(self, device: str, lm_head: float | None = None) -> Mapping[str, float]:
        """The calibrated decode-loop costs of ``device`` (empty where the platform has none), for a model whose
        LM head has ``lm_head`` weights (:meth:`LoopCosts.costs_for`; None: as the probe measured them)."""
        costs = self.loop_costs.get(device)
        return costs.costs_for(lm_head) if costs is not None else {}

    def with_device(self, device: Device) -> Platform:
        """This platform with ``device`` in place of its device of the same name."""
        self.device(device.name)
        return replace(self, devices={**self.devices, device.name: device})

    def device(self, name: str) -> Device:
        try:
            return self.devices[name]
        except KeyError:
            raise UnknownNameError(f"device on platform {self.name}:", name, self.devices) from None

    def devices_of_kind(self, kind: str) -> tuple[Device, ...]:
        return tuple(d for d in self.devices.values() if d.kind == kind)

    @property
    def accelerator(self) -> Device:
        """The default device to run on: the first GPU, else the first NPU, else the first CPU."""
        for kind in ("gpu", "npu", "cpu"):
            found = self.devices_of_kind(kind)
            if found:
                return found[0]
        raise HetSpecError(f"platform {self.name} has no devices")

    @property
    def cpu(self) -> Device | None:
        found = self.devices_of_kind("cpu")
        return found[0] if found else None

    def link(self, a: str, b: str, kind: str | None = None) -> Link:
        """The link between endpoints ``a`` and ``b`` (optionally of one kind)."""
        for link in self.links:
            if link.connects(a, b) and (kind is None or link.kind == kind):
                return link
        want = f" of kind {kind}" if kind else ""
        raise HetSpecError(f"platform {self.name} has no link{want} between {a} and {b}")

    def has_link(self, a: str, b: str, kind: str | None = None) -> bool:
        return any(l.connects(a, b) and (kind is None or l.kind == kind) for l in self.links)

    def storage_link(self, device: str) -> Link | None:
        for link in self.links:
            if link.kind == "storage" and link.connects(STORAGE, device):
                return link
        return None

    def domain_of(self, device: str) -> MemoryDomain | None:
        for domain in self.memory_domains:
            if device in domain.devices:
                return domain
        return None

    def shares_memory(self, a: str, b: str) -> bool:
        d = self.domain_of(a)
        return d is not None and b in d.devices
