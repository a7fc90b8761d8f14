"""``hetspec calibrate``: measure this host with torch micro-benchmarks and write the ``host`` platform.

The platform (preset format, :mod:`hwmodels.loader`) has

- ``cpu``: the whole CPU, torch's default thread count (what single-worker real runs use);
- ``cpu0`` .. ``cpu{N-1}``: one single-thread worker per core (the heterogeneous real path places
  work on these), all identical, so measured once with one thread;
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
- ``peak_tflops.bf16`` / ``.fp16``: ``F.linear`` in that dtype at the shape of the fp32 peak, as
  torch runs it on this CPU (native bf16 where the CPU has it; fp16 is often converted or
  emulated, and its slow rate is the real one); a dtype torch cannot run is left out. The
  token-count curves are fp32's, applied to these peaks.
- ``mem_bw_gbps`` is the triad bandwidth on a working set well beyond the last-level cache, and
  ``bw_efficiency`` 1 (the number is already achievable, not a datasheet peak); ``cache_gb`` /
  ``cache_bw_gbps`` describe the last-level cache (triad on a quarter of it).
- ``op_overhead_us`` is the fixed cost per step-graph operator of the real path's own forward
  (:func:`real.validation.microbench.layer_overhead`): the real path issues several torch operators per
  step-graph operator (counted and reported), so a tiny ``torch.add`` alone would underestimate it.
- ``loop_costs`` (per device, not part of the hardware record) is the host-side work of HetSpec's decode loops beyond their forwards (inputs,
  masks, argmax, acceptance walk, cache compaction; dovetail: growing and reranking its tree), per
  method, per step / draft pass / verified token (:func:`fit_host_costs` on
  :func:`real.validation.microbench.decode_loop_samples`; the dovetail loop runs drafter and verifier on the
  one worker the device stands for).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

from hwmodels.errors import HetSpecError
from hwmodels.loader import user_platform_dir, write_platform_file
from hwmodels.platform import Platform
from real.validation.host_facts import (
    CACHE_PROBE_MIB,
    COLD_POOL_LLC,
    DRAM_WORKING_SET_LLC,
    HOST_NAME,
    RAW_SUFFIX,
    WARM_WEIGHT_MAX_BYTES,
    Calibration,
    Settings,
    WorkerMeasurement,
    core_count,
    cpu_model,
    llc_bytes,
    physical_memory_bytes,
    settings_for,
)
from real.validation.host_platform import build_platform


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
    from real.validation import microbench as mb

    warm = mb.gemm_rates(settings.m_values, settings.shapes, threads, settings.repeats, settings.warmup,
                         progress=tick)
    cold = mb.gemm_rates(settings.m_values, settings.shapes, threads, settings.repeats, settings.warmup,
                         cold_pool_bytes=cold_pool, progress=tick)
    peak = max(p.flops_per_s for p in warm + cold)
    best = max(warm + cold, key=lambda p: p.flops_per_s)
    dtype_rates = mb.dtype_gemm_rates(best.m, best.k, best.n, threads, settings.repeats, settings.warmup)
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
                             overhead=overhead, loops=loops, streaming=streaming, dtype_rates=dtype_rates)


def measure(settings: Settings, progress: bool = True, command: str = "hetspec calibrate") -> Calibration:
    """Run every micro-benchmark (with a progress bar) and return the measurements."""
    import torch
    from tqdm.auto import tqdm

    from real.validation import microbench as mb

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
