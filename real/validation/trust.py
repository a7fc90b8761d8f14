"""The machine under test: its calibrated platform, and whether its state held still while it was
measured.

A shared machine changes under a measurement (other jobs, clocks, the scheduler taking a core away
from a multi-threaded operator). Two checks tell a measurement that can be trusted from one that
cannot (docs/validation.md, "Robustness on a shared machine"):

- the **reference probe** (:func:`reference_probe`, about two seconds): the real path's fixed cost
  per operator (the calibration's overhead probe, :func:`real.validation.calibration.microbench.layer_overhead`, the
  median of three readings),
  a STREAM triad on the calibration's DRAM working set, and a compute-bound GEMM's rate
  (:func:`gemm_rate`: on a shared virtual machine the cores' speed moves on its own, by a fifth within
  half an hour on the 2-core development machine, while the other two hold). ``hetspec calibrate`` times it at its
  start and its end (:func:`calibration_problems`); ``hetspec validate`` and ``hetspec demo`` time
  it before and after the measured grid and compare it with the calibration
  (:func:`machine_drift`, :func:`validation_verdict`), both with the cores quiet where the runs are guarded
  (:func:`settled_drift`, :func:`drift_after_grid`), and a machine already changed before the grid, in each of a
  few readings (:func:`drift_before_grid`), runs no grid at all (:class:`ChangedBeforeGrid`);
- the **spread** of a calibration's interleaved rounds (:func:`spread`: max / min - 1 over the
  rounds of each key measurement: GEMM rates, triad bandwidths, fixed cost per operator, the
  decode loops' step times).

A measurement that fails a check is refused (:class:`MachineChanged`, exit status
:data:`hwmodels.errors.EXIT_UNTRUSTED`) or, for a validation, reported as "not a validation".
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from hwmodels.errors import HetSpecError, UntrustedMeasurement
from real import openmp_label

#: Relative change of the fixed cost per operator since calibration above which the report warns.
DRIFT_WARNING = 0.15
#: The reference probe moving more than this between the start and the end of a calibration, or
#: between before and after a validation's grid: the machine changed under the measurement. On the
#: 2-core development machine at rest (load below 1, 2026-11-23) the probe's fixed cost per operator
#: moved by 39-46 % within one calibration and a GEMM rate spread 46 % over three rounds, against
#: spreads of 195-415 % with other jobs on the cores (docs/validation.md): the limits sit between.
PROBE_MOVE_LIMIT = 0.6
#: The reference probe's GEMM rate at the end of a calibration below this share of the GEMM peak the same
#: calibration measured (same threads): the cores were slowed evenly throughout, which the start-to-end check
#: cannot see; a problem of the calibration like the others (:func:`calibration_problems`). The probe's shape
#: sits near the peak on a quiet machine: 0.74-0.97 with all threads in the nine calibrations behind the
#: committed validations of 2026-11-26 to 2026-11-28 (each results.json's drift.gemm_calibrated_gflops over
#: platform.device_fields.peak_tflops.fp32, in the repository's history), 0.77 on the 2-core AMD EPYC machine
#: on 2026-11-29 at 06:17; 0.59 (98.8 of 167.0 GFLOP/s) on the afternoon of 2026-11-28, the cores at about half
#: their speed, and 0.52 (80.3 of 155.4) on 2026-11-29 at 14:02, after which every method of the validation
#: resting on it ran 5-24 % slower than predicted (docs/validation.md, "Robustness on a shared machine").
PROBE_PEAK_LIMIT = 0.65
#: A key measurement of a calibration whose interleaved rounds spread more than this (max / min - 1).
SPREAD_LIMIT = 1.0
#: The reference probe before or after a validation's grid further than this from the calibration:
#: the predictions were priced for another state of the machine; not a validation.
CALIBRATION_CHANGE_LIMIT = 0.6
#: A relative error above this is never presented as a result.
ERROR_LIMIT = 1.0
#: Repeats of the overhead probe in the reference probe (each: 20 steps of two depths, two masks), and how
#: many such readings its fixed cost is the median of: as a full calibration reads the fixed cost it is
#: compared with (``overhead_repeats`` 9 = the median of 3 interleaved rounds of 3 repeats each). One reading
#: alone scatters on a shared machine: on the 2-core AMD EPYC development machine on 2026-11-29 at 13:51,
#: twelve single readings interleaved with twelve medians of three spread 59 % and 33 % (docs/validation.md,
#: "Robustness on a shared machine").
PROBE_REPEATS = 3
PROBE_READINGS = 3
#: What the reference probe reports, and how a line names it.
PROBE_KEYS = {"op_us": ("fixed cost per operator", "us"), "triad_gbps": ("DRAM triad bandwidth", "GB/s"),
              "gemm_gflops": ("GEMM rate", "GFLOP/s")}
#: The quantities of a drift record (:func:`machine_drift`): their relative change since the calibration,
#: and how a line names them.
DRIFT_CHANGES = (("change", "fixed cost per operator"), ("triad_change", "DRAM triad bandwidth"),
                 ("gemm_change", "GEMM rate"))
#: The GEMM of the reference probe: ``GEMM_PROBE_SHAPE`` = (tokens, d_in, d_out), fp32, its 4 MiB weight in
#: the cache (compute-bound on a CPU), ``GEMM_PROBE_CALLS`` calls a sample, median of 5 samples.
GEMM_PROBE_SHAPE = (128, 1024, 1024)
GEMM_PROBE_CALLS = 4
#: The spread of a calibration's key measurements, and how a line names it.
SPREAD_KEYS = {"gemm_cache": "GEMM rate (weights in the cache)", "gemm_dram": "GEMM rate (weights from DRAM)",
               "triad_dram": "DRAM triad bandwidth", "triad_cache": "cache triad bandwidth",
               "op_overhead": "fixed cost per operator", "host_loops": "decode-loop step time (host costs)"}


class MachineChanged(UntrustedMeasurement):
    """A measurement the machine changed under: one line saying what moved and by how much."""


def change(now: float, then: float) -> float:
    """``now / then - 1`` (NaN without a positive ``then``)."""
    return now / then - 1.0 if then and then > 0 and math.isfinite(now) else float("nan")


def spread(values) -> float:
    """max / min - 1 of positive values (0 for fewer than two; infinity with a non-positive one)."""
    values = [float(v) for v in values]
    if len(values) < 2:
        return 0.0
    low = min(values)
    return max(values) / low - 1.0 if low > 0 else float("inf")


def reference_probe(threads: int, triad_bytes: int) -> dict:
    """The reference probe now, with ``threads`` torch threads: ``op_us``, the real path's fixed cost
    per step-graph operator (the calibration's overhead probe: the median of :data:`PROBE_READINGS` readings
    of :data:`PROBE_REPEATS` interleaved repeats each), ``triad_gbps``, a STREAM triad on ``triad_bytes``
    (median of 5), and ``gemm_gflops`` (:func:`gemm_rate`)."""
    import statistics

    from real.validation.calibration.microbench import layer_overhead, stream_bandwidth

    t0 = time.perf_counter()
    op_us = statistics.median(layer_overhead(threads, PROBE_REPEATS, 2).per_op_s
                              for _ in range(PROBE_READINGS)) * 1e6
    triad = stream_bandwidth(triad_bytes, threads, 5, 1) / 1e9
    gemm = gemm_rate(threads) / 1e9
    return {"threads": threads, "op_us": round(op_us, 3), "triad_gbps": round(triad, 3), "triad_bytes": triad_bytes,
            "gemm_gflops": round(gemm, 3), "seconds": round(time.perf_counter() - t0, 2)}


def gemm_rate(threads: int, samples: int = 5) -> float:
    """FLOP/s of ``F.linear`` at :data:`GEMM_PROBE_SHAPE` on ``threads`` torch threads (median of ``samples``)."""
    import torch
    import torch.nn.functional as F

    from real.validation.calibration.microbench import median_time, torch_threads

    m, k, n = GEMM_PROBE_SHAPE
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
    with torch_threads(threads), torch.inference_mode():
        return 2.0 * m * k * n / median_time(lambda: F.linear(x, w), samples, 1, inner=GEMM_PROBE_CALLS)


#: The contention guard's probe (:mod:`real.run.contention`): :func:`gemm_rate` with this many samples
#: (about 25 ms), and the share of its reference below which the cores were slowed from outside. On the
#: 2-core development machine quiet probes read within about a tenth of their median, slowed ones 0.33-0.78
#: of the reference (docs/validation.md, "Contention from outside").
GUARD_PROBE_SAMPLES = 3
GUARD_LIMIT = 0.2
#: The longest unbroken run of slow probes a guarded command waits and retakes through before it stops
#: (exit status 3); also the window over which slow probes broken by a quiet one now and then stop it
#: (:data:`real.run.contention.MOSTLY_SLOW`). Slowdowns on the development machine come and go within a
#: minute or two; on the afternoon of 2026-11-28 its cores stayed at 50-60 % of their quiet speed for over an
#: hour, and a calibration's guarded operator profile took 27 minutes over 138 of its 5,066 rows
#: (docs/validation.md, "Contention from outside"): fifteen minutes is several times a passing slowdown, and
#: far short of such a day.
GUARD_GIVE_UP_S = 900.0


def contention_guard(threads: int, calibrated: float | None = None, now: float | None = None,
                     give_up_s: float | None = GUARD_GIVE_UP_S):
    """The :class:`real.run.contention.Guard` of a validation's timed runs on ``threads`` threads: its
    reference is the larger of the calibration's GEMM rate (``calibrated``) and one timed now (``now``,
    else timed here), both FLOP/s of :func:`gemm_rate`: a machine already slowed when the validation starts
    does not lower the bar. It stops the run after ``give_up_s`` of slow probes, unbroken or nearly (None: never)."""
    from functools import partial

    from real.run.contention import Guard

    now = now if now else gemm_rate(threads)
    ref, where = (calibrated, "the calibration's reference probe") if calibrated and calibrated > now else (
        now, "timed before the runs")
    return Guard(probe=partial(gemm_rate, threads, GUARD_PROBE_SAMPLES), reference=ref, limit=GUARD_LIMIT,
                 give_up_s=give_up_s,
                 source=f"{where}, a {'x'.join(map(str, GEMM_PROBE_SHAPE))} F.linear on {threads} thread"
                        f"{'s' if threads > 1 else ''}")


def _value(key: str, x: float) -> str:
    return f"{x:.1f} {PROBE_KEYS[key][1]}"


def probe_moves(a: dict, b: dict, limit: float, when: str) -> list[str]:
    """One phrase per quantity of the reference probe that moved more than ``limit`` from ``a`` to ``b``."""
    out = []
    for key, (label, _) in PROBE_KEYS.items():
        if key not in a or key not in b:     # a probe from before the quantity was measured
            continue
        c = change(b[key], a[key])
        if not abs(c) <= limit:
            out.append(f"{label} {_value(key, a[key])} -> {_value(key, b[key])} ({100 * c:+.0f} %) {when}")
    return out


def calibration_problems(robustness: dict, peaks: dict[int, float] | None = None) -> list[str]:
    """What moved while a calibration measured, one phrase each: the reference probe from start to
    end beyond :data:`PROBE_MOVE_LIMIT`, a key measurement's spread over the rounds beyond
    :data:`SPREAD_LIMIT`, and the probe's GEMM rate at the end below :data:`PROBE_PEAK_LIMIT` of the
    calibration's own GEMM peak on as many threads (``peaks``: FLOP/s by thread count; None: not judged).
    ``robustness``: the record :func:`real.validation.calibration.calibrate.measure` keeps."""
    out = []
    for label, probes in robustness.get("reference", {}).items():
        out += [f"{label}: {m}" for m in probe_moves(probes["start"], probes["end"], PROBE_MOVE_LIMIT,
                                                     "from start to end")]
    rounds = robustness.get("rounds", 0)
    for label, spreads in robustness.get("spread", {}).items():
        for key, s in spreads.items():
            if not s <= SPREAD_LIMIT:
                out.append(f"{label}: {SPREAD_KEYS.get(key, key)} spread {100 * s:.0f} % over {rounds} rounds "
                           f"(limit {100 * SPREAD_LIMIT:.0f} %)")
    for label, rate, peak in slowed_probes(gemm_probe_rates(robustness), peaks or {}).values():
        out.append(f"{label}: the reference probe's GEMM read {rate / 1e9:.1f} GFLOP/s at the end, "
                   f"{100 * rate / peak:.0f} % of the {peak / 1e9:.1f} GFLOP/s peak measured (limit "
                   f"{100 * PROBE_PEAK_LIMIT:.0f} %): the cores slowed from outside throughout")
    return out


def triad_bytes_of(platform) -> int:
    """The DRAM working set the calibration of ``platform`` streamed (its raw measurements, next to
    the platform file), else the calibration's default: :data:`DRAM_WORKING_SET_LLC` x the last-level cache."""
    from real.validation.calibration.host_facts import DRAM_WORKING_SET_LLC, llc_bytes, raw_record

    try:
        return int((raw_record(platform) or {})["dram_working_set_bytes"])
    except (KeyError, ValueError, TypeError):
        return DRAM_WORKING_SET_LLC * llc_bytes()[0]


def gemm_probe_rates(robustness: dict, fastest: bool = False) -> dict[int, tuple[str, float]]:
    """The reference probe's GEMM rate (GFLOP/s) at the end of a calibration, by thread count, with the label of
    that thread count (``robustness``: the record a calibration keeps; a probe without the rate left out).
    ``fastest``: the faster of its start and its end instead, the machine's speed while it was quiet: a
    calibration whose cores slowed towards its end does not lower the bar of the guards that compare with it."""
    out = {}
    for label, probes in (robustness.get("reference") or {}).items():
        read = [p for p in (probes.get(k) or {} for k in (("start", "end") if fastest else ("end",)))
                if p.get("threads") and p.get("gemm_gflops")]
        if read:
            best = max(read, key=lambda p: float(p["gemm_gflops"]))
            out[best["threads"]] = (label, float(best["gemm_gflops"]))
    return out


def slowed_probes(rates: dict[int, tuple[str, float]], peaks: dict[int, float]) -> dict[int, tuple[str, float, float]]:
    """The thread counts whose reference probe read below :data:`PROBE_PEAK_LIMIT` of the GEMM peak the same
    calibration measured (``peaks``: FLOP/s by thread count): the cores slowed from outside throughout. ``rates``:
    the probe's GFLOP/s by thread count (:func:`gemm_probe_rates`). Each with (its label, the probe's FLOP/s,
    the peak's)."""
    out = {}
    for threads, (label, gflops) in rates.items():
        peak, rate = peaks.get(threads), gflops * 1e9
        if peak and rate < PROBE_PEAK_LIMIT * peak:
            out[threads] = (label, rate, peak)
    return out


def slowed_cores(probe_gflops: float, peak_gflops: float) -> str:
    """How a calibration measured on slowed cores (:func:`slowed_probes`) is named wherever it is shown: its
    reference probe's and its GEMM peak's GFLOP/s."""
    return (f"measured on slowed cores (its reference probe's GEMM at {probe_gflops:.1f} GFLOP/s, "
            f"{probe_gflops / peak_gflops:.0%} of the {peak_gflops:.1f} GFLOP/s peak it measured, below "
            f"{PROBE_PEAK_LIMIT:.0%})")


def calibrated_gemm_rates(record: dict | None) -> dict[int, tuple[str, float]]:
    """What the guards and ``calibrate --check`` compare with: the GEMM rate (GFLOP/s) of a calibration's
    reference probe by thread count, the faster of its start and its end (:func:`gemm_probe_rates`), from the
    calibration's raw record (``record``; None or a record without the probe: none)."""
    try:
        return gemm_probe_rates((record or {}).get("robustness") or {}, fastest=True)
    except (TypeError, AttributeError, ValueError):
        return {}


def slowed_calibration(record: dict | None, threads: int) -> tuple[float, float] | None:
    """(the reference probe's FLOP/s, the GEMM peak's) of a calibration measured on slowed cores on ``threads``
    threads: its probe, the faster of its start and its end, below :data:`PROBE_PEAK_LIMIT` of the GEMM peak it
    measured on as many threads (:func:`slowed_probes`): a calibration ``hetspec calibrate`` writes only with
    ``--force`` (and wrote with a warning before it refused them); None otherwise, or where ``record`` (the
    calibration's raw measurements) has neither."""
    record = record or {}
    try:
        peaks = {w["threads"]: float(w["peak_flops_per_s"]) for w in (record.get("all_threads"),
                                                                       record.get("one_thread"))
                 if isinstance(w, dict) and w.get("threads") and w.get("peak_flops_per_s")}
    except (TypeError, ValueError):
        return None
    slowed = slowed_probes(calibrated_gemm_rates(record), peaks).get(threads)
    return slowed[1:] if slowed is not None else None


def calibrated_gemm_gflops(platform, threads: int) -> float | None:
    """:func:`calibrated_gemm_rates` of ``platform``'s calibration (its raw measurements, next to the platform
    file) on ``threads`` threads; None where it has none."""
    from real.validation.calibration.host_facts import raw_record

    rate = calibrated_gemm_rates(raw_record(platform)).get(threads)
    return rate[1] if rate else None


def machine_drift(dev, threads: int, triad_bytes: int | None = None, gemm_calibrated: float | None = None) -> dict:
    """The reference probe re-timed now, against the calibration of ``dev``: how far the machine's
    state (load, clocks) has moved since ``hetspec calibrate`` measured it (about two seconds).
    ``gemm_calibrated``: the calibration's GEMM rate (:func:`calibrated_gemm_gflops`), when it has one."""
    from real.validation.calibration.host_facts import DRAM_WORKING_SET_LLC, llc_bytes

    probe = reference_probe(threads, triad_bytes or DRAM_WORKING_SET_LLC * llc_bytes()[0])
    then = dev.bare_cache_overhead_s * 1e6
    out = {"now_us": probe["op_us"], "calibrated_us": then, "change": change(probe["op_us"], then),
           "triad_now_gbps": probe["triad_gbps"], "triad_calibrated_gbps": dev.mem_bw_gbps,
           "triad_change": change(probe["triad_gbps"], dev.mem_bw_gbps), "warning": DRIFT_WARNING,
           "limit": CALIBRATION_CHANGE_LIMIT, "probe": probe,
           "omp_wait_policy": openmp_label()}
    if gemm_calibrated:
        out.update(gemm_now_gflops=probe["gemm_gflops"], gemm_calibrated_gflops=gemm_calibrated,
                   gemm_change=change(probe["gemm_gflops"], gemm_calibrated))
    return out


def drift_moved(drift: dict) -> bool:
    """Whether any quantity of a drift record moved beyond its warning since the calibration."""
    return any(abs(drift.get(key) or 0.0) > drift["warning"] for key, _ in DRIFT_CHANGES)


def _worst_error(points: list[dict], random_rows: list[dict]) -> tuple[float, str]:
    worst, where = 0.0, ""
    for r in points:
        for key, what in (("step_error_signed", "step"), ("tps_error_signed", "tokens/s")):
            e = r.get(key)
            if e is not None and math.isfinite(e) and abs(e) > abs(worst):
                worst, where = e, f"{r['label']} {what}"
    for r in random_rows:
        e = r.get("error_signed")
        if e is not None and math.isfinite(e) and abs(e) > abs(worst):
            worst, where = e, f"{r['model']} q={r['tokens']} step"
    return worst, where


def calibration_moves(drift: dict | None, when: str) -> list[str]:
    """One phrase per quantity of a drift record (:func:`machine_drift`) further than
    :data:`CALIBRATION_CHANGE_LIMIT` from the calibration; none for no record."""
    out = []
    for key, label in DRIFT_CHANGES if drift is not None else ():
        c = drift.get(key)
        if c is not None and not abs(c) <= CALIBRATION_CHANGE_LIMIT:
            out.append(f"{label} {100 * c:+.0f} % vs calibration {when}")
    return out


class ChangedBeforeGrid(UntrustedMeasurement):
    """The reference probe before a validation's grid, taken with the cores quiet, already further than
    :data:`CALIBRATION_CHANGE_LIMIT` from the calibration: whatever the grid measured could not be a validation,
    so it is not run."""


def settled_drift(dev, threads: int, triad_bytes: int | None, gemm_calibrated: float | None, guard=None) -> dict:
    """:func:`machine_drift` before and after a validation's grid. With ``guard`` (a
    :class:`real.run.contention.Guard` of the grid's CPU runs) it is timed as the guard times a run: after the
    guard's probe reads the cores quiet, again while the probe after it reads them slowed
    (:func:`real.run.contention.guarded`), so a passing slowdown from outside does not stand as the machine's
    state; how long that took is kept under ``settled``."""
    from real.run.contention import guarded

    drift, record = guarded(guard, lambda _first: machine_drift(dev, threads, triad_bytes, gemm_calibrated),
                            item=0, repeat=0, first=True)
    if record is not None:
        drift["settled"] = {"waited_s": record.waited_s, "retakes": record.retakes, "contended": record.contended}
    return drift


def drift_after_grid(dev, threads: int, triad_bytes: int | None, gemm_calibrated: float | None,
                     guard=None) -> dict:
    """:func:`settled_drift` after a validation's grid: with the cores quiet as the probe before it, under a copy of
    ``guard`` that waits and retakes as the guard does but never gives up (:class:`real.run.contention.ContendedTooLong`
    here would throw away the grid the probe is there to judge); a probe still slowed is kept, marked contended."""
    return settled_drift(dev, threads, triad_bytes, gemm_calibrated,
                         replace(guard, give_up_s=None) if guard is not None else None)


#: Readings of the reference probe before a validation's grid, :data:`BEFORE_GRID_PAUSE_S` apart, before a machine
#: that reads changed since the calibration in every one of them stops the validation: on the 2-core development
#: machine (2026-11-29, 19:58) one reading put the fixed cost per operator at +66 % of a calibration finished a minute
#: before, with the GEMM rate at -1 %, and the next reading, a minute later, at +9 % (docs/validation.md).
BEFORE_GRID_READINGS = 3
#: Seconds between those readings: time for a passing job on the cores to end.
BEFORE_GRID_PAUSE_S = 20.0


def drift_before_grid(dev, threads: int, triad_bytes: int | None, gemm_calibrated: float | None, guard=None,
                      on_moved=None, readings: int | None = None, pause_s: float | None = None) -> dict:
    """:func:`settled_drift` before a validation's grid, read again (up to ``readings`` in all, ``pause_s`` apart)
    while it reads the machine changed since the calibration (:func:`calibration_moves`): a disturbance of one
    reading does not stop the validation, a lasting change still does (:func:`refuse_changed_before_grid` judges
    the last reading). What each reading that moved said is kept under ``earlier``, for the report;
    ``on_moved(phrases, pause_s)`` is told of each before the pause (progress). ``readings`` and ``pause_s``
    default to :data:`BEFORE_GRID_READINGS` and :data:`BEFORE_GRID_PAUSE_S`."""
    readings = BEFORE_GRID_READINGS if readings is None else readings
    pause_s = BEFORE_GRID_PAUSE_S if pause_s is None else pause_s
    earlier: list[str] = []
    for reading in range(1, readings + 1):
        drift = settled_drift(dev, threads, triad_bytes, gemm_calibrated, guard)
        moved = calibration_moves(drift, "before the grid")
        if not moved or reading == readings:
            break
        earlier.append("; ".join(moved))
        if on_moved is not None:
            on_moved(earlier[-1], pause_s)
        time.sleep(pause_s)
    if earlier:
        drift["earlier"] = earlier
    return drift


def refuse_changed_before_grid(drift: dict | None) -> None:
    """:class:`ChangedBeforeGrid` (exit status 3) when the reference probe before the grid (``drift``, None: no
    probe) reads the machine changed since the calibration (:func:`calibration_moves`): the grid's hour would buy
    numbers that cannot be a validation."""
    moved = calibration_moves(drift, "before the grid")
    if moved:
        raise ChangedBeforeGrid(f"not a validation: the machine changed since the calibration ({'; '.join(moved)}), "
                                "so the grid was not run: recalibrate (`hetspec calibrate`) with the machine quiet "
                                "and run it again")


def validation_verdict(before: dict | None, after: dict | None, points: list[dict],
                       random_rows: list[dict] = ()) -> dict:
    """Whether a validation's numbers are a validation: the reference probe before and after the grid
    within :data:`CALIBRATION_CHANGE_LIMIT` of the calibration and within :data:`PROBE_MOVE_LIMIT` of
    each other, and no error above :data:`ERROR_LIMIT`. Returns ``trusted``, ``reasons`` and the
    report's ``headline`` (None when trusted). ``before`` None: no probe was taken (a GPU run whose
    platform describes no host CPU), so only the errors decide."""
    moved = calibration_moves(before, "before the grid") + calibration_moves(after, "after the grid")
    if after is not None:
        moved += probe_moves(before["probe"], after["probe"], PROBE_MOVE_LIMIT, "during the grid")
    worst, where = _worst_error(points, list(random_rows))
    reasons = list(moved)
    if abs(worst) > ERROR_LIMIT:
        reasons.append(f"errors over {100 * ERROR_LIMIT:.0f} % ({where} {100 * worst:+.0f} %)")
    if not reasons:
        headline = None
    elif moved:
        headline = f"not a validation: the machine changed ({'; '.join(reasons)})"
    elif before is None:   # a GPU run on a platform that describes no host CPU
        headline = (f"not a validation: {reasons[0]}, and no reference probe re-timed the machine (the platform "
                    "describes no host CPU)")
    else:
        headline = (f"not a validation: {reasons[0]}, while the reference probe held within "
                    f"{100 * CALIBRATION_CHANGE_LIMIT:.0f} % of the calibration: recalibrate and run again")
    return {"trusted": not reasons, "reasons": reasons, "headline": headline, "worst_error": worst,
            "limits": {"calibration_change": CALIBRATION_CHANGE_LIMIT, "probe_move": PROBE_MOVE_LIMIT,
                       "error": ERROR_LIMIT}}


def load_host(platform: str):
    from hwmodels.loader import get_platform

    try:
        return get_platform(platform)
    except HetSpecError as exc:
        if platform == "host":
            raise HetSpecError("no host platform yet: run `hetspec calibrate` first (or pass --platform FILE)") from None
        raise exc


def shown_path(path) -> str:
    """How a report shows a file of this machine: ``~/...`` under the home folder, relative under the
    working folder, else its name (a report never carries the absolute paths of the machine it ran on)."""
    from pathlib import Path

    if path is None:
        return ""
    p = Path(path).expanduser().resolve()
    for base, prefix in ((Path.cwd().resolve(), ""), (Path.home().resolve(), "~/")):
        try:
            return prefix + str(p.relative_to(base))
        except ValueError:
            continue
    return p.name

