"""Measured operator timing of any torch device: a ``hetspec-op-profile/1`` profile and a platform
whose device is priced by it (``hetspec calibrate --device cpu|cuda:N [--models M1,M2]``).

What is measured, with the same code on every device (CUDA timing where CUDA is):

- the operators of the step graph (:func:`sim.step_graph.build_step_graph`) of every model asked
  for, each at its own shapes: linear layers by (d_in, d_out) at token counts :data:`TOKENS`
  (every count 1 to 16, then every 8 to 256, then 384 and 512: a CPU's GEMM kernels change blocking from one
  small row count to the next, and speculative decoding verifies a handful of tokens), twice: on one weight (``linear``: a small
  weight stays in the cache, as a model that fits it runs) and on a ring of distinct weights
  :data:`real.validation.profiler.profile_ops.STREAM_CACHE_MULTIPLE` times the last-level cache (``linear_streamed``:
  every call reads its weight from memory, as a decode step of a larger model does); attention by (heads, KV heads, head dim)
  under a boolean tree mask over a (q, keys) grid (:data:`ATTENTION_Q` x :data:`ATTENTION_KEYS`);
  RMSNorm, residual adds, SiLU x mul, RoPE and the embedding lookup at the token counts;
- the eager forward of every model asked for (random weights, 64 cached tokens) at each token count, timed
  whole: what it takes beyond the profile's price of its operators is its ``forward_rest`` rows
  (:mod:`real.validation.profiler.forward_launch`);
- the launch cost of an operator (a one-element add) in each execution mode the device has:
  ``eager`` (the host launches every kernel; on a CPU this is torch's dispatch) and, on CUDA,
  ``graph`` (a captured CUDA graph replayed);
- the device's copy bandwidth and its best GEMV and GEMM rates (the platform's ``mem_bw_gbps`` and
  ``peak_tflops``, so the roofline the profile falls back to is this device's own);
- on CUDA, the host-to-device and device-to-host links (pinned and pageable: latency and bandwidth);
- on CUDA, HetSpec's decode loops (ar, chain, draft-tree, medusa) on the calibration's probe models, placed on
  the device in the profile's dtype with CUDA graphs, as a validation there runs its models: what their steps
  take beyond the profile's price of their forwards and heads is the platform's ``loop_costs`` of the device
  (the host's Python, the acceptance walk and cache compaction around the replayed graphs, and the step's
  read-back; :func:`real.validation.calibration.microbench.decode_loop_samples`). A CPU's loop costs are the calibrated
  host platform's (``hetspec calibrate`` times them with the host).

On a CPU the eager launch cost a row carries is not the bare dispatch but what one launch costs inside
the real path's forward (:func:`real.validation.profiler.forward_launch.eager_launch_in_forward`): the real model's one-token forward at hidden
64, where compute is negligible, is timed whole; the profile's kernel times of its operators are taken
off, and the rest is spread over the launches the profiled pricing counts for it (each covered
operator's call once, each fallback operator's kernels). That rest is Python module and argument
handling around the calls, several times the dispatch of a bare one-element add (both are reported).

Kernel time is kept apart from launch cost (:mod:`real.validation.profiler.call_timing` times a call). On CUDA a
row's ``kernel_us`` is the time of the operator repeated inside one CUDA graph divided by the repeats (no
host launches; the device's gap from one kernel to the next is in it, as in a captured forward), its
``eager_launch_us`` what one eager call takes beyond that, and its ``graph_launch_us`` 0: inside a replayed
graph a call adds nothing to that. What one replay of a graph costs beyond its kernels (once per replayed
forward, not per operator) is measured too and written into the profile's notes; the step graph does not price it. On a
CPU there are no graphs: ``kernel_us`` is a call's time less torch's dispatch cost, ``eager_launch_us``
that dispatch cost, and the device runs in ``eager`` mode.
Every number is a median of interleaved repeats (:func:`real.run.repeats.interleaved`), except the bare
dispatch: the fastest of them, and of at least the full profile's repeats and calls (:func:`anchor_settings`).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from hwmodels.errors import HetSpecError
from real import openmp_label
from real.run.repeats import median
from real.validation.profiler.call_timing import cpu_worker, median_timing, op_samples, parse_device
from real.validation.profiler.device_copies import copy_bandwidth, link_timings, wall_per_call
from real.validation.profiler.device_loops import device_loop_costs, device_loops
from real.validation.profiler.profile_ops import (  # noqa: F401  (op_callable, weight_ring: this module's public names)
    last_level_cache_bytes,
    op_callable,
    profile_keys,
    weight_ring,
)
from real.validation.profiler.profile_summary import (  # noqa: F401  (summary_lines: this module's public name)
    contention_note,
    replay_note,
    summary_lines,
)

#: Token counts of the linear and elementwise rows: every count to 16 (where speculative decoding verifies;
#: a CPU's GEMM time is not linear between 4 and 8 rows there, e.g. 384x1024 streamed from memory took
#: 113, 132, 133, 112, 103 us at 4..8 rows on the 2-core EPYC of docs/validation.md), then every 8 to 256.
TOKENS = tuple(range(1, 17)) + tuple(range(24, 257, 8)) + (384, 512)
#: Fewer token counts for ``--quick`` (still the range 1..512, steps kept where widths live).
QUICK_TOKENS = (1, 2, 4, 8, 16, 32, 64, 72, 128, 256, 512)
#: Attention rows: queries (new tokens) x keys attended (cached + new).
ATTENTION_Q = (1, 2, 4, 8, 16, 32, 64, 128, 256)
ATTENTION_KEYS = (64, 256, 1024, 4096)
QUICK_ATTENTION_Q = (1, 8, 64, 256)
QUICK_ATTENTION_KEYS = (256, 1024)
#: The dtype the real path runs on each kind of device by default.
DEFAULT_DTYPE = {"cpu": "fp32", "cuda": "fp16"}
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class ProfileSettings:
    tokens: tuple[int, ...] = TOKENS
    attention_q: tuple[int, ...] = ATTENTION_Q
    attention_keys: tuple[int, ...] = ATTENTION_KEYS
    repeats: int = 5          # interleaved repeats (medians)
    calls: int = 10           # calls per timed sample (CPU, and CUDA eager)
    graph_copies: int = 20    # copies of the operator inside one CUDA graph (kernel time without launch gaps)
    loop_repeats: int = 5     # CUDA: interleaved repeats of each probe decode loop (medians)


def anchor_settings(settings: ProfileSettings) -> ProfileSettings:
    """``settings`` with at least the full profile's repeats and calls per sample: those of what every row leans on
    (the bare dispatch cost subtracted from every CPU row; the whole forwards behind every ``forward_rest`` row)."""
    full = ProfileSettings()
    return replace(settings, repeats=max(settings.repeats, full.repeats), calls=max(settings.calls, full.calls))


QUICK = ProfileSettings(tokens=QUICK_TOKENS, attention_q=QUICK_ATTENTION_Q, attention_keys=QUICK_ATTENTION_KEYS,
                        repeats=3, calls=5, graph_copies=10, loop_repeats=3)


@dataclass
class DeviceProfile:
    """Everything :func:`profile_device` measured (the raw record next to the profile)."""

    device: str
    name: str
    dtype: str
    rows: list[tuple] = field(default_factory=list)       # profile rows (microseconds)
    launch_us: dict[str, float] = field(default_factory=dict)
    copy_gbps: float = 0.0
    gemv_gbps: float = 0.0
    gemm_tflops: float = 0.0
    links: dict[str, dict[str, float]] = field(default_factory=dict)
    #: CUDA: copies of an operator inside the graph its kernel time is taken from, and what one replay of a graph
    #: costs beyond its kernels (once per replayed forward; not priced by the step graph)
    graph_copies: int = 0
    graph_replay_us: float = math.nan
    seconds: float = 0.0
    #: (model, seconds): the real path's forward of a model whose compute is negligible, timed whole
    #: (:func:`forward_probe_s`); None where not measured (CUDA)
    forward: tuple | None = None
    forward_launch_us: float | None = None   # one launch inside that forward (set when the profile is written)
    #: (spec, [(tokens, seconds)]): the eager forward of every profiled model, timed whole at each token count
    #: (:func:`real.validation.profiler.forward_launch.time_model_forwards`; its ``forward_rest`` rows)
    forwards: list = field(default_factory=list)
    #: the CPU's last-level cache (0: not used, a GPU): a model whose weights fit it is priced by the ``linear``
    #: rows, a larger one by ``linear_streamed`` (the written platform's ``cache_gb``)
    cache_bytes: int = 0
    #: what the contention guard did to the operator rows (:func:`real.run.contention.guard_summary`; None
    #: without a guard)
    contention: dict | None = None
    cache_source: str = ""
    #: CUDA: the probe decode loops timed on the device (:class:`real.validation.calibration.microbench.LoopSample`; the
    #: platform's loop costs) and the repeats each is the median of
    loops: tuple = ()
    loop_repeats: int = 0
    #: a CPU: the drafts' passes inside the chain and draft-tree decode loops (op, draft spec, context, seconds per
    #: pass index; :mod:`real.validation.profiler.draft_loop`, the ``draft_pass_*`` rows)
    draft_passes: list = field(default_factory=list)
    #: seconds each part of the measurement took (launch costs, whole forwards before and after the rows, the
    #: rows, bandwidth, links, decode loops), in order: where a long profile spends its time
    phase_seconds: dict[str, float] = field(default_factory=dict)


# ---------------------------------------------------------------------------- the whole measurement
def profile_device(device_text: str, models, settings: ProfileSettings = ProfileSettings(), dtype: str | None = None,
                   progress: bool = True, guard=None, pairs=()) -> DeviceProfile:
    """Measure the operators of ``models`` (ModelSpecs) and the device's bandwidth, launch costs and links; on
    a CPU also the drafts' passes inside the decode loops of ``pairs`` ((target, draft) specs).
    ``guard`` (:class:`real.run.contention.Guard`): the operator rows and the models' whole forwards measured
    in batches of a few seconds, each retaken while the guard's probe reads the cores slowed from outside
    (:func:`real.run.contention.guarded_batches`)."""
    from tqdm.auto import tqdm

    from real.run.contention import guard_summary, guarded_batches

    device = parse_device(device_text)
    dtype = dtype or DEFAULT_DTYPE[device.type]
    if dtype not in TORCH_DTYPES:
        raise HetSpecError(f"--dtype {dtype!r}: valid: {', '.join(TORCH_DTYPES)}")
    if device.type == "cpu" and dtype == "fp16":
        raise HetSpecError("--dtype fp16 on a CPU: torch converts it through fp32 there; profile fp32 or bf16")
    tdtype = TORCH_DTYPES[dtype]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name()
    out = DeviceProfile(device=text_device(device_text, device), name=name, dtype=dtype)
    t0 = time.perf_counter()
    tiny_a, tiny_b = torch.ones(1, device=device), torch.ones(1, device=device)
    # the one-element add is all launch, a fixed cost that a process's first calls and slowdowns from outside only
    # lengthen: its fastest sample (their median, taken slow, left every small row's kernel time at zero), of the
    # full profile's samples at least (it costs microseconds; one slow sample of two calls once did the same)
    launch_samples = op_samples(lambda: tiny_a + tiny_b, device, anchor_settings(settings))
    dispatch = min(s.kernel_s + s.eager_launch_s for s in launch_samples)
    out.launch_us["eager"] = dispatch * 1e6
    if device.type == "cuda":
        # an operator inside a replayed graph costs its kernel and the gap to the next: the add's time per copy
        out.launch_us["graph"] = median(s.kernel_s for s in launch_samples) * 1e6
        out.graph_replay_us = median(s.replay_s for s in launch_samples) * 1e6
        out.graph_copies = settings.graph_copies

    # every model in the dtype the rows are timed in: the forwards' ``forward_rest`` rows are what the profile's
    # pricing of them in that dtype leaves
    from sim.step_graph import forward_key

    # as the real path runs them: a GGUF file's weights dequantized to the profiled dtype
    models = [spec.dequantized(dtype) for spec in models]
    # one whole forward per model shape (two names of one shape, e.g. a preset and its GGUF file, are one model)
    shapes: dict = {}
    for spec in models:
        if spec.arch == "llama":
            shapes.setdefault(forward_key(spec), spec)
    forward_models = list(shapes.values())
    probe = None
    if device.type == "cpu":       # the forward that prices a launch inside the real model (eager_launch_in_forward)
        from real.validation.calibration.microbench import probe_specs

        probe = probe_specs()[0]
        models = list(models) + [probe]
    work: list[tuple[str, str, int, int, int]] = []
    for (table, shape), vocab in profile_keys(models).items():
        if table == "attention":
            work += [(table, shape, q, k, vocab) for k in settings.attention_keys for q in settings.attention_q if q <= k]
        elif table in ("linear", "norm", "add", "act_mul", "gelu", "rope", "embedding"):
            work += [(table, shape, t, 0, vocab) for t in settings.tokens]
        if table == "linear":
            work += [("linear_streamed", shape, t, 0, vocab) for t in settings.tokens]
    cache_bytes = last_level_cache_bytes(device)
    if device.type == "cpu":
        out.cache_bytes = cache_bytes
        out.cache_source = f"the CPU's last-level cache ({cache_bytes / 2**20:.0f} MiB, read from the system)"
    ring: tuple[str, list] = ("", [])     # the current shape's ring of weights (the work is grouped by shape)
    from real.validation.profiler.forward_launch import REST_CONTEXT, bracketed_forwards, time_model_forwards

    # every model's whole forward, timed before and after the rows (its forward_rest rows)
    whole = anchor_settings(settings)       # the full profile's samples at least
    forward_work = 2 * sum(REST_CONTEXT + t <= spec.max_position for spec in forward_models
                           for t in settings.tokens) * whole.repeats
    bar = tqdm(total=len(work) + forward_work, desc=f"profiling {out.device}", unit="op", disable=not progress,
               file=sys.stderr)

    forward_records: list = []

    def forwards() -> list:       # every model's, interleaved (which part is slow, as it runs)
        bar.set_postfix_str("whole forwards of " + ", ".join(spec.name for spec in forward_models), refresh=False)
        return time_model_forwards(forward_models, device, tdtype, settings.tokens,
                                   lambda fn, n: wall_per_call(fn, device, n), whole.calls, whole.repeats,
                                   tick=bar.update, guard=guard, records=forward_records)

    def row(item) -> tuple | None:
        """One profile row (microseconds), None where the operator does not apply or does not fit."""
        nonlocal ring
        table, shape, tokens, keys, vocab = item
        bar.set_postfix_str(f"{table} {shape}", refresh=False)
        try:
            if table == "linear_streamed" and ring[0] != shape:
                ring = ("", [])           # free the last ring before the next one
                ring = (shape, weight_ring(shape, device, tdtype, cache_bytes))
            fn = op_callable(table, shape, tokens, keys, vocab, device, tdtype, ring[1])
            if fn is None:
                return None
            timing = median_timing(op_samples(fn, device, settings, dispatch_s=dispatch))
        except torch.OutOfMemoryError:
            return None
        return (table, shape, tokens, keys, timing.kernel_s * 1e6, timing.eager_launch_s * 1e6,
                timing.graph_launch_s * 1e6)

    clock = [t0]

    def phase(name: str) -> None:
        now = time.perf_counter()
        out.phase_seconds[name] = round(out.phase_seconds.get(name, 0.0) + now - clock[0], 1)
        clock[0] = now

    from real.validation.profiler.draft_loop import bracketed_passes, time_draft_passes

    def loop_passes() -> list:      # a CPU's drafts inside the decode loops, before and after the rows
        if device.type != "cpu" or not pairs:
            return []
        bar.set_postfix_str("draft passes inside the decode loops")
        timed = time_draft_passes(pairs, device, tdtype, settings.repeats, guard, forward_records, progress=False)
        phase("draft passes in the loops")
        return timed

    phase("launch costs")
    before = forwards()
    phase("whole forwards")
    passes_before = loop_passes()
    rows, records = guarded_batches(guard, work, row, tick=bar.update)
    out.rows += [r for r in rows if r is not None]
    phase("operator rows")
    after = forwards()
    phase("whole forwards")
    out.draft_passes = bracketed_passes(passes_before, loop_passes())
    out.contention = guard_summary(guard, records + forward_records)
    for spec, early, late in zip(forward_models, before, after):
        timed = bracketed_forwards(early, late)
        if timed:
            out.forwards.append((spec, timed))
    bar.close()
    if probe is not None:
        from real.validation.profiler.forward_launch import forward_probe_s

        out.forward = (probe, forward_probe_s(settings.calls, settings.repeats))
        phase("launch inside a forward")
    out.copy_gbps = copy_bandwidth(device, 256 * 2**20 if device.type == "cuda" else 128 * 2**20, settings) / 1e9
    out.gemv_gbps, out.gemm_tflops = _best_rates(out.rows, DTYPE_BYTES_OF[dtype])
    phase("copy bandwidth")
    if device.type == "cuda":
        out.links = link_timings(device, settings)
        phase("host links")
        out.loops, out.loop_repeats = device_loops(out, settings.loop_repeats, progress), settings.loop_repeats
        phase("decode loops")
    out.seconds = time.perf_counter() - t0
    return out


DTYPE_BYTES_OF = {"fp32": 4, "fp16": 2, "bf16": 2}


def _best_rates(rows, dt: int) -> tuple[float, float]:
    """(best GB/s of a one-token linear, best TFLOP/s of any linear) among the profile's rows."""
    gemv = gemm = 0.0
    for table, shape, tokens, _, kernel_us, _, _ in rows:
        if table != "linear" or kernel_us <= 0:
            continue
        d_in, d_out = (int(v) for v in shape.split("x"))
        seconds = kernel_us * 1e-6
        if tokens == 1:
            gemv = max(gemv, dt * (d_in + d_out + d_in * d_out) / seconds / 1e9)
        gemm = max(gemm, 2.0 * tokens * d_in * d_out / seconds / 1e12)
    return gemv, gemm


def text_device(device_text: str, device: torch.device) -> str:
    """How a profile names its device: ``cpuN`` for a single-thread worker, else the torch device."""
    return device_text.strip() if cpu_worker(device_text) is not None else str(device)


def _cpu_name() -> str:
    from sim.records.machine import cpu_model

    return cpu_model()


# ---------------------------------------------------------------------------- writing
def write_device_profile(prof: DeviceProfile, out: str | Path, command: str) -> tuple[Path, Path]:
    """Write ``<out>.csv`` (the profile) and ``<out>.toml`` (a platform of one device priced by it). With a
    timed forward (:attr:`DeviceProfile.forward`, a CPU) the eager launch cost of every row is the launch
    inside the real path's forward (:mod:`real.validation.profiler.forward_launch`), not the bare dispatch."""
    from hwmodels.loader import load_platform_file, write_platform_file
    from hwmodels.platform import Platform

    out = Path(out)
    csv_path, toml_path = out.with_suffix(".csv"), out.with_suffix(".toml")
    date = time.strftime("%Y-%m-%d %H:%M")
    mode = "graph" if "graph" in prof.launch_us else "eager"
    threads = "" if prof.device.startswith("cuda") else f", {torch.get_num_threads()} torch threads, {openmp_label()}"
    by = f"measured by `{command}` on {prof.name} ({prof.device}), torch {torch.__version__}{threads}, {date}"
    header = {"dtype": prof.dtype, "source": by, "device": f"{prof.name} ({prof.device})",
              "launch_us.eager": f"{prof.launch_us['eager']:.3f}",
              "launch_us.eager.source": "one-element add launched from Python (torch dispatch, and on CUDA the "
                                        f"kernel launch), fastest of interleaved repeats; {by}"}
    if "graph" in prof.launch_us:
        header["launch_us.graph"] = f"{prof.launch_us['graph']:.3f}"
        header["launch_us.graph.source"] = (f"one-element add inside a captured CUDA graph of {prof.graph_copies} copies of "
                                            f"it, per copy (its kernel and the gap to the next); {by}")
    rows = [r if mode == "graph" else (*r[:6], math.nan) for r in prof.rows]
    notes = (f"copy bandwidth {prof.copy_gbps:.1f} GB/s, best one-token linear {prof.gemv_gbps:.1f} GB/s, best linear "
             f"{prof.gemm_tflops:.3f} TFLOP/s",) + tuple(
        f"link {k}: {v['latency_us']:.1f} us, {v['bw_gbps']:.1f} GB/s" for k, v in prof.links.items())
    if mode == "graph":
        notes += (replay_note(prof),)
    if prof.contention:
        notes += (contention_note(prof.contention),)
    device = _written_device(prof, csv_path, header, rows, notes, mode, by)
    if prof.forward is not None and mode == "eager":
        from real.validation.profiler.forward_launch import eager_launch_in_forward

        bare_s = prof.launch_us["eager"] * 1e-6
        model, seconds = prof.forward
        # priced in the profile's dtype (the device's only one): the probe runs fp32, but its compute is negligible
        launch_s, kernels_s, launches = eager_launch_in_forward(device, (model.with_dtype(prof.dtype), seconds),
                                                                floor_s=bare_s)
        floored = (" (less than a bare dispatch: the kernels were timed at a faster moment than the forward; "
                   "the bare dispatch is kept)" if (seconds - kernels_s) / launches < bare_s else "")
        header["launch_us.eager"] = f"{launch_s * 1e6:.3f}"
        header["launch_us.eager.source"] = (
            f"one launch inside the real path's forward: the one-token forward of a {model.n_layers}-layer, hidden "
            f"{model.hidden} model (compute negligible) took {seconds * 1e6:.1f} us, the profile's kernels of its "
            f"operators {kernels_s * 1e6:.1f} us, the rest over the {launches:.0f} launches the pricing counts"
            f"{floored}; a bare one-element add's dispatch is {prof.launch_us['eager']:.2f} us; {by}")
        rows = [(*r[:5], launch_s * 1e6, r[6]) for r in rows]
        prof.forward_launch_us = launch_s * 1e6
        device = _written_device(prof, csv_path, header, rows, notes, mode, by)
        # the probe's own rest: what its forward took beyond its rows once the launch is set (0 unless floored), so
        # a pricing of the probe model finds its row rather than a rest scaled from another model's
        from real.validation.calibration.microbench import PROBE_CONTEXT
        from real.validation.profiler.forward_launch import forward_rest_rows
        from sim.step_graph import forward_key

        probe = model.with_dtype(prof.dtype)
        if forward_key(probe) not in {forward_key(spec.with_dtype(prof.dtype)) for spec, _ in prof.forwards}:
            rows = rows + forward_rest_rows(device, [(probe, [(1, seconds)])], graphs=False, context=PROBE_CONTEXT)
            device = _written_device(prof, csv_path, header, rows, notes, mode, by)
    if prof.forwards:
        from real.validation.profiler.forward_launch import REST_CONTEXT, forward_rest_rows

        rows = rows + forward_rest_rows(device, prof.forwards, graphs=mode == "graph")
        notes = notes + (f"forward_rest: each profiled model's eager forward (random weights, {REST_CONTEXT} cached "
                         "tokens; timed before and after the operator rows, every model interleaved, the median of "
                         "both made non-decreasing in tokens) less the rows' price of it (negative where the rows "
                         "were timed slower)",)
        device = _written_device(prof, csv_path, header, rows, notes, mode, by)
    if prof.draft_passes:
        from real.validation.profiler.draft_loop import draft_pass_rows

        rows = rows + draft_pass_rows(prof.draft_passes, device)
        notes = notes + ("draft_pass_*: each pass of a round of the real chain and draft-tree decode loops, by its index "
                         "in the round (random weights; LM-head hooks make every draft accepted or rejected): its median "
                         "ratio to the same forward timed standalone after each decode, times this profile's price of "
                         "that forward",)
        device = _written_device(prof, csv_path, header, rows, notes, mode, by)
    loops = device_loop_costs(device, prof, command, date)
    platform = Platform(name=toml_path.stem, description=f"{prof.name} ({prof.device}), profiled by {command} on {date}",
                        devices={device.name: device}, loop_costs={device.name: loops} if loops else {})
    write_platform_file(platform, toml_path)
    load_platform_file(toml_path)   # what we write must load
    return csv_path, toml_path


def _written_device(prof: DeviceProfile, csv_path: Path, header: dict, rows, notes, mode: str, by: str):
    """Write the profile to ``csv_path`` and return the device it prices (its roofline fields measured by it)."""
    from hwmodels.platform import Device
    from hwmodels.profile import DeviceTiming, measured_efficiencies, read_profile, write_profile

    write_profile(csv_path, header, rows, notes)
    profile = read_profile(csv_path)
    best = measured_efficiencies(profile, 1.0, 1.0)   # against 1 GB/s and 1 TFLOP/s: the best rates themselves
    # the peaks as written, so the efficiencies are those the loader recomputes from the file
    mem_bw = round(max(prof.copy_gbps, best["bw_efficiency"]), 3)
    peak = float(f"{max(prof.gemm_tflops, best['compute_efficiency']):.6g}")
    eff = measured_efficiencies(profile, mem_bw, peak)
    kind = "gpu" if prof.device.startswith("cuda") else "cpu"
    capacity = (torch.cuda.get_device_properties(torch.device(prof.device)).total_memory if kind == "gpu"
                else _physical_memory())
    src = {
        "mem_bw_gbps": f"measured: the larger of the copy bandwidth ({prof.copy_gbps:.1f} GB/s, read + write) and the "
                       f"best bandwidth a linear row reaches ({best['bw_efficiency']:.1f} GB/s, {best['bw_where']}; on a "
                       f"CPU small layers stream from the cache); {by}",
        f"peak_tflops.{prof.dtype}": f"measured: the best linear row of the profile; {by}",
        "mem_capacity_gb": "torch.cuda.get_device_properties" if kind == "gpu" else "os.sysconf: physical memory",
        "bw_efficiency": f"the profile's best bandwidth fraction ({eff['bw_where']})",
        "compute_efficiency": f"the profile's best FLOP fraction ({eff['compute_where']})",
        "op_overhead_us": f"the profile's launch cost in {mode} mode",
        "token_tile": "1: the profile's rows keep the steps of tiling (measured token counts)",
        "sparse_attn_efficiency": "0: tree attention priced dense, as the profile measured it (boolean mask)",
    }
    if prof.cache_bytes:
        src["cache_gb"] = (f"{prof.cache_source}: a model whose weights fit it is priced by the linear rows, a larger "
                           "one by linear_streamed")
    return Device(name=kind, kind=kind, peak_tflops={prof.dtype: peak}, mem_bw_gbps=mem_bw,
                  mem_capacity_gb=round(capacity / 1e9, 3), bw_efficiency=round(eff["bw_efficiency"], 3),
                  compute_efficiency=round(eff["compute_efficiency"], 3),
                  op_overhead_us=round(profile.launch_us[mode], 3), token_tile=1, sparse_attn_efficiency=0.0,
                  cache_gb=prof.cache_bytes / 1e9 if prof.cache_bytes else None,
                  description=f"{prof.name} ({prof.device}), {prof.dtype}, priced by its measured profile",
                  sources=src,
                  timing=DeviceTiming("profiled", mode, profile, csv_path.name,
                                      {"backend": by, "profile": by,
                                       "mode": "graph: CUDA graphs replayed" if mode == "graph" else
                                       "eager: the host launches every operator (no graphs on this device)"}))


def _physical_memory() -> int:
    from real.validation.calibration.host_facts import physical_memory_bytes

    return physical_memory_bytes()


def default_models(device_text: str) -> list[str]:
    """The models a profile covers by default: the trained demo presets cached with their current recipe (else
    the tiny recipe's shapes, what ``hetspec demo`` trains first), plus one 7B-class shape on a device with the
    memory for it (a CUDA device). A preset whose target is a pretrained file (``smollm2``) is left to
    ``hetspec calibrate --models demo:smollm2``: its 30-layer target's whole forwards took the default CPU
    profile from under 2 minutes to about 6 on two cores. ``--models`` adds any model."""
    from real.train.demo import DEMO_PRESETS, cache_folder, cached_fingerprint, get_recipe

    cached = [p for p in DEMO_PRESETS if not get_recipe(p).pretrained
              and cached_fingerprint(cache_folder(p)) == get_recipe(p).fingerprint()]
    names = [f"demo:{p}" for p in cached] or ["demo:tiny"]
    if device_text.startswith("cuda"):
        names.append("llama2-7b")
    return names


def resolve_models(names: Sequence[str]):
    """ModelSpecs of ``names``: presets, GGUF files, config.json files or model folders
    (:func:`sim.model_spec.get_model`), and ``demo:<preset>`` (the demo recipe's shapes)."""
    from sim.model_spec import get_model

    specs = []
    for name in names:
        if name.startswith("demo:"):
            from real.train.demo import demo_specs

            specs += list(demo_specs(name.split(":", 1)[1]))
        else:
            specs.append(get_model(name))
    return specs


def profile_and_write(device_text: str, model_names: Sequence[str] | None, dtype: str | None, quick: bool,
                      out: str | Path | None, command: str, progress: bool = True,
                      cache: tuple[float, str] | None = None, guard=None) -> list[str]:
    """``hetspec calibrate --device D``: profile ``device_text`` for ``model_names`` (default
    :func:`default_models`), write ``out`` (default ``profiled-<device>.toml`` in the user platform
    folder) and its CSV; returns the summary lines."""
    from hwmodels.loader import user_platform_dir
    from real.run.worker import on_worker
    from real.validation.gpu_target import profiled_platform_name

    device = parse_device(device_text)
    name = text_device(device_text, device)
    models = resolve_models(list(model_names) if model_names else default_models(name))
    out = out or str(user_platform_dir() / f"{profiled_platform_name(name)}.toml")
    worker = cpu_worker(device_text)
    # a single-thread worker is measured as the real path runs it: pinned to its core, one torch thread
    # (the profile's source line names the threads it was written with, so the writing is pinned too)
    with on_worker(worker) if worker is not None else nullcontext():
        from real.validation.profiler.draft_loop import demo_pairs

        pairs = demo_pairs(list(model_names) if model_names else default_models(name))
        prof = profile_device(device_text, models, QUICK if quick else ProfileSettings(), dtype, progress=progress,
                              guard=guard, pairs=pairs)
        if cache is not None and prof.cache_bytes:     # the cache a calibrated host platform measured
            prof.cache_bytes, prof.cache_source = int(cache[0] * 1e9), cache[1]
        csv_path, toml_path = write_device_profile(prof, out, command)
    return summary_lines(prof, csv_path, toml_path)
