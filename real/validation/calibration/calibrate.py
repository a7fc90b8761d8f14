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
MiB arrays, 2 threads, median of 7) on AMD EPYC, <date>``. The raw measurements (the whole
GEMM table, bandwidth against working-set size, overhead probe, contention) are written next to
the platform as ``<name>.calibration.json`` for plots (``notebooks/host_calibration.ipynb``, through
:mod:`real.validation.calibration.notebook_data`).

On a shared machine (docs/validation.md, "Calibration"): the benchmarks of each thread count run in
short interleaved rounds inside a time budget the code enforces (:mod:`real.validation.calibration.budget`),
medians over the rounds; the spread of each key quantity over the rounds is reported with the platform
(:func:`real.validation.trust.spread_problems`). A calibration is written whatever its spread, labelled
with it; ``strict`` refuses one whose spread is beyond the limit instead. The torch threads and the
OpenMP wait policy it ran with are recorded (``runtime``; each device's ``cores`` source).

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
- ``gemm_row_ns_curve``: per token count M, linears streaming their weight from DRAM are fitted
  over the (K, N) shapes as ``2 M K N / rate + N * row cost`` (:func:`fit_rows`): a small-M kernel
  reads the weight row by row, each row a short stream of its own, so narrow rows read slower (here
  a 384-wide weight at about half the rate of a 2048-wide one at M = 1). The streamed curve is the
  fit's row-free rate at every M where a start-up was fitted.
- ``batched_gemm_efficiency_curve`` and ``batched_gemm_row_ns_curve``: the same streamed fit for the
  batched GEMM HetSpec's Medusa heads run (``torch.matmul`` over stacked ``[4, N / 4, K]`` weights,
  :data:`ROUND_ITEMS` ``gemm_batched``), which walks its weight differently from ``F.linear`` over the
  same bytes; operators marked batched (:attr:`sim.step_graph.Op.batched`) are priced with them.
- ``mem_bw_gbps`` is the triad bandwidth on a working set well beyond the last-level cache, and
  ``bw_efficiency`` 1 (the number is already achievable, not a datasheet peak); ``cache_bw_gbps``
  is the triad bandwidth in the last-level cache; ``cache_gb`` the largest working set still read
  at cache speed: by the triad, and, where smaller, by linears cycling over the layers and LM head of
  growing draft-shaped models in one-token and in 16-token passes, the smaller of the two
  (:func:`real.validation.calibration.weight_cache.weight_cache_curve`; weights read once per step keep less of the
  cache than a triad's arrays, and multi-token passes less than one-token ones).
- ``op_overhead_us`` is the fixed cost per step-graph operator of the real path's own forward
  (:func:`real.validation.calibration.microbench.layer_overhead`): the real path issues several torch operators per
  step-graph operator (counted and reported), so a tiny ``torch.add`` alone would underestimate it.
- ``loop_costs`` (per device, not part of the hardware record) is the host-side work of HetSpec's decode loops
  beyond their forwards (inputs, masks, argmax, acceptance walk, cache compaction), per method, per step / draft
  pass / verified token (:func:`~real.validation.calibration.host_costs.fit_host_costs` on
  :func:`real.validation.calibration.microbench.decode_loop_samples`); with the heterogeneous probes also Dovetail's
  (growing and reranking its tree; :mod:`real.validation.calibration.dovetail_probe`: drafter and verifier on the
  one worker the device stands for) and the split step's.
- the ``storage`` link (:mod:`real.validation.calibration.host_hetero`): its latency from single tensor reads with the
  page cache dropped (:mod:`real.validation.calibration.storage_probe`), its bandwidth from the real loader's
  whole-layer reads and its ``host_share`` from a forward timed beside such reads
  (:mod:`real.validation.calibration.stream_probe`), which also gives the workers' ``stream_layer`` loop cost.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

from hwmodels import atomic_files
from hwmodels.errors import HetSpecError
from hwmodels.loader import user_platform_dir, write_platform_file
from hwmodels.platform import Platform
from real import openmp_label, openmp_runtime
from real.validation.calibration.gemm_rows import fit_rows, row_free
from real.validation.calibration.host_facts import (
    CACHE_PROBE_MIB,
    COLD_POOL_LLC,
    DRAM_WORKING_SET_LLC,
    HOST_NAME,
    WARM_WEIGHT_MAX_BYTES,
    Calibration,
    CalibrationProbes,
    Settings,
    WorkerMeasurement,
    effective_cache,
    llc_bytes,
    physical_memory_bytes,
    raw_path,
    settings_for,
)
from real.validation.calibration.budget import DEFAULT_BUDGET_S, QUICK_BUDGET_S, Budget, budgeted_rounds, fits
from real.validation.calibration.host_platform import build_platform
from real.validation.trust import SPREAD_KEYS, SPREAD_LIMIT, MachineChanged, spread, spread_problems
from sim.records.machine import cpu_model, usable_cores

#: Shares of the budget: the all-thread benchmarks' rounds, the one-thread benchmarks' rounds; what is left
#: goes to the streaming probes, contention, hand-off and the heterogeneous probes.
ALL_THREADS_SHARE = 0.4
ONE_THREAD_SHARE = 0.3
#: The heterogeneous probes (split step, dovetail loop, storage, streaming loop) run only while this share of
#: the budget is left; otherwise the platform has no hcmp or dovetail loop costs or storage link, and says so.
HETERO_SHARE = 0.15
#: The streaming probes' share of the progress bar, as of the time (12 of 57 s measuring, 2-core Intel Xeon VM).
STREAMING_SHARE = 0.2
#: A thread count's benchmarks in the first round's order: all but the last in interleaved rounds, the decode loops
#: after them in rounds of their own (the streaming probe, in a fresh process, runs once before, for every count).
ROUND_ITEMS = ("gemm_cache", "gemm_dram", "gemm_batched", "triad_dram", "triad_cache", "overhead", "loops")
LOOP_BLOCK_SHARE = 0.4   #: least budget share of the loops (last), timed after the rest: amid DRAM/GEMM they read slow
LOOP_ROUNDS = 3          #: loop rounds per benchmark round, while they fit: their forward costs are noisy differences


def _efficiency_curve(points, peak: float, m_values) -> tuple[tuple[int, float], ...]:
    curve = []
    for m in m_values:
        rates = [p.flops_per_s for p in points if p.m == m]
        curve.append((m, round(min(statistics.median(rates) / peak, 1.0), 4)))
    return tuple(curve)


def _in_fresh_process(fn, *args):
    """``fn(*args)`` in a new Python process (spawned, so it starts as a decode run does). The streaming probe times
    how a draft re-warms the cache after a step that streamed its weights out: in a process that has allocated and
    freed the benchmarks' gigabytes it re-warms within one pass, in a fresh one (as in the real decode loops) by
    about half the gap a pass, so it runs where the real path runs, in a process of its own."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def _interleaved_rounds(threads: int, settings: Settings, dram_ws: int, cache_ws: int, cold_pool,
                        tick, budget: Budget, fraction: float) -> dict:
    """The benchmarks of one thread count (:data:`ROUND_ITEMS`), ``settings.rounds`` times, interleaved inside
    ``fraction`` of ``budget`` (:func:`real.validation.calibration.budget.budgeted_rounds`: every round visits every
    benchmark, in an order rotated from round to round, so a slow moment of a shared machine hits them all alike;
    the first round always runs, further ones while they fit), each round with a share of a benchmark's repeats
    (:meth:`Settings.per_round`); the decode loops last, in up to :data:`LOOP_ROUNDS` x as many rounds of their own.
    Returns the medians over the rounds and, per key measurement (:data:`real.validation.trust.SPREAD_KEYS`), the
    spread max / min - 1 over the rounds (the median over a benchmark's points: GEMM shapes, working sets, loops)."""
    from real.run.repeats import median_index
    from real.validation.calibration import microbench as mb

    reps = settings.per_round(settings.repeats)
    cache_sizes = [mib * 2**20 for mib in CACHE_PROBE_MIB if mib * 2**20 <= max(cache_ws, 2 * 2**20)]

    def one(item: int, _round: int):
        name = ROUND_ITEMS[item]
        if name in ("gemm_cache", "gemm_dram"):     # ticks once per point
            return mb.gemm_rates(settings.m_values, settings.shapes, threads, reps, settings.warmup,
                                 cold_pool=cold_pool if name == "gemm_dram" else None, progress=tick)
        if name == "gemm_batched":
            return mb.gemm_rates(settings.batched_m_values, settings.batched_shapes, threads, reps, settings.warmup,
                                 cold_pool=cold_pool, progress=tick, heads=settings.batched_heads)
        if name == "triad_dram":
            out = mb.stream_bandwidth(dram_ws, threads, reps, settings.warmup)
        elif name == "triad_cache":
            out = tuple(mb.stream_bandwidth(ws, threads, reps, settings.warmup) for ws in cache_sizes)
        elif name == "overhead":
            out = (mb.dispatch_overhead_s(threads, reps, settings.warmup),
                   mb.layer_overhead(threads, settings.per_round(settings.overhead_repeats), settings.warmup + 2))
        else:
            out = mb.decode_loop_samples(threads, settings.per_round(settings.loop_repeats),
                                         new_tokens=settings.loop_new_tokens or mb.LOOP_NEW_TOKENS)
        tick()
        return out

    n, share, start = len(ROUND_ITEMS) - 1, budget.share(fraction), budget.clock()
    runs = budgeted_rounds(n, settings.rounds, one, budget, fraction * (1 - LOOP_BLOCK_SHARE), f"{threads} thread(s)")
    rest = max(share - (budget.clock() - start), 0.0) / budget.seconds    # the loops: what the others left
    runs += budgeted_rounds(1, LOOP_ROUNDS * settings.rounds, lambda _, j: one(n, j), budget, rest,
                            f"{threads} thread(s) decode loops")
    got = {name: runs[i] for i, name in enumerate(ROUND_ITEMS)}
    med = statistics.median

    def gemm(by_round):
        points = tuple(replace(p, seconds=(s := med(r[i].seconds for r in by_round)),
                               flops_per_s=2.0 * p.m * p.k * p.n / s) for i, p in enumerate(by_round[0]))
        return points, med(spread(r[i].flops_per_s for r in by_round) for i in range(len(points)))

    (warm, warm_spread), (cold, cold_spread), (batched, _) = (gemm(got[k]) for k in ROUND_ITEMS[:3])
    caches = got["triad_cache"]
    overheads = [o for _, o in got["overhead"]]
    loops = got["loops"]
    return {
        "gemm_warm": warm, "gemm_cold": cold, "gemm_batched": batched, "dram": med(got["triad_dram"]),
        "cache_curve": tuple((ws, med(r[i] for r in caches)) for i, ws in enumerate(cache_sizes)),
        "dispatch": med(d for d, _ in got["overhead"]),
        "overhead": overheads[median_index([o.per_op_s for o in overheads])],
        "loops": paired_loops(loops), "loop_rounds": len(loops),
        "spread": {} if len(got["overhead"]) < 2 else {key: round(value, 4) for key, value in (   # one round: none
            ("gemm_cache", warm_spread), ("gemm_dram", cold_spread), ("triad_dram", spread(got["triad_dram"])),
            ("triad_cache", med([spread(r[i] for r in caches) for i in range(len(cache_sizes))] or [0.0])),
            ("op_overhead", spread(o.per_op_s for o in overheads)),
            ("host_loops", med([spread(r[i].step_s for r in loops) for i in range(len(loops[0]))] or [0.0])))},
    }


def paired_loops(by_round) -> tuple:
    """The decode loops of ``by_round`` (per round, its :class:`LoopSample` s), each read against the ``ar`` loop
    of its round on its probe: ``ar``'s median step times the median over the rounds of loop / that round's ``ar``
    (step and host time alike), so that a loop and its baseline are read from the same moments of the machine."""
    med = statistics.median
    ar = [{s.shape: s.step_s for s in r if s.method == "ar"} for r in by_round]
    ar_med = {shape: med(a[shape] for a in ar) for shape in ar[0]}
    return tuple(replace(s, step_s=ar_med[s.shape] * med(r[i].step_s / a[s.shape] for r, a in zip(by_round, ar)),
                         host_s=ar_med[s.shape] * med(r[i].host_s / a[s.shape] for r, a in zip(by_round, ar)))
                 for i, s in enumerate(by_round[0]))


def _measure_worker(threads: int, settings: Settings, dram_ws: int, cache_ws: int, cold_pool, streaming,
                    tick, budget: Budget, fraction: float) -> WorkerMeasurement:
    from real.validation.calibration import microbench as mb

    rounds = _interleaved_rounds(threads, settings, dram_ws, cache_ws, cold_pool, tick, budget, fraction)
    warm, cold, batched = rounds["gemm_warm"], rounds["gemm_cold"], rounds["gemm_batched"]
    peak = max(p.flops_per_s for p in warm + cold)
    best = max(warm + cold, key=lambda p: p.flops_per_s)
    dtype_rates = mb.dtype_gemm_rates(best.m, best.k, best.n, threads, settings.repeats, settings.warmup,
                                      streamed_m=settings.dtype_m_values, streamed_shapes=settings.dtype_shapes,
                                      cold_pool=cold_pool, progress=tick)
    cache_bytes, cache = effective_cache(rounds["cache_curve"], rounds["dram"])
    fits, batched_fits = fit_rows(cold), fit_rows(batched)
    return WorkerMeasurement(threads=threads, gemm_warm=warm, gemm_cold=cold, peak_flops_per_s=peak,
                             efficiency_curve=row_free(_efficiency_curve(cold, peak, settings.m_values), fits, peak),
                             row_fits=fits, gemm_batched=batched, batched_fits=batched_fits,
                             batched_efficiency_curve=row_free(
                                 _efficiency_curve(batched, peak, settings.batched_m_values), batched_fits, peak),
                             cache_efficiency_curve=_efficiency_curve(
                                 [p for p in warm if 4 * p.k * p.n <= WARM_WEIGHT_MAX_BYTES] or warm, peak,
                                 settings.m_values),
                             dram_bw_bytes_per_s=rounds["dram"], cache_bw_bytes_per_s=cache,
                             dispatch_s=rounds["dispatch"], cache_bytes=cache_bytes, cache_curve=rounds["cache_curve"],
                             overhead=rounds["overhead"], loops=rounds["loops"], loop_rounds=rounds["loop_rounds"],
                             streaming=streaming, spread=rounds["spread"], dtype_rates=dtype_rates)


def _label(threads: int, all_threads: int) -> str:
    """How a check names a thread count, with the devices that run with it."""
    if threads > 1:
        return f"{threads} threads (cpu)"
    return "1 thread (cpu0, cpu1, ...)" if all_threads > 1 else "1 thread (cpu, cpu0)"


def measure(settings: Settings, progress: bool = True, command: str = "hetspec calibrate",
            budget: Budget | None = None, probes: CalibrationProbes | None = None) -> Calibration:
    """Run every micro-benchmark inside ``budget`` (with a progress bar) and return the measurements, with the
    spread of the interleaved rounds and how the budget was spent in ``robustness``, and the torch threads and
    OpenMP settings it ran with in ``runtime``. ``probes``: further probes whose measurements are kept in the
    record's ``extra`` (the heterogeneous ones, :mod:`real.validation.calibration.hetero_probes`), run while the
    budget leaves room for them."""
    import torch
    from tqdm.auto import tqdm

    from real.validation.calibration import microbench as mb
    from real.validation.calibration import weight_cache

    budget = budget or Budget(DEFAULT_BUDGET_S)
    budget.start()
    t0 = time.perf_counter()
    all_threads = torch.get_num_threads()
    llc, llc_source = llc_bytes()
    dram_ws = settings.dram_working_set_bytes or DRAM_WORKING_SET_LLC * llc
    cold_pool = mb.WeightPool(settings.cold_pool_bytes or COLD_POOL_LLC * llc)
    gemm_ticks = (2 * len(settings.m_values) * len(settings.shapes)
                  + len(settings.batched_m_values) * len(settings.batched_shapes))
    dtype_ticks = len(mb.LOW_PRECISION_DTYPES) * len(settings.dtype_m_values) * len(settings.dtype_shapes)
    counts = [all_threads] + ([1] if all_threads != 1 else [])
    rest = len(counts) * (settings.rounds * (gemm_ticks + len(ROUND_ITEMS) - 4 + LOOP_ROUNDS) + dtype_ticks) + 2
    total = rest + (streaming_ticks := max(1, round(rest * STREAMING_SHARE / (1 - STREAMING_SHARE))))
    runtime = {"torch_threads": all_threads, **openmp_runtime()}
    with tqdm(total=total, desc="calibrate", unit="bench", disable=not progress, file=sys.stderr) as bar:
        tick = partial(bar.update, 1)
        bar.set_postfix_str("streaming probe")
        streaming = _in_fresh_process(weight_cache.streaming_probes, counts, settings.overhead_repeats,
                                      settings.warmup + 1, llc)
        bar.update(streaming_ticks)
        bar.set_postfix_str(f"{all_threads} threads")
        whole = _measure_worker(all_threads, settings, dram_ws, llc, cold_pool, streaming[all_threads], tick,
                                budget, ALL_THREADS_SHARE)
        bar.set_postfix_str("1 thread")
        single = whole if all_threads == 1 else _measure_worker(1, settings, dram_ws, llc, cold_pool,
                                                                streaming[1], tick, budget, ONE_THREAD_SHARE)
        cold_pool.buffer = None           # the streamed GEMMs are done: free its gigabytes
        bar.set_postfix_str("contention")
        workers = 2 if usable_cores() >= 2 else 1
        # the working set split between the workers: together they stream it from DRAM as one triad does
        together = mb.concurrent_stream(dram_ws // workers, workers, settings.repeats, settings.warmup)
        tick()
        handoff = mb.handoff_latency_s(20 * settings.repeats, 10)
        tick()
        extra, skipped = {}, None
        if probes is None:
            skipped = ("no heterogeneous probes (split step, dovetail loop, storage, streaming loop) in this "
                       "calibration")
        elif fits(budget, HETERO_SHARE * budget.seconds):
            bar.set_postfix_str("split step, dovetail loop, storage, streaming loop")
            extra = probes.measure(settings)
        else:
            skipped = (f"the heterogeneous probes (split step, dovetail loop, storage, streaming loop) were skipped: "
                       f"{max(budget.left(), 0):.0f} s of the budget left")
        bar.update(max(0, total - bar.n))
    robustness = {
        "rounds": settings.rounds,
        "spread": {_label(w.threads, all_threads): w.spread for w in ((whole,) if single is whole else (whole, single))},
        "budget": {"seconds": budget.seconds, "spent_s": round(budget.spent(), 1),
                   "stages": [list(s) for s in budget.log], "skipped": skipped},
        "limits": {"spread": SPREAD_LIMIT},
    }
    return Calibration(
        cpu=cpu_model(), cores=usable_cores(), date=time.strftime("%Y-%m-%d %H:%M"), settings=settings,
        llc_bytes=llc, llc_source=llc_source, memory_bytes=physical_memory_bytes(),
        dram_working_set_bytes=dram_ws, cache_working_set_bytes=llc, all_threads=whole,
        one_thread=single, concurrent_bw_bytes_per_s=together, handoff_s=handoff,
        torch_version=torch.__version__, seconds=time.perf_counter() - t0, command=command,
        robustness=robustness, runtime=runtime, extra=extra)


def default_out() -> Path:
    return user_platform_dir() / f"{HOST_NAME}.toml"


def write_calibration(cal: Calibration, out: str | Path, probes: CalibrationProbes | None = None
                      ) -> tuple[Platform, Path]:
    """Write the platform file (with what ``probes``, the ones ``cal`` ran, add to it) and its raw measurements
    next to it; returns the reloaded platform. A calibration whose rounds spread beyond the limit says so in the
    platform's descriptions."""
    from hwmodels.loader import load_platform_file

    out = Path(out)
    if out.suffix != ".toml":
        raise HetSpecError(f"--out {out}: a platform file ends in .toml")
    platform = build_platform(cal, extend=probes.extend if probes is not None else None)
    label = cal.robustness.get("label")
    if label:
        platform = replace(platform, description=f"{platform.description}. {label}")
    write_platform_file(platform, out)
    atomic_files.write_text(raw_path(out),
                            json.dumps({**cal.to_json(), "record": calibration_record(cal)}, indent=1) + "\n")
    return load_platform_file(out), out


def calibration_record(cal: Calibration) -> dict:
    """The ``record`` of a calibration's raw measurements: its kind, a few headline figures and one line."""
    whole = cal.all_threads
    spreads = [s for w in (cal.robustness.get("spread") or {}).values() for s in w.values() if math.isfinite(s)]
    largest = max(spreads, default=0.0)
    figures = {"GEMM peak GFLOP/s": round(whole.peak_flops_per_s / 1e9, 1),
               "DRAM triad GB/s": round(whole.dram_bw_bytes_per_s / 1e9, 2),
               "fixed cost per operator us": round(whole.overhead.per_op_s * 1e6, 2),
               "largest spread %": round(100 * largest, 1) if spreads else None, "seconds": round(cal.seconds, 1)}
    label = cal.robustness.get("label")
    return {"kind": "calibrate", "headline": figures,
            "verdict": label or f"calibrated in {cal.seconds:.0f} s, " + (
                f"largest spread over the rounds {100 * largest:.0f} %" if spreads else "one round, no spread measured")}


def budget_for(quick: bool, seconds: float | None = None) -> Budget:
    """The time budget of ``hetspec calibrate`` (``--quick``), or ``seconds`` where given."""
    return Budget(seconds if seconds is not None else QUICK_BUDGET_S if quick else DEFAULT_BUDGET_S)


def calibrate(out: str | Path | None = None, quick: bool = False, progress: bool = True,
              settings: Settings | None = None, strict: bool = False,
              budget: Budget | None = None, probes: CalibrationProbes | None = None
              ) -> tuple[Platform, Path, Calibration]:
    """Measure this host inside ``budget`` (default :func:`budget_for`) and write ``out`` (default: ``host.toml``
    in the user platform folder); ``probes``: as :func:`measure` takes them.

    The calibration is written whatever its spread over the rounds, labelled with the quantities that spread
    beyond :data:`~real.validation.trust.SPREAD_LIMIT` (:func:`~real.validation.trust.spread_problems`);
    ``strict`` refuses such a calibration instead (:class:`~real.validation.trust.MachineChanged`, exit status 3)."""
    out = Path(out) if out is not None else default_out()
    if out.suffix != ".toml":
        raise HetSpecError(f"--out {out}: a platform file ends in .toml")
    command = "hetspec calibrate" + (" --quick" if quick else "") + (" --strict" if strict else "")
    settings = settings or settings_for(True)      # the full benchmark sizes are --profile's
    cal = measure(settings, progress=progress, command=command, budget=budget or budget_for(quick), probes=probes)
    problems = spread_problems(cal.robustness)
    what = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
    if problems and strict:
        raise MachineChanged(f"calibration not written (--strict): {what}")
    label = f"Measured on a noisy machine: {what}" if problems else None
    cal = replace(cal, robustness={**cal.robustness, "problems": problems, "label": label})
    platform, path = write_calibration(cal, out, probes)
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


def busy_warnings(cal: Calibration, platform: Platform | None = None) -> list[str]:
    """Signs that the machine was busy while calibrating: all threads measuring slower than one (a multi-threaded
    operator waits for its other threads whenever the scheduler takes their cores), in the benchmarks and in the
    fixed cost per operator of a streamed model that ``platform`` (written from them) prices."""
    whole, one = cal.all_threads, cal.one_thread
    cpus = {d.name: d for d in platform.devices_of_kind("cpu")} if platform is not None else {}
    worker = next((d for name, d in cpus.items() if name != "cpu"), None)      # a single-thread worker
    checks = [("GEMM peak", whole.peak_flops_per_s, one.peak_flops_per_s),
              ("cache bandwidth", whole.cache_bw_bytes_per_s, one.cache_bw_bytes_per_s),
              ("fixed cost per operator", one.overhead.per_op_s, whole.overhead.per_op_s)]
    if "cpu" in cpus and worker is not None:
        checks.append(("a streamed model's fixed cost per operator", worker.op_overhead_us, cpus["cpu"].op_overhead_us))
    return [f"warning: {label} with {whole.threads} threads is less than half of one thread's: the machine looks "
            "busy; calibrate again when it is idle (or use the single-thread workers cpu0, cpu1, ...)"
            for label, a, b in checks if whole.threads != one.threads and a < 0.5 * b]


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
                     f"{dev.op_overhead_us:.1f} us per operator"
                     + (f" ({dev.cache_loop_op_overhead_us:.1f} us in the cache, passes in a loop)"
                        if dev.cache_loop_op_overhead_us is not None else ""))
        lines.append(f"        GEMM efficiency by M: {curve}")
        held = f"weights held in the cache up to {dev.cache_gb * 1e3:.1f} MB" if dev.cache_gb else "no cache"
        if dev.gemv_cache_gb:
            held += f" ({dev.gemv_cache_gb * 1e3:.1f} MB in one-token passes)"
        rows = (", start-up per streamed weight row by M: " + ", ".join(f"{m}: {ns:.0f} ns" for m, ns in
                                                                     dev.gemm_row_ns_curve if ns > 0)
                if dev.gemm_row_ns_curve else "")
        lines.append(f"        {held}{rows}")
        if dev.batched_gemm_row_ns_curve:
            lines.append("        batched GEMM (Medusa heads) start-up per streamed row by M: " + ", ".join(
                f"{m}: {ns:.0f} ns" for m, ns in dev.batched_gemm_row_ns_curve if ns > 0))
    lines.append(f"  contention: two single-thread workers streaming together get "
                 f"{dom.contention_efficiency:.2f} of {dom.bw_gbps:.1f} GB/s")
    disk = next((l for l in platform.links if l.kind == "storage"), None)
    if disk is not None:
        resume = platform.loop_costs_us(w0.name).get("stream_layer") if w0 is not None else None
        lines.append(f"  storage: {disk.bw_gbps:.3f} GB/s, {disk.latency_us:.0f} us per read, a read in flight takes "
                     f"{100 * disk.host_share:.0f} % of the compute beside it"
                     + (f"; a streamed layer after its wait costs {resume:.0f} us more" if resume is not None else ""))
    return lines + robustness_lines(cal) + busy_warnings(cal, platform)


def robustness_lines(cal: Calibration) -> list[str]:
    """What the calibration saw of the machine: the largest spread over the rounds per thread count, how the
    budget was spent, the threads and OpenMP wait policy, and the label of a noisy calibration."""
    rob = cal.robustness
    if not rob:
        return []
    lines = [f"  spread over the interleaved rounds ({cal.runtime.get('torch_threads')} torch threads, "
             f"{openmp_label(cal.runtime)}):"]
    for label, spreads in rob.get("spread", {}).items():
        key = max(spreads, key=spreads.get) if spreads else None
        lines.append(f"    {label}: largest {100 * spreads[key]:.0f} % ({SPREAD_KEYS.get(key, key)})" if key else
                     f"    {label}: one round, no spread measured (the budget left no room for a second)")
    b = rob.get("budget")
    if b:
        parts = "; ".join(f"{stage}: {n} round{'s' if n != 1 else ''} in {s:.0f} s" for stage, n, s in b["stages"])
        lines.append(f"  budget: {b['spent_s']:.0f} s of {b['seconds']:.0f} s ({parts})")
        if b.get("skipped"):
            lines.append(f"  {b['skipped']}")
    if rob.get("label"):
        lines.append(f"  {rob['label']} (labelled, not refused; --strict refuses it)")
    return lines
