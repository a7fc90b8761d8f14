"""How far a measurement of this machine can be trusted: one small API for calibrate, validate and the repeats.

A shared machine changes under a measurement (other jobs, clocks, the scheduler taking a core away from a
multi-threaded operator). Nothing here waits for quiet or refuses by default; it measures how much the
machine moved and says how far that lets a figure be judged:

- :func:`spread` (max / min - 1) of a quantity over a calibration's interleaved rounds, and
  :func:`spread_problems`, the quantities beyond :data:`SPREAD_LIMIT` (a calibration is labelled with them;
  ``hetspec calibrate --strict`` refuses it, :class:`MachineChanged`);
- :func:`band` ((P90 - P10) / median), the noise band of a run's baseline timings: an absolute error is
  judged only where the band is narrower than its target (:mod:`real.validation.verdict`);
- :func:`contention_guard`, the probe of the heterogeneous section's and the full operator profile's timed
  runs (:mod:`real.run.contention`), whose reference is a compute-bound GEMM timed before them
  (:func:`gemm_rate`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hwmodels.errors import HetSpecError, UntrustedMeasurement

#: A key measurement of a calibration whose interleaved rounds spread more than this (max / min - 1): the
#: calibration is labelled as measured on a noisy machine (refused with ``--strict``).
SPREAD_LIMIT = 1.0
#: The spread of a calibration's key measurements, and how a line names it.
SPREAD_KEYS = {"gemm_cache": "GEMM rate (weights in the cache)", "gemm_dram": "GEMM rate (weights from DRAM)",
               "triad_dram": "DRAM triad bandwidth", "triad_cache": "cache triad bandwidth",
               "op_overhead": "fixed cost per operator", "host_loops": "decode-loop step time (host costs)"}
#: The GEMM of the guard's probe: (tokens, d_in, d_out), fp32, its 4 MiB weight in the cache (compute-bound on
#: a CPU), ``GEMM_PROBE_CALLS`` calls a sample.
GEMM_PROBE_SHAPE = (128, 1024, 1024)
GEMM_PROBE_CALLS = 4
#: The contention guard's probe: :func:`gemm_rate` with this many samples (about 25 ms), and the share of its
#: reference below which the cores count as slowed from outside (quiet probes read within about a tenth of
#: their median on a 2-core machine, slowed ones a third to three quarters of it).
GUARD_PROBE_SAMPLES = 3
GUARD_LIMIT = 0.2
#: The longest stretch of slow probes a guarded run waits and retakes through before it stops (exit status 3):
#: several times a passing slowdown of a minute or two.
GUARD_GIVE_UP_S = 900.0


class MachineChanged(UntrustedMeasurement):
    """A measurement refused on request (``--strict``): one line saying what moved and by how much."""


def spread(values) -> float:
    """max / min - 1 of positive values (0 for fewer than two; infinity with a non-positive one)."""
    values = [float(v) for v in values]
    if len(values) < 2:
        return 0.0
    low = min(values)
    return max(values) / low - 1.0 if low > 0 else float("inf")


def spread_problems(robustness: dict, limit: float = SPREAD_LIMIT) -> list[str]:
    """One phrase per key measurement of a calibration whose spread over its rounds is beyond ``limit``
    (``robustness``: the record :func:`real.validation.calibration.calibrate.measure` keeps)."""
    out = []
    for label, spreads in (robustness.get("spread") or {}).items():
        for key, s in spreads.items():
            if not s <= limit:
                out.append(f"{label}: {SPREAD_KEYS.get(key, key)} spread {100 * s:.0f} % over its rounds "
                           f"(limit {100 * limit:.0f} %)")
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of the finite ``values``, linear between order statistics (NaN when none)."""
    xs = sorted(float(v) for v in values if math.isfinite(v))
    if not xs:
        return float("nan")
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def band(values: Sequence[float]) -> float:
    """``(P90 - P10) / median`` of positive ``values``: the relative spread of one quantity (0 for one value)."""
    med = percentile(values, 0.5)
    if not med > 0:
        return float("nan")
    return (percentile(values, 0.9) - percentile(values, 0.1)) / med


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


def contention_guard(threads: int, reference: float | None = None, give_up_s: float | None = GUARD_GIVE_UP_S):
    """The :class:`real.run.contention.Guard` of timed runs on ``threads`` threads: its reference is the GEMM
    rate ``reference`` (FLOP/s of :func:`gemm_rate`), else one timed now. It stops the run after ``give_up_s``
    of slow probes, unbroken or nearly (None: never)."""
    from functools import partial

    from real.run.contention import Guard

    ref = reference if reference else gemm_rate(threads)
    return Guard(probe=partial(gemm_rate, threads, GUARD_PROBE_SAMPLES), reference=ref, limit=GUARD_LIMIT,
                 give_up_s=give_up_s,
                 source=f"timed before the runs, a {'x'.join(map(str, GEMM_PROBE_SHAPE))} F.linear on {threads} "
                        f"thread{'s' if threads > 1 else ''}")


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

