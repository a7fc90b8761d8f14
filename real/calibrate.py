"""``hetspec calibrate``: measure this host with torch micro-benchmarks and write the ``host`` platform.

The platform (preset format, :mod:`hwmodels.loader`) has

- ``cpu``: the whole CPU, torch's default thread count (what single-worker real runs use);
- ``cpu0`` .. ``cpu{N-1}``: one single-thread worker per core (the heterogeneous real path of
  issue 7 places work on these), all identical, so measured once with one thread;
- one memory domain ``dram`` holding every device (they share this machine's DRAM), whose
  ``contention_efficiency`` comes from two single-thread workers streaming at the same time;
- ``unified`` links between workers (a zero-copy hand-over whose latency is the measured
  thread hand-off).

Each number's ``source`` names what was measured, how (kernel, sizes, threads, median of how
many) and when, on which CPU: ``measured: 18.1 GB/s by hetspec calibrate (stream triad, 3 x 128
MiB arrays, 2 threads, median of 7) on AMD EPYC, 2025-01-01``. The raw measurements (the whole
GEMM table, bandwidth against working-set size, overhead probe, contention) are written next to
the platform as ``<name>.calibration.json`` for plots (``notebooks/host_calibration.ipynb``).

How the measurements enter the roofline (:mod:`hwmodels.roofline`):

- ``peak_tflops.fp32`` is the best GEMM rate measured and ``compute_efficiency`` is 1. Per token
  count M, ``gemm_efficiency_curve`` is the median over the weight shapes of the rate with the
  weight streamed from DRAM divided by that peak (a model larger than the cache), and
  ``cache_gemm_efficiency_curve`` the same with the weight resident in the cache (a model that
  fits it: :meth:`hwmodels.platform.Device.holds`). The curves are useful FLOP/s, so they already
  contain any quantization of M and ``token_tile`` is 1 (no second rounding).
- ``mem_bw_gbps`` is the triad bandwidth on a working set well beyond the last-level cache, and
  ``bw_efficiency`` 1 (the number is already achievable, not a datasheet peak); ``cache_gb`` /
  ``cache_bw_gbps`` describe the last-level cache (triad on a quarter of it).
- ``op_overhead_us`` is the fixed cost per step-graph operator of the real path's own forward
  (:func:`real.microbench.layer_overhead`): the real path issues several torch operators per
  step-graph operator (counted and reported), so a tiny ``torch.add`` alone would underestimate it.
- ``host_costs_us`` is the host-side work of HetSpec's decode loops beyond their forwards (inputs,
  masks, argmax, acceptance walk, cache compaction; dovetail: growing and reranking its tree), per
  method, per step / draft pass / verified token (:func:`fit_host_costs` on
  :func:`real.microbench.decode_loop_samples`; the dovetail loop runs drafter and verifier on the
  one worker the device stands for).
"""

from __future__ import annotations

import json
import math
import os
import platform as pyplatform
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from hwmodels.errors import HetSpecError
from hwmodels.loader import user_platform_dir, write_platform_file
from hwmodels.platform import Device, Link, MemoryDomain, Platform

#: File name of the calibrated platform in the user platform folder (``--platform host``).
HOST_NAME = "host"
#: Suffix of the raw-measurement file written next to the platform file.
RAW_SUFFIX = ".calibration.json"
#: Last-level cache assumed when the OS does not report one (sysfs): a typical desktop L3.
FALLBACK_LLC_BYTES = 32 * 2**20
#: Stream working set for DRAM bandwidth, in multiples of the last-level cache (STREAM's rule:
#: each array at least 4x the cache; three arrays of 4/3 x LLC... we take 8x LLC in total).
DRAM_WORKING_SET_LLC = 8
#: Pool of distinct GEMM weights for the cold (DRAM-streamed) rates, in multiples of the cache: each
#: weight is evicted long before it is used again.
COLD_POOL_LLC = 4
#: Stream working sets (MiB) probed for the *effective* cache: on a machine whose last-level cache
#: is shared with other cores or tenants, less of it is ours than the OS reports. Sizes from 2 MiB
#: (past a private L2) up to the reported last-level cache.
CACHE_PROBE_MIB = (2, 4, 6, 8, 12, 16, 24, 32, 48, 64)
#: Weights of at most this size give the in-cache GEMM curve (larger ones may not stay resident).
WARM_WEIGHT_MAX_BYTES = 4 * 2**20
#: Single-thread workers linked to one another by ``unified`` links (all pairs among the first
#: ones; a machine with hundreds of cores would otherwise get tens of thousands of links).
MAX_LINKED_WORKERS = 8
#: Calibrations older than this are stale for ``hetspec demo`` (it recalibrates).
FRESH_DAYS = 7


@dataclass(frozen=True)
class Settings:
    """How much to measure: sizes, repeats and warm-up of every benchmark."""

    m_values: tuple[int, ...]
    shapes: tuple[tuple[int, int], ...]       # (K, N) of the GEMM weights
    repeats: int
    warmup: int
    dram_working_set_bytes: int | None = None  # None: DRAM_WORKING_SET_LLC x the last-level cache
    cold_pool_bytes: int | None = None         # None: COLD_POOL_LLC x the last-level cache
    overhead_repeats: int = 9
    loop_repeats: int = 5
    label: str = "full"


#: Token counts 1..256 (the issue's range), dense where verification widths and draft lengths live
#: (the curve is read as a step function, and CPU GEMM kernels change path between small M: here
#: M = 2 runs slower per row than M = 3 or 4), and weight shapes around the demo and random-weight
#: models' layers (hidden 512-1024, MLP 1408-4096); 2048 x 2048 gives the peak.
FULL = Settings(m_values=(1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128, 192, 256),
                shapes=((512, 512), (512, 2048), (2048, 512), (1024, 1024), (2048, 2048)),
                repeats=7, warmup=2)
QUICK = Settings(m_values=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 256), shapes=((512, 512), (1024, 1024)),
                 repeats=5, warmup=1, overhead_repeats=5, loop_repeats=3, label="quick")


def settings_for(quick: bool) -> Settings:
    return QUICK if quick else FULL


# ---------------------------------------------------------------------------- host facts
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else :func:`platform.processor`)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return pyplatform.processor() or pyplatform.machine() or "unknown CPU"


def core_count() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def llc_bytes() -> tuple[int, str]:
    """Size of the last-level cache and where the number came from."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    best, where = 0, ""
    if base.is_dir():
        for index in sorted(base.glob("index*")):
            try:
                level = int((index / "level").read_text())
                text = (index / "size").read_text().strip()
            except (OSError, ValueError):
                continue
            units = {"K": 2**10, "M": 2**20, "G": 2**30}
            size = int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
            if level >= 2 and size > best:
                best, where = size, f"{index}/size = {text} (level {level})"
    if best:
        return best, where
    return FALLBACK_LLC_BYTES, f"assumed {FALLBACK_LLC_BYTES // 2**20} MiB (the OS reports no cache sizes)"


def physical_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        raise HetSpecError("cannot read this machine's memory size (os.sysconf)") from None


# ---------------------------------------------------------------------------- measurement
@dataclass(frozen=True)
class WorkerMeasurement:
    """Everything measured with one thread count."""

    threads: int
    gemm_warm: tuple              # real.microbench.GemmPoint rows, weights in the cache
    gemm_cold: tuple              # the same, weights streamed from DRAM
    peak_flops_per_s: float
    efficiency_curve: tuple[tuple[int, float], ...]        # cold: a model larger than the cache
    cache_efficiency_curve: tuple[tuple[int, float], ...]  # warm: a model resident in the cache
    dram_bw_bytes_per_s: float
    cache_bw_bytes_per_s: float
    cache_bytes: int              # effective cache: the largest working set still streaming from it
    cache_curve: tuple            # (working-set bytes, triad bytes/s) probed
    dispatch_s: float
    overhead: object              # real.microbench.LayerOverhead
    loops: tuple = ()             # real.microbench.LoopSample rows: the real decode loops on the probe
    streaming: object = None      # real.microbench.StreamingProbe: a step of a model larger than the cache


@dataclass(frozen=True)
class Calibration:
    cpu: str
    cores: int
    date: str
    settings: Settings
    llc_bytes: int
    llc_source: str
    memory_bytes: int
    dram_working_set_bytes: int
    cache_working_set_bytes: int
    all_threads: WorkerMeasurement
    one_thread: WorkerMeasurement
    concurrent_bw_bytes_per_s: tuple[float, ...]   # each of two single-thread workers, streaming together
    handoff_s: float
    torch_version: str
    seconds: float = 0.0
    command: str = "hetspec calibrate"
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        out = asdict(self)
        out["settings"] = asdict(self.settings)
        return out


def _efficiency_curve(points, peak: float, m_values) -> tuple[tuple[int, float], ...]:
    import statistics

    curve = []
    for m in m_values:
        rates = [p.flops_per_s for p in points if p.m == m]
        curve.append((m, round(min(statistics.median(rates) / peak, 1.0), 4)))
    return tuple(curve)


def effective_cache(curve, dram_bw: float) -> tuple[int, float]:
    """``(bytes, bytes/s)`` of the cache this process really gets: the largest probed working set whose
    triad bandwidth is above the geometric midpoint of the fastest one and DRAM's, and the median
    bandwidth of the working sets up to it (the first probe if none qualifies)."""
    import math
    import statistics

    if not curve:
        return 0, dram_bw
    top = max(bw for _, bw in curve)
    cut = math.sqrt(top * dram_bw)
    inside = [(ws, bw) for ws, bw in curve if bw >= cut]
    if not inside:
        return int(curve[0][0]), float(curve[0][1])
    size = max(ws for ws, _ in inside)
    return int(size), float(statistics.median(bw for ws, bw in curve if ws <= size))


def _in_fresh_process(fn, *args):
    """``fn(*args)`` in a new Python process (spawned, so it starts as a decode run does).

    The streaming probe times how a draft-sized model re-warms the cache after a step that streamed
    its weights out. In the process that has just run the GEMM and bandwidth benchmarks (gigabytes
    allocated and freed) the draft re-warmed within one pass (0.91-0.95 of the gap recovered, measured
    here), while in a fresh process -- and in the real decode loops -- it recovers about half of the
    gap over a round's next passes (0.49-0.51, measured here; the demo draft in the real chain loop:
    1.29, 1.12, 1.00, 0.88, 0.82 ms for its first passes after a verification, 0.43 ms warm), so the
    probe runs where the real path runs: in a process of its own.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def _measure_worker(threads: int, settings: Settings, dram_ws: int, cache_ws: int, cold_pool: int,
                    tick) -> WorkerMeasurement:
    from real import microbench as mb

    warm = mb.gemm_rates(settings.m_values, settings.shapes, threads, settings.repeats, settings.warmup,
                         progress=tick)
    cold = mb.gemm_rates(settings.m_values, settings.shapes, threads, settings.repeats, settings.warmup,
                         cold_pool_bytes=cold_pool, progress=tick)
    peak = max(p.flops_per_s for p in warm + cold)
    dram = mb.stream_bandwidth(dram_ws, threads, settings.repeats, settings.warmup)
    tick()
    cache_curve = tuple((mib * 2**20, mb.stream_bandwidth(mib * 2**20, threads, settings.repeats, settings.warmup))
                        for mib in CACHE_PROBE_MIB if mib * 2**20 <= max(cache_ws, 2 * 2**20))
    cache_bytes, cache = effective_cache(cache_curve, dram)
    tick()
    dispatch = mb.dispatch_overhead_s(threads, settings.repeats, settings.warmup)
    overhead = mb.layer_overhead(threads, settings.overhead_repeats, settings.warmup + 2)
    tick()
    loops = mb.decode_loop_samples(threads, settings.loop_repeats)
    tick()
    streaming = _in_fresh_process(mb.streaming_probe, threads, settings.overhead_repeats, settings.warmup + 1,
                                  llc_bytes()[0])
    tick()
    return WorkerMeasurement(threads=threads, gemm_warm=warm, gemm_cold=cold, peak_flops_per_s=peak,
                             efficiency_curve=_efficiency_curve(cold, peak, settings.m_values),
                             cache_efficiency_curve=_efficiency_curve(
                                 [p for p in warm if 4 * p.k * p.n <= WARM_WEIGHT_MAX_BYTES] or warm, peak,
                                 settings.m_values),
                             dram_bw_bytes_per_s=dram, cache_bw_bytes_per_s=cache, dispatch_s=dispatch,
                             cache_bytes=cache_bytes, cache_curve=cache_curve,
                             overhead=overhead, loops=loops, streaming=streaming)


def measure(settings: Settings, progress: bool = True, command: str = "hetspec calibrate") -> Calibration:
    """Run every micro-benchmark (with a progress bar) and return the measurements."""
    import torch
    from tqdm.auto import tqdm

    from real import microbench as mb

    t0 = time.perf_counter()
    all_threads = torch.get_num_threads()
    llc, llc_source = llc_bytes()
    dram_ws = settings.dram_working_set_bytes or DRAM_WORKING_SET_LLC * llc
    cache_ws = llc
    cold_pool = settings.cold_pool_bytes or COLD_POOL_LLC * llc
    gemm_ticks = 2 * len(settings.m_values) * len(settings.shapes)
    total = 2 * (gemm_ticks + 5) + 2
    with tqdm(total=total, desc="calibrate", unit="bench", disable=not progress, file=sys.stderr) as bar:
        def tick() -> None:
            bar.update(1)

        bar.set_postfix_str(f"{all_threads} threads")
        whole = _measure_worker(all_threads, settings, dram_ws, cache_ws, cold_pool, tick)
        bar.set_postfix_str("1 thread")
        single = whole if all_threads == 1 else _measure_worker(1, settings, dram_ws, cache_ws, cold_pool, tick)
        bar.set_postfix_str("contention")
        workers = 2 if core_count() >= 2 else 1
        together = mb.concurrent_stream(dram_ws, workers, settings.repeats, settings.warmup)
        tick()
        handoff = mb.handoff_latency_s(20 * settings.repeats, 10)
        tick()
    return Calibration(
        cpu=cpu_model(), cores=core_count(), date=time.strftime("%Y-%m-%d %H:%M"), settings=settings,
        llc_bytes=llc, llc_source=llc_source, memory_bytes=physical_memory_bytes(),
        dram_working_set_bytes=dram_ws, cache_working_set_bytes=cache_ws, all_threads=whole,
        one_thread=single, concurrent_bw_bytes_per_s=together, handoff_s=handoff,
        torch_version=torch.__version__, seconds=time.perf_counter() - t0, command=command)


# ---------------------------------------------------------------------------- the platform
def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.0f} MiB"


def _device(name: str, w: WorkerMeasurement, cal: Calibration, description: str) -> Device:
    s = cal.settings
    by = f"by {cal.command}"
    on = f"on {cal.cpu}, {cal.date}"
    thr = f"{w.threads} thread{'s' if w.threads > 1 else ''}"
    best = max(w.gemm_warm + w.gemm_cold, key=lambda p: p.flops_per_s)
    ov = w.overhead
    sources = {
        "peak_tflops.fp32": (f"measured: {w.peak_flops_per_s / 1e9:.1f} GFLOP/s {by} (best F.linear of M in "
                             f"{list(s.m_values)} x (K, N) in {[list(x) for x in s.shapes]}, reached at M={best.m}, "
                             f"K={best.k}, N={best.n}; {thr}, median of {s.repeats}) {on}"),
        "compute_efficiency": "1: peak_tflops is the measured best GEMM rate, so it is achievable by definition; "
                              "gemm_efficiency_curve gives the rate at each token count",
        "gemm_efficiency_curve": (f"measured {by}: per M, the median over (K, N) in {[list(x) for x in s.shapes]} "
                                  f"of the F.linear rate with the weight streamed from DRAM (a ring of distinct "
                                  f"weights totalling {COLD_POOL_LLC} x the last-level cache) divided by "
                                  f"peak_tflops ({thr}, median of {s.repeats}) {on}"),
        "cache_gemm_efficiency_curve": (f"measured {by}: as gemm_efficiency_curve with the weight resident in the "
                                        f"cache (the same weight every call; shapes of at most "
                                        f"{_mib(WARM_WEIGHT_MAX_BYTES)}) ({thr}, median of {s.repeats}) {on}"),
        "mem_bw_gbps": (f"measured: {w.dram_bw_bytes_per_s / 1e9:.1f} GB/s {by} (stream triad a = b + 3c, "
                        f"3 arrays totalling {_mib(cal.dram_working_set_bytes)} = {DRAM_WORKING_SET_LLC} x the "
                        f"last-level cache; {thr}, median of {s.repeats}) {on}"),
        "bw_efficiency": "1: mem_bw_gbps is the measured achievable stream bandwidth, not a datasheet peak",
        "cache_gb": (f"measured {by}: stream triad at working sets "
                     + ", ".join(f"{_mib(ws)} {bw / 1e9:.0f}" for ws, bw in w.cache_curve)
                     + f" GB/s (DRAM {w.dram_bw_bytes_per_s / 1e9:.0f}); the largest still above the geometric "
                       f"midpoint of the fastest and DRAM ({_mib(w.cache_bytes)}) is the cache this process gets "
                       f"(the OS reports {cal.llc_source}; {thr}, median of {s.repeats}) {on}"),
        "cache_bw_gbps": (f"measured: {w.cache_bw_bytes_per_s / 1e9:.1f} GB/s {by} (stream triad, median over the "
                          f"working sets up to the effective cache; {thr}, median of {s.repeats}) {on}"),
        "mem_capacity_gb": f"os.sysconf: {cal.memory_bytes / 1e9:.1f} GB of physical memory",
        "op_overhead_us": (f"measured: {ov.per_op_s * 1e6:.2f} us per step-graph operator {by}: the real path's "
                           f"forward (real/model.py at hidden {ov.hidden}, compute negligible, {ov.context} cached "
                           f"tokens; mean of a 1-token unmasked and a 2-token tree-masked step) costs "
                           f"{ov.per_layer_s * 1e6:.1f} us per layer + {ov.per_forward_s * 1e6:.1f} us per forward "
                           f"(fit over depths {ov.layers[0]} and {ov.layers[1]}); a {ov.reference_layers}-layer forward "
                           f"spread over its {ov.reference_layers * ov.graph_ops_per_layer + ov.graph_ops_outside} "
                           f"step-graph operators. The layer issues {ov.aten_ops_per_layer} torch operators for "
                           f"{ov.graph_ops_per_layer} step-graph ones, at {w.dispatch_s * 1e6:.2f} us of bare dispatch "
                           f"each (torch.add on 4 elements); the rest is Python module and argument handling ({thr}, "
                           f"{s.overhead_repeats} interleaved repeats) {on}"),
        "token_tile": "1: the measured gemm_efficiency_curve is useful FLOP/s at each token count, so any "
                      "rounding of M by the kernels is already in it",
        "sparse_attn_efficiency": "0: the real path computes tree attention densely (scaled_dot_product_attention "
                                  "with a boolean mask)",
        "cores": (f"{w.threads} of this machine's {cal.cores} cores (torch intra-op threads)"),
    }
    device = Device(
        name=name, kind="cpu", description=description,
        peak_tflops={"fp32": round(w.peak_flops_per_s / 1e12, 6)},
        mem_bw_gbps=round(w.dram_bw_bytes_per_s / 1e9, 3), mem_capacity_gb=round(cal.memory_bytes / 1e9, 3),
        bw_efficiency=1.0, compute_efficiency=1.0, op_overhead_us=round(ov.per_op_s * 1e6, 3),
        cache_op_overhead_us=round(ov.per_op_s * 1e6, 3), token_tile=1,
        sparse_attn_efficiency=0.0, cores=w.threads, gemm_efficiency_curve=w.efficiency_curve,
        cache_gemm_efficiency_curve=w.cache_efficiency_curve,
        cache_gb=round(w.cache_bytes / 1e9, 6), cache_bw_gbps=round(w.cache_bw_bytes_per_s / 1e9, 3),
        sources=sources)
    if w.streaming is not None:
        per_op, source = streaming_overhead(device, w.streaming, thr, s, by, on)
        probe = w.streaming
        rewarm_source = (f"measured {by}: a draft-sized random model (10 MB of weights) takes "
                         f"{probe.draft_warm_s * 1e3:.3f} ms per pass in a loop of its own, "
                         f"{probe.draft_cold_s * 1e3:.3f} ms for its first pass after a step of the streaming probe "
                         f"({probe.spec.weight_bytes() / 1e6:.0f} MB) and {probe.draft_later_s * 1e3:.3f} ms on average for "
                         f"the next ones: it recovers {probe.rewarm:.2f} of the cold-to-warm gap ({thr}, median of "
                         f"{s.overhead_repeats}) {on}")
        device = replace(device, op_overhead_us=round(per_op * 1e6, 3), cache_rewarm=round(probe.rewarm, 4),
                         sources={**device.sources, "op_overhead_us": source,
                                  "cache_op_overhead_us": sources["op_overhead_us"], "cache_rewarm": rewarm_source})
    if not w.loops:
        return device
    costs, cost_sources = fit_host_costs(device, w.loops, s, by, on)
    return replace(device, host_costs_us=costs, sources={**device.sources, **cost_sources})


def streaming_overhead(device: Device, probe, thr: str, settings: Settings, by: str, on: str) -> tuple[float, str]:
    """Fixed seconds per operator launch of a model whose weights stream from DRAM: the streaming
    probe's step minus the same step's GEMMs run alone (interleaved with it, so both see the same
    state of the machine), over the step's launches (mean of the one-token and the masked
    verification step). Small operators between weight streams find their data evicted, so they cost
    more than in the cache-resident probe; the GEMMs themselves are priced by the DRAM GEMM curve."""
    from sim.step_graph import build_step_graph

    spec = probe.spec
    launches = sum(op.launches * op.count for op in build_step_graph(spec, 1, probe.context).ops)
    rest = [(t - g) / launches for t, g in ((probe.unmasked_s, probe.gemm_unmasked_s),
                                             (probe.masked_s, probe.gemm_masked_s))]
    per_op = max(sum(rest) / len(rest), 0.0)
    source = (f"measured: {per_op * 1e6:.2f} us per step-graph operator {by}: a random-weight decoder larger than "
              f"the last-level cache ({spec.n_layers} layers, hidden {spec.hidden}, {spec.weight_bytes() / 1e6:.0f} MB "
              f"of fp32 weights) takes {probe.unmasked_s * 1e3:.2f} ms for one token and {probe.masked_s * 1e3:.2f} ms "
              f"for {probe.masked_tokens} under a tree mask, its GEMMs alone {probe.gemm_unmasked_s * 1e3:.2f} and "
              f"{probe.gemm_masked_s * 1e3:.2f} ms; the rest over its {launches} operators ({thr}, median of {settings.overhead_repeats}) {on}. "
              f"Models that fit the cache use cache_op_overhead_us")
    return per_op, source


#: Host costs fitted per method: which per-step counts explain the loop's time beyond its forwards.
#: (chain and draft-tree: passes and verified tokens move together, so the per-token part is folded
#: into the per-pass one; medusa has no draft passes.)
HOST_COST_TERMS = {"ar": ("step",), "chain": ("step", "pass"), "draft-tree": ("step", "pass"),
                   "medusa": ("step", "node"), "dovetail": ("step", "pass")}


def _model_price(device: Device, sample, context: int) -> float:
    """What the model prices for the forwards (and heads) of one probe decode step on ``device``."""
    from real.microbench import probe_specs
    from sim.closed_form import step_seconds
    from sim.strategies.base import Problem
    from sim.strategies.medusa import heads_seconds

    spec, draft = probe_specs()
    platform = Platform(name="probe", description="", devices={device.name: device})
    q = max(int(round(sample.nodes)), 1)
    price = float(step_seconds(spec, platform, device.name, q, context))
    if sample.method == "dovetail":       # the drafter's passes: the accepted tokens, then top-k per level
        from real.hetero.dovetail import DEFAULT_TOP_K
        from sim.strategies.dovetail import tree_draft_passes

        n0 = max(math.ceil(sample.tokens), 1)
        passes = tree_draft_passes(n0, int(round(sample.passes)) - 1, DEFAULT_TOP_K, context)
        return price + sum(float(step_seconds(draft, platform, device.name, p.tokens, p.context)) for p in passes)
    price += sample.passes * float(step_seconds(draft, platform, device.name, 1, context))
    if sample.heads:
        price += heads_seconds(Problem(model=spec, platform=platform), device.name, 1, sample.heads, batched=True)
    return price


def _nonneg_fit(xs, ys, terms: tuple[str, ...]) -> dict[str, float]:
    """Least squares ``y = a + b x`` (or ``y = a``) with a, b >= 0."""
    import numpy as np

    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    if len(terms) == 1 or np.ptp(xs) == 0:
        return {terms[0]: max(float(np.mean(ys)), 0.0)}
    b, a = np.polyfit(xs, ys, 1)
    if b < 0:
        return {terms[0]: max(float(np.mean(ys)), 0.0), terms[1]: 0.0}
    if a < 0:
        return {terms[0]: 0.0, terms[1]: max(float(np.dot(xs, ys) / np.dot(xs, xs)), 0.0)}
    return {terms[0]: float(a), terms[1]: float(b)}


def fit_host_costs(device: Device, loops, settings: Settings, by: str, on: str) -> tuple[dict, dict]:
    """``host_costs_us`` of ``device`` and their sources: per method, the probe loops' step time minus
    the model's price of their forwards and heads, fitted per step / per pass / per verified token."""
    from real.decode import ALL_DECODER_MODULES
    from real.microbench import LOOP_NEW_TOKENS, LOOP_PROMPT_TOKENS, PROBE_HIDDEN, REFERENCE_LAYERS

    context = LOOP_PROMPT_TOKENS + LOOP_NEW_TOKENS // 2
    costs, sources = {}, {}
    for method, terms in HOST_COST_TERMS.items():
        rows = [s for s in loops if s.method == method]
        if not rows:
            continue
        residual = [s.step_s - _model_price(device, s, context) for s in rows]
        x = [s.passes if "pass" in terms else s.nodes for s in rows]
        fitted = _nonneg_fit(x, residual, terms)
        knobs = ", ".join(str(s.knob) for s in rows) if method != "ar" else "-"
        for term, value in fitted.items():
            key = f"{method}_{term}"
            costs[key] = round(value * 1e6, 3)
            sources[f"host_costs_us.{key}"] = (
                f"measured {by}: HetSpec's {method} decode loop ({ALL_DECODER_MODULES[method][0]}) on probe models "
                f"(hidden {PROBE_HIDDEN}: "
                f"a {REFERENCE_LAYERS}-layer target, a 1-layer draft; configs {knobs}) costs "
                + ", ".join(f"{1e6 * s.step_s:.1f}" for s in rows)
                + " us per step; minus the model's price of its forwards and heads, the rest ("
                + ", ".join(f"{1e6 * r:.1f}" for r in residual)
                + f" us) is fitted as {' + '.join(terms)} (least squares, >= 0; median of {settings.loop_repeats}) {on}")
    return costs, sources


def build_platform(cal: Calibration, name: str = HOST_NAME) -> Platform:
    """The ``host`` platform of a calibration (see the module docstring)."""
    whole, single = cal.all_threads, cal.one_thread
    devices = {"cpu": _device("cpu", whole, cal, f"{cal.cpu}: all {whole.threads} torch threads")}
    workers = [f"cpu{i}" for i in range(cal.cores)]
    for w in workers:
        devices[w] = _device(w, single, cal, f"{cal.cpu}: one single-thread worker (identical to every cpuN; "
                                             "measured once)")
    domain_bw = max(whole.dram_bw_bytes_per_s, single.dram_bw_bytes_per_s)
    together = sum(cal.concurrent_bw_bytes_per_s)
    n_conc = len(cal.concurrent_bw_bytes_per_s)
    contention = min(together / domain_bw, 1.0) if n_conc > 1 else 1.0
    by, on = f"by {cal.command}", f"on {cal.cpu}, {cal.date}"
    rates = " + ".join(f"{r / 1e9:.1f}" for r in cal.concurrent_bw_bytes_per_s)
    domain = MemoryDomain(
        name="dram", devices=tuple(devices), description="this machine's DRAM, shared by every worker",
        bw_gbps=round(domain_bw / 1e9, 3), capacity_gb=round(cal.memory_bytes / 1e9, 3),
        contention_efficiency=round(max(contention, 0.01), 4),
        sources={
            "bw_gbps": f"measured: the larger of the all-thread and one-thread stream triad bandwidths {by} "
                       f"(see devices.cpu.mem_bw_gbps) {on}",
            "capacity_gb": f"os.sysconf: {cal.memory_bytes / 1e9:.1f} GB of physical memory",
            "contention_efficiency": (
                f"measured {by}: {n_conc} single-thread workers streaming at once (stream triad, "
                f"{_mib(cal.dram_working_set_bytes)} each, median of {cal.settings.repeats}) got {rates} = "
                f"{together / 1e9:.1f} GB/s together, vs {domain_bw / 1e9:.1f} GB/s for the whole CPU alone "
                f"(one worker alone: {single.dram_bw_bytes_per_s / 1e9:.1f} GB/s) {on}"
                if n_conc > 1 else "1: a single core has no second worker to contend with"),
        })
    linked = workers[:MAX_LINKED_WORKERS]
    links = tuple(
        Link(name=f"{a}-{b}", kind="unified", src=a, dst=b, description="zero-copy hand-over between worker threads",
             bw_gbps=round(domain_bw / 1e9, 3), latency_us=round(cal.handoff_s * 1e6, 3), efficiency=1.0,
             sources={
                 "bw_gbps": "zero-copy: the receiver reads the shared DRAM (dram.bw_gbps)",
                 "latency_us": (f"measured: {cal.handoff_s * 1e6:.1f} us {by} (threading.Event ping-pong between "
                                f"two Python threads, one-way = round trip / 2, median of "
                                f"{20 * cal.settings.repeats}) {on}"),
                 "efficiency": "1: a zero-copy hand-over moves no bytes; the reader's streaming is priced by the roofline",
             })
        for i, a in enumerate(linked) for b in linked[i + 1:])
    return Platform(name=name,
                    description=f"this machine, calibrated by {cal.command} on {cal.date}: {cal.cpu}, "
                                f"{cal.cores} cores, torch {cal.torch_version}",
                    devices=devices, links=links, memory_domains=(domain,))


def default_out() -> Path:
    return user_platform_dir() / f"{HOST_NAME}.toml"


def raw_path(platform_path: str | Path) -> Path:
    p = Path(platform_path)
    return p.with_name(p.stem + RAW_SUFFIX)


def write_calibration(cal: Calibration, out: str | Path) -> tuple[Platform, Path]:
    """Write the platform file and its raw measurements next to it; returns the reloaded platform."""
    from hwmodels.loader import load_platform_file

    out = Path(out)
    if out.suffix != ".toml":
        raise HetSpecError(f"--out {out}: a platform file ends in .toml")
    write_platform_file(build_platform(cal), out)
    raw_path(out).write_text(json.dumps(cal.to_json(), indent=1) + "\n")
    return load_platform_file(out), out


def calibrate(out: str | Path | None = None, quick: bool = False, progress: bool = True,
              settings: Settings | None = None) -> tuple[Platform, Path, Calibration]:
    """Measure this host and write ``out`` (default: ``host.toml`` in the user platform folder)."""
    out = Path(out) if out is not None else default_out()
    if out.suffix != ".toml":
        raise HetSpecError(f"--out {out}: a platform file ends in .toml")
    command = "hetspec calibrate" + (" --quick" if quick else "")
    cal = measure(settings or settings_for(quick), progress=progress, command=command)
    platform, path = write_calibration(cal, out)
    return platform, path, cal


def load_raw(platform_path: str | Path) -> dict:
    """The raw measurements written next to a calibrated platform file."""
    path = raw_path(platform_path)
    if not path.exists():
        raise HetSpecError(f"no calibration measurements at {path} (run `hetspec calibrate`)")
    return json.loads(path.read_text())


def calibration_age_days(platform_path: str | Path) -> float | None:
    """Days since the platform file was written (None if it does not exist)."""
    p = Path(platform_path)
    if not p.exists():
        return None
    return (time.time() - p.stat().st_mtime) / 86400.0


def busy_warnings(cal: Calibration) -> list[str]:
    """Signs that the machine was busy while calibrating: all threads measuring slower than one (a
    multi-threaded operator waits for its other threads whenever the scheduler takes their cores)."""
    whole, one = cal.all_threads, cal.one_thread
    if whole.threads == one.threads:
        return []
    out = []
    for label, a, b in (("GEMM peak", whole.peak_flops_per_s, one.peak_flops_per_s),
                        ("cache bandwidth", whole.cache_bw_bytes_per_s, one.cache_bw_bytes_per_s),
                        ("fixed cost per operator", one.overhead.per_op_s, whole.overhead.per_op_s)):
        if a < 0.5 * b:
            out.append(f"warning: {label} with {whole.threads} threads is less than half of one thread's: the machine "
                       "looks busy; calibrate again when it is idle (or use the single-thread workers cpu0, cpu1, ...)")
    return out


def summary_lines(platform: Platform, cal: Calibration) -> list[str]:
    """What the command prints: the key numbers of ``cpu`` and one worker."""
    cpu, w0 = platform.device("cpu"), platform.device("cpu0") if "cpu0" in platform.devices else None
    dom = platform.memory_domains[0]
    lines = [f"{cal.cpu}, {cal.cores} cores, last-level cache {cal.llc_bytes / 2**20:.0f} MiB, "
             f"calibrated in {cal.seconds:.0f} s"]
    for dev in (cpu, w0):
        if dev is None:
            continue
        curve = ", ".join(f"{m}: {e:.2f}" for m, e in dev.gemm_efficiency_curve)
        lines.append(f"  {dev.name:<5} ({dev.cores} thr)  GEMM peak {dev.peak_tflops['fp32'] * 1e3:.1f} GFLOP/s, "
                     f"DRAM {dev.mem_bw_gbps:.1f} GB/s, cache {dev.cache_bw_gbps:.1f} GB/s, "
                     f"{dev.op_overhead_us:.1f} us per operator")
        lines.append(f"        GEMM efficiency by M: {curve}")
    lines.append(f"  contention: two single-thread workers streaming together get "
                 f"{dom.contention_efficiency:.2f} of {dom.bw_gbps:.1f} GB/s")
    return lines + busy_warnings(cal)


# ---------------------------------------------------------------------------- for notebooks
#: A measurement of a few seconds (two token counts, small shapes) for when no host platform exists
#: yet, e.g. in the test suite: enough to draw the plots, not to validate with.
GLANCE = Settings(m_values=(1, 16, 64), shapes=((256, 256),), repeats=2, warmup=1,
                  dram_working_set_bytes=48 * 2**20, cold_pool_bytes=48 * 2**20, overhead_repeats=2, loop_repeats=1,
                  label="glance")


def host_calibration(platform_path: str | Path | None = None) -> tuple[Platform, dict, str]:
    """The calibrated host and its raw measurements, or, if there is none yet, a few-second
    :data:`GLANCE` measurement in a temporary folder. Returns ``(platform, raw, where)``."""
    import tempfile

    from hwmodels.loader import load_platform_file

    path = Path(platform_path) if platform_path is not None else default_out()
    if path.exists() and raw_path(path).exists():
        return load_platform_file(path), load_raw(path), str(path)
    tmp = Path(tempfile.mkdtemp(prefix="hetspec-glance-")) / f"{HOST_NAME}.toml"
    platform, path, _ = calibrate(tmp, progress=False, settings=GLANCE)
    return platform, load_raw(path), f"{path} (a quick glance: no calibrated host yet, run `hetspec calibrate`)"


def gemm_table(raw: dict):
    """Every GEMM measurement of a calibration as a DataFrame: threads, warm/cold, M, K, N, GFLOP/s,
    arithmetic intensity (FLOP per byte moved: activations in and out plus the weight, fp32)."""
    import pandas as pd

    rows = []
    for key in ("all_threads", "one_thread"):
        w = raw[key]
        for state in ("warm", "cold"):
            for p in w[f"gemm_{state}"]:
                nbytes = 4.0 * (p["m"] * p["k"] + p["m"] * p["n"] + p["k"] * p["n"])
                rows.append({"threads": w["threads"], "weights": "in cache" if state == "warm" else "from DRAM",
                             "m": p["m"], "k": p["k"], "n": p["n"], "gflops": p["flops_per_s"] / 1e9,
                             "intensity": 2.0 * p["m"] * p["k"] * p["n"] / nbytes})
    return pd.DataFrame(rows)
