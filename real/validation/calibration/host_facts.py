"""What ``hetspec calibrate`` knows of this machine before and after measuring it: the CPU, its
cores, last-level cache and memory, the measurement settings, and the record of one calibration."""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hwmodels.errors import HetSpecError

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
    #: tokens each timed probe decode loop decodes (None: real.validation.calibration.microbench.LOOP_NEW_TOKENS, 96); fewer
    #: give fewer steps to each median and only suit a glance or a test
    loop_new_tokens: int | None = None
    label: str = "full"
    rounds: int = 3        # interleaved rounds of the benchmarks (real.run.repeats.interleaved)
    #: the batched GEMM of HetSpec's Medusa heads: token counts, (K, N) shapes (N over all heads), heads
    batched_m_values: tuple[int, ...] = (1, 2, 4, 8, 16)
    batched_shapes: tuple[tuple[int, int], ...] = ((256, 16384), (384, 16384), (512, 16384), (384, 8192))
    batched_heads: int = 4
    #: the low-precision (bf16, fp16) linears' own streamed curves: token counts and (K, N) shapes
    dtype_m_values: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 256)
    dtype_shapes: tuple[tuple[int, int], ...] = ((384, 1536), (1536, 384), (1024, 1024))

    def per_round(self, repeats: int) -> int:
        """Repeats of a benchmark in each round: ``repeats`` split over :attr:`rounds` (at least one)."""
        return max(1, -(-repeats // self.rounds))

    def medians(self, repeats: int, rounds: int | None = None) -> str:
        """How a source names the statistic of a benchmark of ``repeats`` repeats (in ``rounds``: :attr:`rounds`)."""
        return f"median of {rounds or self.rounds} interleaved rounds x {self.per_round(repeats)}"


#: Token counts 1..256 (the verification widths and draft lengths of the methods), dense where verification widths and draft lengths live
#: (the curve is read as a step function, and CPU GEMM kernels change path between small M: here
#: M = 2 runs slower per row than M = 3 or 4), and weight shapes around the demo and random-weight
#: models' layers (hidden 384-1024, MLP 1024-4096); 2048 x 2048 gives the peak. Row lengths K from
#: 384 to 2048 let the row fit (:class:`RowFit`) tell a weight row's start-up from its bytes. The
#: batched GEMM of the Medusa heads (4 heads of the demo's 4096-word vocabulary, rows of 256-512) is
#: timed at the few token counts its proposals feed (one accepted token per sequence).
FULL = Settings(m_values=(1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128, 192, 256),
                shapes=((384, 1536), (1536, 384), (512, 512), (512, 2048), (2048, 512), (1024, 1024), (2048, 2048)),
                repeats=7, warmup=2)
QUICK = Settings(m_values=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 256),
                 shapes=((384, 1536), (512, 512), (1024, 1024)),
                 repeats=5, warmup=1, overhead_repeats=5, loop_repeats=3, loop_new_tokens=64, label="quick",
                 batched_m_values=(1, 4, 16), batched_shapes=((256, 16384), (512, 16384)),
                 dtype_shapes=((384, 1536), (1024, 1024)))


def settings_for(quick: bool) -> Settings:
    return QUICK if quick else FULL


# ---------------------------------------------------------------------------- host facts
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


def effective_cache(curve, dram_bw: float) -> tuple[int, float]:
    """``(bytes, bytes/s)`` of the cache this process really gets: where the bandwidth falls through the geometric
    midpoint of the fastest one and DRAM's after the largest probed set above it (log-log towards the next set: a knee
    between two sets rounds to neither), and the median bandwidth of the sets up to it (none above: the first set)."""
    if not curve:
        return 0, dram_bw
    cut = math.sqrt(max(bw for _, bw in curve) * dram_bw)
    inside = [(ws, bw) for ws, bw in curve if bw >= cut]
    if not inside:
        return int(curve[0][0]), float(curve[0][1])
    size, bw = max(inside)
    nxt, low = min([(ws, b) for ws, b in curve if ws > size], default=(size, bw / 2))   # none: the largest set
    rate = float(statistics.median(b for ws, b in curve if ws <= size))
    return int(size * (nxt / size) ** (math.log(bw / cut) / math.log(bw / low))), rate


def held_weight_set(one_token, multi_token=()) -> tuple[int, float] | None:
    """(bytes, bytes/s) of the largest weight set linears still read from the cache in one-token passes
    (``one_token``: :func:`real.validation.calibration.weight_cache.weight_cache_curve` points) and, where measured,
    in multi-token passes (``multi_token``): per curve where it falls through the geometric midpoint of its fastest
    set and its slow end (:func:`effective_cache`; the slow end the median rate of its largest third of sets: a
    multi-token curve falls by 2x only, so one noisy slow point would move the midpoint), then the smaller of the
    two; the rate is the one-token curve's at the largest set within it. None without a one-token curve."""
    if not one_token:
        return None

    def held(curve) -> int:
        curve = sorted(curve)
        tail = curve[len(curve) - max(1, len(curve) // 3):]
        return effective_cache(curve, statistics.median(bw for _, bw in tail))[0]

    size = min(held(curve) for curve in (one_token, multi_token) if curve)
    return size, dict(one_token)[max(ws for ws, _ in one_token if ws <= size)]


# ---------------------------------------------------------------------------- measurement
@dataclass(frozen=True)
class WorkerMeasurement:
    """Everything measured with one thread count."""

    threads: int
    gemm_warm: tuple              # real.validation.calibration.microbench.GemmPoint rows, weights in the cache
    gemm_cold: tuple              # the same, weights streamed from DRAM
    peak_flops_per_s: float
    efficiency_curve: tuple[tuple[int, float], ...]        # cold: a model larger than the cache
    cache_efficiency_curve: tuple[tuple[int, float], ...]  # warm: a model resident in the cache
    dram_bw_bytes_per_s: float
    cache_bw_bytes_per_s: float
    cache_bytes: int              # effective cache: the largest working set still streaming from it
    cache_curve: tuple            # (working-set bytes, triad bytes/s) probed
    dispatch_s: float
    overhead: object              # real.validation.calibration.microbench.LayerOverhead
    loops: tuple = ()             # real.validation.calibration.microbench.LoopSample rows: the real decode loops on the probe
    loop_rounds: int = 0          # the rounds they were timed in (0: the benchmarks' rounds)
    streaming: object = None      # real.validation.calibration.stream_step_probe.StreamingProbe: a step of a model larger than the cache
    spread: dict = field(default_factory=dict)   # machine.SPREAD_KEYS -> max / min - 1 over the rounds
    dtype_rates: tuple = ()       # real.validation.calibration.microbench.DtypeRate rows: bf16 / fp16 GEMMs at the fp32 peak's shape
    row_fits: tuple = ()          # RowFit per token count: streamed linears' row-free rate and row start-up
    gemm_batched: tuple = ()      # GemmPoint rows of the heads' batched GEMM, weights streamed from DRAM
    batched_fits: tuple = ()      # RowFit per token count of those
    batched_efficiency_curve: tuple = ()   # their rate / peak per token count (row-free where fitted)


@dataclass(frozen=True)
class RowFit:
    """Linears of ``m`` tokens with the weight streamed from DRAM, fitted as ``2 m K N / flops_per_s + N *
    row_s`` over the calibration's (K, N) shapes: a row-free rate and a start-up cost per weight row."""

    m: int
    flops_per_s: float
    row_s: float
    shapes: int                   # (K, N) shapes fitted
    max_residual: float           # largest |fit - measured| / measured over them
    median_residual: float


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
    #: the reference probe at the start and end, the spreads, the verdict (real.validation.trust)
    robustness: dict = field(default_factory=dict)
    #: torch threads and OpenMP settings the calibration ran with (and the runs it prices run with)
    runtime: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        out = asdict(self)
        out["settings"] = asdict(self.settings)
        return out


@dataclass(frozen=True)
class CalibrationProbes:
    """Probes a calibration runs beyond its core micro-benchmarks, and what they add to its platform:
    ``measure(settings) -> dict`` (kept in the calibration's ``extra`` record, run while the budget leaves
    room) and ``extend(cal, devices, loops, links, workers) -> (loops, links)`` (the platform's loop costs and
    links with what they measured; :func:`real.validation.calibration.host_platform.build_platform`). The
    heterogeneous ones are :data:`real.validation.calibration.hetero_probes.HETERO_PROBES`."""

    measure: Callable[[Settings], dict]
    extend: Callable[..., tuple[dict, tuple]]


def raw_path(platform_path: str | Path) -> Path:
    """The raw-measurement file ``hetspec calibrate`` writes next to the platform file ``platform_path``."""
    p = Path(platform_path)
    return p.with_name(p.stem + RAW_SUFFIX)


def raw_record(platform) -> dict | None:
    """The raw measurements of the calibration behind ``platform`` (read from next to its file), or None
    where it has no file, no record or an unreadable one."""
    import json

    if not getattr(platform, "path", ""):
        return None
    try:
        record = json.loads(raw_path(platform.path).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None
