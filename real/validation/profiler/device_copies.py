"""Timing a callable on a device (the device drained before and after), and what the operator profile
measures with it beside the operators: the device's copy bandwidth and, on CUDA, its links to the host.
``settings``: a :class:`real.validation.profiler.profile_device.ProfileSettings` (its interleaved repeats)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from real.run.repeats import interleaved, median


def sync_device(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA); a CPU has none."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def wall_per_call(fn: Callable[[], object], device: torch.device, calls: int,
                  clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds per call of ``calls`` back-to-back calls (the device drained before and after)."""
    sync_device(device)
    t0 = clock()
    for _ in range(calls):
        fn()
    sync_device(device)
    return (clock() - t0) / calls


def copy_bandwidth(device: torch.device, nbytes: int, settings) -> float:
    """Bytes per second of a device-to-device copy (read + write counted)."""
    n = nbytes // 4
    a, b = torch.empty(n, device=device), torch.empty(n, device=device)
    a.fill_(1.0)
    b.copy_(a)   # first touch of the destination's pages, outside the timing
    runs = interleaved(1, settings.repeats, lambda *_: wall_per_call(lambda: b.copy_(a), device, 2))
    return 2 * n * 4 / median(r[0] for r in runs[0])


def link_timings(device: torch.device, settings) -> dict[str, dict[str, float]]:
    """CUDA: latency (4 KiB) and bandwidth (256 MiB) of host-to-device and device-to-host copies,
    pinned and pageable host memory."""
    out = {}
    for pinned in (True, False):
        for direction in ("h2d", "d2h"):
            row = {}
            for label, nbytes in (("latency_us", 4096), ("bw_gbps", 256 * 2**20)):
                host = torch.empty(nbytes // 4, pin_memory=pinned)
                dev = torch.empty(nbytes // 4, device=device)
                src, dst = (host, dev) if direction == "h2d" else (dev, host)
                runs = interleaved(1, settings.repeats,
                                   lambda *_: wall_per_call(lambda: dst.copy_(src, non_blocking=pinned), device, 3))
                s = median(r[0] for r in runs[0])
                row[label] = s * 1e6 if label == "latency_us" else nbytes / s / 1e9
            out[f"{direction}_{'pinned' if pinned else 'pageable'}"] = row
    return out
