"""Streamed linears' row start-up: per token count M, the calibration's GEMM timings with the weight
streamed from DRAM fitted as ``2 M K N / rate + N * row cost`` (``gemm_row_ns_curve`` and the row-free
``gemm_efficiency_curve`` of a calibrated host, :mod:`real.validation.calibration.calibrate`)."""

from __future__ import annotations

from real.validation.calibration.host_facts import RowFit


def fit_rows(points) -> tuple[RowFit, ...]:
    """Per token count M, the streamed points of ``points`` fitted as ``2 M K N / rate + N * row_s`` (least
    squares, ``row_s`` >= 0): a small-M GEMM kernel reads its weight row by row and each row, a short
    stream of its own, costs a start-up beyond its bytes. Only where two row lengths K tell the two
    apart; an M whose fit gives no start-up is left out (its median rate stands)."""
    import numpy as np

    out = []
    for m in sorted({p.m for p in points}):
        at = [p for p in points if p.m == m]
        if len({p.k for p in at}) < 2:
            continue
        A = np.array([[2.0 * m * p.k * p.n, p.n] for p in at])
        y = np.array([p.seconds for p in at])
        (inv_rate, row_s), *_ = np.linalg.lstsq(A, y, rcond=None)
        if row_s <= 0 or inv_rate <= 0:
            continue
        miss = np.abs(A @ np.array([inv_rate, row_s]) - y) / y
        out.append(RowFit(m=m, flops_per_s=float(1.0 / inv_rate), row_s=float(row_s), shapes=len(at),
                          max_residual=float(np.max(miss)), median_residual=float(np.median(miss))))
    return tuple(out)


def row_free(curve, fits, peak: float) -> tuple[tuple[int, float], ...]:
    """The streamed curve with each fitted M's point replaced by the fit's row-free rate."""
    rate = {f.m: f.flops_per_s for f in fits}
    return tuple((m, round(min(rate[m] / peak, 1.0), 4) if m in rate else e) for m, e in curve)


def row_curve(fits, m_values) -> tuple[tuple[int, float], ...]:
    """``gemm_row_ns_curve``: ns per weight row at every calibrated M (0 where no start-up was fitted)."""
    row = {f.m: f.row_s for f in fits}
    return tuple((m, round(row.get(m, 0.0) * 1e9, 2)) for m in m_values)
