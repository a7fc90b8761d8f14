"""Roofline timing of one operator on one device.

time = launches * op_overhead + max(compute time, memory time), where

- op_overhead is the device's fixed cost per launch, times its masked-pass factor in a forward of
  several new tokens per sequence (:meth:`hwmodels.platform.Device.overhead_s`);

- compute time = effective FLOPs / (peak FLOP/s at the dtype * achievable efficiency at M tokens),
  plus, for a linear of ``rows`` weight rows streaming from memory, ``rows`` times the device's
  row start-up cost at M tokens (``gemm_row_ns_curve``, where it is measured);
  effective FLOPs round the token dimension up to the device's tile (``token_tile``), so latency
  rises in steps, and price tree-masked work either as the dense block or, where the device has a
  sparse kernel, as the kept fraction at the sparse kernel's efficiency (whichever is cheaper);
- memory time = bytes / achievable bandwidth (the device alone unless the caller passes the
  bandwidth it gets under contention, see :mod:`hwmodels.contention`).

Because achievable bandwidth never exceeds the peak, a memory-bound operator is never faster than
bytes / peak bandwidth (the physical limit; tested).

``resident=True`` prices an operator of a model whose weights stay in the device's last-level
cache (:meth:`hwmodels.platform.Device.holds`): memory time at the cache bandwidth, compute at
the in-cache GEMM efficiency and the in-cache fixed cost per launch, where the device describes
its cache (otherwise it changes nothing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hwmodels.errors import HetSpecError
from hwmodels.platform import Device


@dataclass(frozen=True)
class OpTiming:
    time_s: float
    compute_s: float
    memory_s: float
    overhead_s: float
    effective_flops: float

    @property
    def bound(self) -> str:
        """``"compute"`` or ``"memory"``: which roof limits the operator."""
        return "compute" if self.compute_s > self.memory_s else "memory"


def quantized_tokens(tokens: int, tile: int) -> int:
    """Tokens the hardware actually computes: ``tokens`` rounded up to a multiple of ``tile``."""
    return int(math.ceil(tokens / tile) * tile) if tokens > 0 else 0


def effective_flops(device: Device, flops: float, tokens: int | None = None, density: float = 1.0) -> float:
    """FLOPs the device spends: tile-quantized, and sparse-priced where that is cheaper."""
    if tokens:
        flops = flops * quantized_tokens(tokens, device.token_tile) / tokens
    if density < 1.0 and device.sparse_attn_efficiency > 0.0:
        flops = min(flops, flops * density / device.sparse_attn_efficiency)
    return flops


def achievable_bw(device: Device) -> float:
    """Bytes/s the device streams on its own (peak times efficiency)."""
    return device.mem_bw_bytes_per_s * device.bw_efficiency


def roofline_time(device: Device, flops: float, nbytes: float, dtype: str, tokens: int | None = None,
                  density: float = 1.0, launches: int = 1, bw_bytes_per_s: float | None = None,
                  resident: bool = False, rows: int = 0, batched: bool = False,
                  masked_pass: bool = False) -> OpTiming:
    """Time of one operator: ``flops`` FLOPs and ``nbytes`` bytes on ``device`` at ``dtype``.

    ``tokens`` is the GEMM M dimension (for tile quantization and the efficiency curve),
    ``density`` the fraction of a tree-masked block that is kept, ``launches`` the kernel
    launches / dispatches the operator costs, ``bw_bytes_per_s`` the bandwidth available to it
    (default: the device alone), ``resident`` whether the weights sit in the last-level cache
    (then the cache bandwidth replaces ``bw_bytes_per_s``: cache hits do not contend for DRAM),
    ``rows`` the weight rows of a linear layer (:attr:`sim.step_graph.Op.weight_rows`; 0 otherwise),
    ``batched`` whether it is a batched GEMM over stacked weights (:attr:`sim.step_graph.Op.batched`:
    the device's batched curves price it where it has them), ``masked_pass`` whether the operator belongs
    to a forward of several new tokens per sequence, which runs under an attention mask (its fixed costs
    are the device's times ``masked_overhead_factor``).
    """
    if flops < 0 or nbytes < 0:
        raise HetSpecError(f"operator FLOPs and bytes must be >= 0 (got {flops}, {nbytes})")
    if not 0.0 < density <= 1.0:
        raise HetSpecError(f"density must be in (0, 1] (got {density})")
    bw = achievable_bw(device) if bw_bytes_per_s is None else bw_bytes_per_s
    if resident and device.resident_bw_bytes_per_s() is not None:
        bw = device.resident_bw_bytes_per_s()
    if bw <= 0:
        raise HetSpecError(f"bandwidth must be > 0 (got {bw})")
    eff_flops = effective_flops(device, flops, tokens, density)
    compute_s = eff_flops / (device.peak_flops_per_s(dtype)
                             * device.compute_efficiency_at(tokens or 1, resident, batched, dtype))
    compute_s += device.row_start_s(tokens, rows, resident, batched, dtype)
    memory_s = nbytes / bw
    overhead_s = launches * device.overhead_s(resident, masked_pass)
    return OpTiming(overhead_s + max(compute_s, memory_s), compute_s, memory_s, overhead_s, eff_flops)
