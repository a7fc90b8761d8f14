"""ALSpec's data: the kernel tables, precision configurations and kernel layouts of "Attention-Level
Speculation" (Cai, Vora, Zhang, O'Connor, Jeffrey; ICML 2025), read from ``sim/presets/alspec_kernels.json``.

That file transcribes the paper's N150 kernel tables (App. F, Tables 4-7) and its H100 projection
(Table 3), and names the tensor dtypes (``precisions``) and the kernel layouts of a decoder layer
(``runtimes``) the strategy prices; every entry carries its ``source``. This module only reads
and checks them: the formulas are :mod:`sim.strategies.alspec_formulas`, the strategy
:mod:`sim.strategies.alspec`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from hwmodels.dtypes import DTYPE_BYTES, check_dtype
from hwmodels.errors import HetSpecError, UnknownNameError
from hwmodels.platform import Device

#: The kernel tables of ALSpec App. F and Table 3, and named precision configurations.
KERNELS_FILE = "presets/alspec_kernels.json"
KERNELS_FORMAT = "hetspec-alspec-kernels/1"
#: Precision name meaning "every tensor in the model's (or problem's) dtype".
MODEL_PRECISION = "model"


# ---------------------------------------------------------------------- data: kernel tables, precisions
@lru_cache(maxsize=1)
def kernel_tables() -> dict:
    """ALSpec's kernel tables (App. F Tables 4-7, Table 3) and precision configs (``alspec_kernels.json``)."""
    path = Path(str(resources.files("sim").joinpath(KERNELS_FILE)))
    data = json.loads(path.read_text())
    if data.get("format") != KERNELS_FORMAT:
        raise HetSpecError(f"{path}: expected format {KERNELS_FORMAT!r}")
    return data


@dataclass(frozen=True)
class Precision:
    """Storage dtype of every tensor class of a layer, and the dtype the math runs at."""

    name: str
    activations: str
    kv_cache: str
    math: str
    qkv: str
    o_proj: str
    gate_up: str
    down: str
    lm_head: str
    embedding: str

    def bytes(self, field_: str) -> float:
        return DTYPE_BYTES[getattr(self, field_)]


def precision_names() -> tuple[str, ...]:
    return (MODEL_PRECISION, *kernel_tables()["precisions"])


def get_precision(name: str, model_dtype: str) -> Precision:
    """A named precision config, or ``model``: every tensor in ``model_dtype``."""
    if name == MODEL_PRECISION:
        d = check_dtype(model_dtype)
        return Precision(name, d, d, d, d, d, d, d, d, d)
    table = kernel_tables()["precisions"]
    if name not in table:
        raise UnknownNameError("ALSpec precision", name, precision_names())
    entry = {k: v for k, v in table[name].items() if k != "source"}
    return Precision(name=name, **{k: check_dtype(v, f"precision {name}.{k}") for k, v in entry.items()})


# ---------------------------------------------------------------------- data: kernel layouts (runtimes)
@dataclass(frozen=True)
class Runtime:
    """How a software stack lays out one decoder layer's kernels (``alspec_kernels.json`` ``runtimes``)."""

    name: str
    fused_gate_up: bool          # gate and up projections are one GEMM
    fused_residual_norm: bool    # the residual add runs inside the next norm kernel
    collective: str              # "ring": all-gather + reduce-scatter rings; "one-shot": all-reduce reading every peer
    fd_launches: int             # kernels of one flash decode (a split-KV merge is a second launch)
    tilized_activations: bool    # activations move as a tile of ``token_tile`` rows


RUNTIME_COLLECTIVES = ("ring", "one-shot")


def runtime_names() -> tuple[str, ...]:
    return tuple(kernel_tables()["runtimes"])


def get_runtime(name: str) -> Runtime:
    table = kernel_tables()["runtimes"]
    if name not in table:
        raise UnknownNameError("ALSpec runtime", name, runtime_names())
    entry = {k: v for k, v in table[name].items() if k != "source"}
    runtime = Runtime(name=name, **entry)
    if runtime.collective not in RUNTIME_COLLECTIVES:
        raise HetSpecError(f"ALSpec runtime {name}: collective must be one of {', '.join(RUNTIME_COLLECTIVES)}")
    return runtime


def default_runtime(device: Device) -> str:
    """GPUs run the paper's GPU stack (SGLang); other devices the TT-Metalium kernel layout."""
    return "sglang" if device.kind == "gpu" else "tt-metalium"
