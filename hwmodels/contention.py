"""Memory-bandwidth contention inside a memory domain.

Devices that share DRAM share its bandwidth. A device alone streams at
``min(device bw, domain bw) * device bw_efficiency``. When several stream at the same time they
get, together, at most ``domain bw * contention_efficiency``; if their standalone demands exceed
that ceiling, the ceiling is shared max-min fairly (water-filling): nobody gets more than it
would alone, and what one cannot use goes to the others. So a memory-bound operator slows down
exactly when its neighbour streams at the same time and the pair's demand exceeds the shared
ceiling; contention never makes anything faster.
"""

from __future__ import annotations

from collections.abc import Mapping

from hwmodels.platform import Platform


def standalone_bw(platform: Platform, device: str) -> float:
    """Bytes/s ``device`` streams with nobody else in its memory domain active."""
    dev = platform.device(device)
    peak = dev.mem_bw_bytes_per_s
    domain = platform.domain_of(device)
    if domain is not None:
        peak = min(peak, domain.bw_bytes_per_s)
    return peak * dev.bw_efficiency


def share_bandwidth(ceiling: float, demands: Mapping[str, float]) -> dict[str, float]:
    """Max-min fair shares of ``ceiling`` for the given demands (bytes/s each)."""
    shares = {k: 0.0 for k in demands}
    left = dict(demands)
    remaining = ceiling
    while left:
        fair = remaining / len(left)
        satisfied = {k: v for k, v in left.items() if v <= fair}
        if not satisfied:
            for k in left:
                shares[k] = fair
            return shares
        for k, v in satisfied.items():
            shares[k] = v
            remaining -= v
            del left[k]
    return shares

