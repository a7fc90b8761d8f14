"""Data types HetSpec prices, and their size in bytes per element."""

from __future__ import annotations

from hwmodels.errors import HetSpecError

#: Bytes per element. ``tf32`` is stored as fp32; ``bf8`` as in Tenstorrent's block-float 8.
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "tf32": 4.0,
    "fp16": 2.0,
    "bf16": 2.0,
    "fp8": 1.0,
    "bf8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "bf4": 0.5,
}


def check_dtype(dtype: str, where: str = "dtype") -> str:
    """Return ``dtype`` if HetSpec knows it, else raise one line listing the valid ones."""
    if dtype not in DTYPE_BYTES:
        raise HetSpecError(f"{where}: unknown dtype {dtype!r}; valid: {', '.join(DTYPE_BYTES)}")
    return dtype
