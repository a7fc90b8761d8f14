"""Sanity warnings: a priced step whose model does not fit the device's memory under the chosen placement
(weights plus the KV cache of the batch and context) is still priced, since the roofline does not need it
to fit, but the output says so on one stderr line instead of staying silent."""

from __future__ import annotations

import sys

from hwmodels.platform import Device
from sim.model_spec import ModelSpec


def memory_warning(model: ModelSpec, device: Device, context: int, batch: int, tokens: int = 1,
                   dtype: str | None = None) -> str | None:
    """The warning line when ``model``'s weights and its KV cache for ``batch`` sequences of ``context`` +
    ``tokens`` positions exceed ``device``'s memory; None when they fit."""
    weights = model.weight_bytes(dtype)
    kv = model.kv_bytes_per_token(dtype) * (context + tokens) * batch
    if weights + kv <= device.mem_capacity_bytes:
        return None
    return (f"hetspec: warning: {model.name} needs {(weights + kv) / 1e9:.1f} GB on {device.name} (weights "
            f"{weights / 1e9:.1f} GB + KV cache {kv / 1e9:.1f} GB for batch {batch} x {context + tokens} positions) "
            f"but it has {device.mem_capacity_gb:g} GB: the time assumes it fits")


def warn_memory(model: ModelSpec, device: Device, context: int, batch: int, tokens: int = 1,
                dtype: str | None = None) -> None:
    """Print :func:`memory_warning` on stderr when there is one."""
    line = memory_warning(model, device, context, batch, tokens, dtype)
    if line:
        print(line, file=sys.stderr)
