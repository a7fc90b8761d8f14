"""The ``host`` platform built from a calibration: one device for the whole CPU, one per
single-thread worker, the shared DRAM domain and the hand-over links between workers."""

from __future__ import annotations

from dataclasses import replace

from hwmodels.platform import Device, Link, MemoryDomain, Platform
from real import openmp_label
from real.validation.calibration.gemm_rows import row_curve
from real.validation.calibration.host_costs import loop_costs_of
from real.validation.calibration.host_facts import (
    COLD_POOL_LLC,
    DRAM_WORKING_SET_LLC,
    HOST_NAME,
    MAX_LINKED_WORKERS,
    WARM_WEIGHT_MAX_BYTES,
    Calibration,
    Settings,
    WorkerMeasurement,
)


# ---------------------------------------------------------------------------- the platform
def _median(xs) -> float:
    import statistics

    return statistics.median(list(xs))


def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.3g} MiB"


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
                             f"K={best.k}, N={best.n}; {thr}, {s.medians(s.repeats)}) {on}"),
        "compute_efficiency": "1: peak_tflops is the measured best GEMM rate, so it is achievable by definition; "
                              "gemm_efficiency_curve gives the rate at each token count",
        "gemm_efficiency_curve": (f"measured {by}: per M, the median over (K, N) in {[list(x) for x in s.shapes]} "
                                  f"of the F.linear rate with the weight streamed from DRAM (a ring of distinct "
                                  f"weights totalling {COLD_POOL_LLC} x the last-level cache) divided by "
                                  f"peak_tflops ({thr}, {s.medians(s.repeats)}) {on}"
                                  + ("; where gemm_row_ns_curve has a start-up, the row-free rate of its fit"
                                     if w.row_fits else "")),
        "cache_gemm_efficiency_curve": (f"measured {by}: as gemm_efficiency_curve with the weight resident in the "
                                        f"cache (the same weight every call; shapes of at most "
                                        f"{_mib(WARM_WEIGHT_MAX_BYTES)}) ({thr}, {s.medians(s.repeats)}) {on}"),
        "mem_bw_gbps": (f"measured: {w.dram_bw_bytes_per_s / 1e9:.1f} GB/s {by} (stream triad a = b + 3c, "
                        f"3 arrays totalling {_mib(cal.dram_working_set_bytes)} = {DRAM_WORKING_SET_LLC} x the "
                        f"last-level cache; {thr}, {s.medians(s.repeats)}) {on}"),
        "bw_efficiency": "1: mem_bw_gbps is the measured achievable stream bandwidth, not a datasheet peak",
        "cache_gb": (f"measured {by}: stream triad at working sets "
                     + ", ".join(f"{_mib(ws)} {bw / 1e9:.0f}" for ws, bw in w.cache_curve)
                     + f" GB/s (DRAM {w.dram_bw_bytes_per_s / 1e9:.0f}); where it falls through the geometric mean of "
                       f"the fastest and DRAM ({_mib(w.cache_bytes)}, log-log between sets) is this process's cache "
                       f"(the OS reports {cal.llc_source}; {thr}, {s.medians(s.repeats)}) {on}"),
        "cache_bw_gbps": (f"measured: {w.cache_bw_bytes_per_s / 1e9:.1f} GB/s {by} (stream triad, median over the "
                          f"working sets up to the effective cache; {thr}, {s.medians(s.repeats)}) {on}"),
        "mem_capacity_gb": f"os.sysconf: {cal.memory_bytes / 1e9:.1f} GB of physical memory",
        "op_overhead_us": (f"measured: {ov.per_op_s * 1e6:.2f} us per step-graph operator {by}: the real path's "
                           f"one-token forward (real/model/transformer.py at hidden {ov.hidden}, compute negligible, "
                           f"{ov.context} cached tokens, no mask) costs {ov.per_layer_s * 1e6:.1f} us per layer + "
                           f"{ov.per_forward_s * 1e6:.1f} us per forward (fit over depths {ov.layers[0]} and "
                           f"{ov.layers[1]}); a {ov.reference_layers}-layer forward spread over its "
                           f"{ov.reference_layers * ov.graph_ops_per_layer + ov.graph_ops_outside} "
                           f"step-graph operators. The layer issues {ov.aten_ops_per_layer} torch operators for "
                           f"{ov.graph_ops_per_layer} step-graph ones, at {w.dispatch_s * 1e6:.2f} us of bare dispatch "
                           f"each (torch.add on 4 elements); the rest is Python module and argument handling ({thr}, "
                           f"{s.medians(s.overhead_repeats)} interleaved repeats) {on}"),
        "masked_overhead_factor": (f"measured {by}: the same probe's two-token step under a tree mask (a "
                                   f"verification) over its one-token step, at {ov.reference_layers} layers: "
                                   f"{ov.masked_factor:.3f}, the median of the ratios of the two timed back to back "
                                   f"(masked fit {ov.per_layer_masked_s * 1e6:.1f} us per layer + "
                                   f"{ov.per_forward_masked_s * 1e6:.1f} us per forward; {thr}, "
                                   f"{s.medians(s.overhead_repeats)} interleaved repeats) {on}"),
        "token_tile": "1: the measured gemm_efficiency_curve is useful FLOP/s at each token count, so any "
                      "rounding of M by the kernels is already in it",
        "sparse_attn_efficiency": "0: the real path computes tree attention densely (scaled_dot_product_attention "
                                  "with a boolean mask)",
        "cores": (f"{w.threads} of this machine's {cal.cores} cores: the torch intra-op threads set for the "
                  f"calibration and for the real runs priced on this device; {openmp_label(cal.runtime or {})}"),
    }
    peaks, derived, dtype_curves = _low_precision_peaks(w, sources, thr, s, by, on)
    device = Device(
        name=name, kind="cpu", description=description,
        peak_tflops={"fp32": round(w.peak_flops_per_s / 1e12, 6), **peaks}, derived_peaks=derived,
        dtype_gemm_efficiency_curves=dtype_curves,
        mem_bw_gbps=round(w.dram_bw_bytes_per_s / 1e9, 3), mem_capacity_gb=round(cal.memory_bytes / 1e9, 3),
        bw_efficiency=1.0, compute_efficiency=1.0, op_overhead_us=round(ov.per_op_s * 1e6, 3),
        cache_op_overhead_us=round(ov.per_op_s * 1e6, 3), masked_overhead_factor=round(ov.masked_factor, 4),
        token_tile=1,
        sparse_attn_efficiency=0.0, cores=w.threads, gemm_efficiency_curve=w.efficiency_curve,
        cache_gemm_efficiency_curve=w.cache_efficiency_curve,
        cache_gb=round(w.cache_bytes / 1e9, 6), cache_bw_gbps=round(w.cache_bw_bytes_per_s / 1e9, 3),
        sources=sources)
    if w.row_fits:
        fits = w.row_fits
        sources["gemm_row_ns_curve"] = (
            f"measured {by}: per M, the F.linear times with the weight streamed from DRAM over the (K, N) shapes "
            f"{[list(x) for x in s.shapes]} {_row_fit_text(fits, thr, s, on)}")
        device = replace(device, gemm_row_ns_curve=row_curve(fits, s.m_values), sources=sources)
    if w.batched_efficiency_curve:
        device = _with_batched(device, w, s, sources, thr, by, on)
    if w.streaming is not None:
        per_op, source = streaming_overhead(device, w.streaming, thr, s, by, on)
        probe = w.streaming
        rewarm_source = (f"measured {by}: a draft-sized random model (10 MB of weights) takes "
                         f"{probe.draft_warm_s * 1e3:.3f} ms per pass in a loop of its own, "
                         f"{probe.draft_cold_s * 1e3:.3f} ms for its first pass after a {probe.masked_tokens}-token step "
                         f"of the streaming probe "
                         f"({probe.spec.weight_bytes() / 1e6:.0f} MB) and {probe.draft_later_s * 1e3:.3f} ms on average for "
                         f"the next ones: it recovers {probe.rewarm:.2f} of the cold-to-warm gap ({thr}, median of "
                         f"{s.overhead_repeats}) {on}")
        device = replace(device, op_overhead_us=round(per_op * 1e6, 3), cache_rewarm=round(probe.rewarm, 4),
                         sources={**device.sources, "op_overhead_us": source,
                                  "cache_op_overhead_us": sources["op_overhead_us"], "cache_rewarm": rewarm_source})
        keep = probe.rewarm_keep
        if keep is not None:
            passes = ", ".join(f"{t * 1e3:.3f}" for t in probe.draft_pass_s)
            gaps = ", ".join(f"{g:.2f}" for g in probe.rewarm_gaps)
            device = replace(device, cache_rewarm_keep=round(keep, 4), sources={**device.sources, "cache_rewarm_keep": (
                f"measured {by}: the same draft-sized model's {len(probe.draft_pass_s)} passes after a "
                f"{probe.masked_tokens}-token step of the streaming probe (a verification) take {passes} ms (warm "
                f"{probe.draft_warm_s * 1e3:.3f} ms): shares {gaps} of the "
                f"cold-to-warm gap, fitted as {keep:.3f} ** j for pass j = 1, 2, ... (least squares; {thr}, median of "
                f"{s.overhead_repeats}) {on}")})
        if probe.draft_gemm_s > 0 and probe.draft_spec is not None:
            loop_op, loop_source = resident_loop_overhead(probe, device, thr, s, by, on)
            device = replace(device, cache_loop_op_overhead_us=round(loop_op * 1e6, 3),
                             sources={**device.sources, "cache_loop_op_overhead_us": loop_source})
        from real.validation.calibration.stream_step_probe import REWARM_DRAFT

        held = probe.weight_cache
        if held is not None and held[0] < w.cache_bytes:
            device = replace(device, cache_gb=held[0] / 1e9, sources={**device.sources, "cache_gb": (
                f"measured {by}: the largest set of model weights that linears still read from the "
                f"cache in a loop of their own: the layers (norms included) and LM head of growing draft-shaped models (hidden "
                f"{REWARM_DRAFT['hidden']}, vocabulary {REWARM_DRAFT['vocab']}, in the forward's order) ran at "
                + _curve_text(probe.weight_curve) + " GB/s in one-token passes"
                + (f" and at {_curve_text(probe.weight_curve_multi)} GB/s in {probe.weight_curve_tokens}-token passes"
                   if probe.weight_curve_multi else "")
                + "; where they fall through the geometric midpoint of the fastest and the slow end (the median of the "
                  "largest third of sets) " + ("in both " if probe.weight_curve_multi else "")
                  + f"({held[0] / 1e6:.2f} MB) is what a model's weights "
                  f"get, less than the stream triad's {_mib(w.cache_bytes)} ({thr}, median of "
                  f"{s.overhead_repeats}) {on}")})
        gemv = probe.gemv_weight_cache       # None exactly when held is: both read the one-token curve
        size = min(gemv[0], w.cache_bytes) if gemv is not None else 0
        if held is not None and held[0] < size:
            device = replace(device, gemv_cache_gb=size / 1e9, sources={**device.sources, "gemv_cache_gb": (
                f"measured {by}: the largest set of model weights that one-token linears still read from the "
                f"cache in a loop of their own ({size / 1e6:.2f} MB; the one-token curve of cache_gb's source, "
                f"capped at the stream triad's {_mib(w.cache_bytes)}): a one-token pass, a draft's, keeps more "
                f"of the cache than the {probe.weight_curve_tokens}-token passes whose set is cache_gb ({thr}, "
                f"median of {s.overhead_repeats}) {on}")})
    return device


def _curve_text(curve) -> str:
    return ", ".join(f"{n / 1e6:.1f} MB {bw / 1e9:.0f}" for n, bw in curve)


def _low_precision_peaks(w: WorkerMeasurement, sources: dict, thr: str, s: Settings, by: str, on: str
                         ) -> tuple[dict[str, float], dict[str, tuple[str, float]], dict[str, tuple]]:
    """bf16 / fp16 peaks of a worker: measured where the calibration timed them (``w.dtype_rates``;
    a dtype torch has no kernel for on this CPU is left out: the device does not run it), else marked
    as derived from the fp32 peak (a measurement from before the calibration timed them), and each
    timed dtype's own streamed curve where the calibration timed it. Adds the sources; returns
    (measured peaks in TFLOP/s, derived peaks, dtype -> streamed efficiency curve)."""
    from real.validation.calibration.microbench import LOW_PRECISION_DTYPES

    peaks: dict[str, float] = {}
    curves: dict[str, tuple] = {}
    for r in w.dtype_rates:
        if r.flops_per_s is None:
            continue
        peaks[r.dtype] = round(r.flops_per_s / 1e12, 6)
        curve_text = (f"dtype_gemm_efficiency_curve.{r.dtype} gives its rate at each token count" if r.streamed
                      else "the token-count efficiency curves are fp32's, applied to this peak")
        sources[f"peak_tflops.{r.dtype}"] = (
            f"measured: {r.flops_per_s / 1e9:.3g} GFLOP/s {by} (F.linear in {LOW_PRECISION_DTYPES[r.dtype]} at "
            f"the fp32 peak's shape M={r.m}, K={r.k}, N={r.n}, weight in the cache, as torch runs it on this CPU: "
            f"native or converted; {thr}, median of {s.repeats}) {on}; {curve_text}")
        if r.streamed:
            curves[r.dtype] = tuple((m, round(min(rate / r.flops_per_s, 1.0), 4)) for m, rate in r.streamed)
            rates = ", ".join(f"M={m} {rate / 1e9:.3g}" for m, rate in r.streamed)
            sources[f"dtype_gemm_efficiency_curve.{r.dtype}"] = (
                f"measured {by}: per M, the median over (K, N) in {[list(x) for x in s.dtype_shapes]} of the "
                f"F.linear rate in {LOW_PRECISION_DTYPES[r.dtype]} with the weight streamed from DRAM (a ring of "
                f"distinct weights totalling {COLD_POOL_LLC} x the last-level cache), start-up of the weight rows "
                f"included ({rates} GFLOP/s), divided by peak_tflops.{r.dtype} ({thr}, median of {s.repeats}) {on}")
    timed = {r.dtype for r in w.dtype_rates}
    derived = {dt: ("fp32", 1.0) for dt in LOW_PRECISION_DTYPES if dt not in timed}
    for dt in derived:
        text = ("not measured by this calibration (it did not time low-precision GEMMs): priced at the fp32 "
                "peak; `hetspec calibrate` measures it")
        sources[f"derived_peak_tflops.{dt}"] = text
        sources[f"peak_tflops.{dt}"] = f"derived: 1 x the fp32 peak; {text}"
    return peaks, derived, curves


def _row_fit_text(fits, thr: str, s: Settings, on: str) -> str:
    """How a row-cost curve's source states its fit (:func:`real.validation.calibration.gemm_rows.fit_rows`)."""
    return (f"fitted as 2 M K N / rate + N x row cost (0 where the fit gives none); M={fits[0].m}: "
            f"{fits[0].row_s * 1e9:.0f} ns per weight row beside a row-free {fits[0].flops_per_s / 1e9:.2f} GFLOP/s; "
            f"median misfit over the fitted M {100 * _median(f.median_residual for f in fits):.0f} %, largest "
            f"{100 * max(f.max_residual for f in fits):.0f} % ({thr}, {s.medians(s.repeats)}) {on}")


def _with_batched(device: Device, w: WorkerMeasurement, s: Settings, sources: dict, thr: str, by: str,
                  on: str) -> Device:
    """``device`` with the batched GEMM's curves (HetSpec's Medusa heads: one torch.matmul over stacked
    weights), measured and fitted as the linears' streamed curve and row start-up are."""
    fits = w.batched_fits
    shapes = [[k, n] for k, n in s.batched_shapes]
    sources["batched_gemm_efficiency_curve"] = (
        f"measured {by}: per M, the median over (K, N) in {shapes} of the rate of torch.matmul(x [1, M, K], "
        f"W [{s.batched_heads}, N / {s.batched_heads}, K] transposed) with the weights streamed from DRAM (a ring "
        f"of distinct weights totalling {COLD_POOL_LLC} x the last-level cache) divided by peak_tflops ({thr}, "
        f"{s.medians(s.repeats)}) {on}" + ("; where batched_gemm_row_ns_curve has a start-up, the row-free rate "
                                           "of its fit" if fits else ""))
    device = replace(device, batched_gemm_efficiency_curve=w.batched_efficiency_curve, sources=sources)
    if fits:
        sources["batched_gemm_row_ns_curve"] = (
            f"measured {by}: per M, those batched GEMM times {_row_fit_text(fits, thr, s, on)}")
        device = replace(device, batched_gemm_row_ns_curve=row_curve(fits, s.batched_m_values), sources=sources)
    return device


def step_launches(spec, context: int) -> int:
    """Operator launches of ``spec``'s one-token step at ``context`` cached tokens (the step graph's)."""
    from sim.step_graph import build_step_graph

    return sum(op.launches * op.count for op in build_step_graph(spec, 1, context).ops)


def streaming_overhead(device: Device, probe, thr: str, settings: Settings, by: str, on: str) -> tuple[float, str]:
    """Fixed seconds per operator launch of a model whose weights stream from DRAM: the streaming
    probe's one-token step minus the same step's GEMMs run alone (interleaved with it, so both see the same
    state of the machine), over the step's launches (a masked step's are these times the device's
    ``masked_overhead_factor``). Small operators between weight streams find their data evicted: they cost more
    than in the cache-resident probe (a reading below its ``cache_op_overhead_us``, noise, is held at it)."""
    spec = probe.spec
    launches = step_launches(spec, probe.context)
    per_op = max(rest := (probe.unmasked_s - probe.gemm_unmasked_s) / launches, device.bare_cache_overhead_s)
    held = "" if per_op == rest else f" (cache_op_overhead_us: the rest read {rest * 1e6:.2f})"
    source = (f"measured: {per_op * 1e6:.2f} us per step-graph operator {by}{held}: a random-weight decoder larger than "
              f"the last-level cache ({spec.n_layers} layers, hidden {spec.hidden}, {spec.weight_bytes() / 1e6:.0f} MB "
              f"of fp32 weights) takes {probe.unmasked_s * 1e3:.2f} ms for one token (and {probe.masked_s * 1e3:.2f} ms "
              f"for {probe.masked_tokens} under a tree mask), its GEMMs alone {probe.gemm_unmasked_s * 1e3:.2f} ms (and "
              f"{probe.gemm_masked_s * 1e3:.2f}); the one-token rest over its {launches} operators ({thr}, median of "
              f"{settings.overhead_repeats}) {on}. Models that fit the cache use cache_op_overhead_us")
    return per_op, source


def resident_loop_overhead(probe, device: Device, thr: str, settings: Settings, by: str,
                           on: str) -> tuple[float, str]:
    """Fixed seconds per operator launch of a cache-resident model's passes in a decode loop: the
    draft-sized model's pass in a loop of its own minus its GEMMs run alone (interleaved with it), over
    the pass's launches, as :func:`streaming_overhead` does for a model read from DRAM. It is more than
    the bare forward's (``cache_op_overhead_us``, hidden 64): at a draft's width the threads of its
    multi-threaded operators (attention) sleep between them and must be woken, and its data leaves the
    cache while its other operators run."""
    from sim.step_graph import weight_working_set

    spec = probe.draft_spec
    launches = step_launches(spec, probe.context)
    per_op = max((probe.draft_warm_s - probe.draft_gemm_s) / launches, 0.0)
    source = (f"measured: {per_op * 1e6:.2f} us per step-graph operator {by}: a cache-resident random-weight "
              f"model of a draft's shape ({spec.n_layers} layers, hidden {spec.hidden}, "
              f"{weight_working_set(spec) / 1e6:.0f} MB of fp32 weights read per pass) takes {probe.draft_warm_s * 1e3:.3f} ms per "
              f"one-token pass in a loop of its own, its GEMMs alone {probe.draft_gemm_s * 1e3:.3f} ms; the rest "
              f"over its {launches} operators ({thr}, median of {settings.overhead_repeats}) {on}. Prices the passes "
              f"of a resident model; the bare forward's {device.bare_cache_overhead_s * 1e6:.2f} us "
              f"(cache_op_overhead_us) is the reference of costs measured on that forward")
    return per_op, source


def build_platform(cal: Calibration, name: str = HOST_NAME, extend=None) -> Platform:
    """The ``host`` platform of a calibration (see the module docstring); ``extend``: what further probes add
    to its loop costs and links (:attr:`~real.validation.calibration.host_facts.CalibrationProbes.extend`; the
    heterogeneous ones: the split step's and Dovetail's loop costs, the storage link)."""
    whole, single = cal.all_threads, cal.one_thread
    devices = {"cpu": _device("cpu", whole, cal, f"{cal.cpu}: all {whole.threads} torch threads")}
    workers = [f"cpu{i}" for i in range(cal.cores)]
    for w in workers:
        devices[w] = _device(w, single, cal, f"{cal.cpu}: one single-thread worker (identical to every cpuN; "
                                             "measured once)")
    loops = {n: loop_costs_of(d, (meas := whole if n == "cpu" else single).loops,
                              cal.settings.medians(cal.settings.loop_repeats, meas.loop_rounds),
                              f"by {cal.command}", f"on {cal.cpu}, {cal.date}") for n, d in devices.items()}
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
                f"{_mib(cal.dram_working_set_bytes // n_conc)} each, median of {cal.settings.repeats}) got {rates} = "
                f"{together / 1e9:.1f} GB/s together, vs {domain_bw / 1e9:.1f} GB/s for the whole CPU alone "
                f"(one worker alone: {single.dram_bw_bytes_per_s / 1e9:.1f} GB/s) {on}"
                if n_conc > 1 else "1: a single core has no second worker to contend with"),
        })
    extra_links: tuple = ()
    if extend is not None:
        loops, extra_links = extend(cal, devices, loops, extra_links, workers)
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
                    devices=devices, links=links + extra_links, memory_domains=(domain,),
                    loop_costs={n: c for n, c in loops.items() if c is not None})
