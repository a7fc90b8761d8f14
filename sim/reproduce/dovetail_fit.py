"""The Dovetail CPU's small-M SGEMM cost, solved from one dataset's Table I pair (``hetspec reproduce dovetail``).

Dovetail's verification latency is affine in the verified tokens (Fig. 4, §II-B): PyTorch's fp32 SGEMM with
M >= 2 rows costs its FLOPs at ``e_inf`` of the base-clock peak plus its weight bytes once more at ``B_x``.
Written as an efficiency over the tile-quantized rows Mq = ceil(M / tile) x tile, that is
``e(M) = e_inf Mq / (Mq + M0)`` with ``M0 = 2 x peak x e_inf / B_x``; M = 1 (GEMV) keeps ``e_inf``.

The two numbers are solved from EAGLE-2's speedups with 16 and 60 verified tokens on ONE dataset of Table I
(:data:`FIT_DATASET`); the other datasets' rows and every choice on them are then predicted. The presets
``xeon4214r-rtx2080super`` and ``xeon4310-rtx3090`` carry the curve this module writes (a test checks it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hwmodels.platform import Platform

#: The dataset whose Table I EAGLE-2 pair (T = 0) fixes the curve. GSM8K: neither Table II nor Table III
#: (the tables the choices come from) measures it, so no reported choice rests on its own figure.
FIT_DATASET = "gsm8k"
#: Tokens the curve lists one by one, then the coarser points beyond (the optimizer searches 2..60).
ROWS_DENSE = 64
ROWS_COARSE = (80, 96, 128, 192, 256, 384, 512, 1024, 2048, 4096)


@dataclass(frozen=True)
class GemmCost:
    e_inf: float        # asymptotic SGEMM efficiency of the base-clock peak
    b_x_gbps: float     # GB/s at which the M >= 2 path pays its weight bytes once more

    def m0(self, peak_tflops: float) -> float:
        return 2 * peak_tflops * 1e12 * self.e_inf / (self.b_x_gbps * 1e9)

    def curve(self, peak_tflops: float, tile: int) -> tuple[tuple[int, float], ...]:
        m0 = self.m0(peak_tflops)
        points = [(1, self.e_inf)]
        for m in (*range(2, ROWS_DENSE + 1), *ROWS_COARSE):
            mq = math.ceil(m / tile) * tile
            points.append((m, round(self.e_inf * mq / (mq + m0), 4)))
        return tuple(points)


def with_cost(platform: Platform, cost: GemmCost, device: str = "cpu") -> Platform:
    """``platform`` with its CPU's efficiency curve replaced by ``cost``'s."""
    cpu = platform.device(device)
    curve = cost.curve(cpu.peak_flops_per_s("fp32") / 1e12, cpu.token_tile)
    return platform.with_device(replace(cpu, gemm_efficiency_curve=curve))


def solve(speedup_at, targets: tuple[float, float], start: GemmCost = GemmCost(0.8, 35.0)) -> GemmCost:
    """The cost whose predicted (16-token, 60-token) speedups ``speedup_at(cost)`` equal ``targets``
    (two equations, two unknowns; Newton's method on a finite-difference Jacobian)."""
    x = [start.e_inf, start.b_x_gbps]
    for _ in range(40):
        f = [a - b for a, b in zip(speedup_at(GemmCost(*x)), targets)]
        if max(abs(v) for v in f) < 5e-4:
            break
        jac = []
        for i, h in enumerate((1e-2, 0.5)):   # steps well above the curve's 4-digit rounding
            xh = list(x)
            xh[i] += h
            jac.append([(a - b) / h for a, b in zip(speedup_at(GemmCost(*xh)), speedup_at(GemmCost(*x)))])
        (a, c), (b, d) = jac          # columns: d f / d e_inf, d f / d B_x
        det = a * d - b * c
        x = [x[0] - (d * f[0] - b * f[1]) / det, x[1] - (-c * f[0] + a * f[1]) / det]
    return GemmCost(round(x[0], 4), round(x[1], 2))
