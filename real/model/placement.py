"""Where a single-device method runs: a torch device, a dtype and whether its forwards are replayed
as CUDA graphs (``--device``, ``--dtype``, ``--graphs`` of ``hetspec run``, ``run --compare``,
``profile-acceptance``, ``validate``, ``demo``).

The names are checked without torch (:func:`check_device_name`, :func:`check_dtype_name`,
:func:`check_graphs`), so a bad value fails in milliseconds; :func:`resolve` then asks torch what
this machine has. Defaults: ``cuda:0`` where CUDA exists, else ``cpu``; fp32; CUDA graphs on a CUDA
device, eager forwards on the CPU. fp16 and bf16 are for CUDA; on the CPU bf16 runs (slowly: no
bf16 matrix units on this project's machine, see docs/decode-methods.md) and fp16 is refused.
The heterogeneous methods place their work with ``--workers`` instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hwmodels.errors import HetSpecError

DEVICE_NAME = re.compile(r"^(cpu|cuda(?::(\d+))?)$")
#: ``--dtype`` names -> torch dtype attribute names.
DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
GRAPH_MODES = ("auto", "on", "off")


def check_device_name(text: str | None) -> str | None:
    """``cpu``, ``cuda`` or ``cuda:N`` (``cuda`` is ``cuda:0``); None stays None (the default)."""
    if text is None:
        return None
    name = str(text).strip()
    m = DEVICE_NAME.match(name)
    if not m:
        raise HetSpecError(f"--device {text!r}: give cpu, cuda or cuda:N")
    return "cpu" if name == "cpu" else f"cuda:{int(m.group(2) or 0)}"


def check_dtype_name(text: str | None) -> str | None:
    if text is None:
        return None
    if text not in DTYPES:
        raise HetSpecError(f"--dtype {text!r}: give one of {', '.join(DTYPES)}")
    return text


def check_graphs(text: str) -> str:
    if text not in GRAPH_MODES:
        raise HetSpecError(f"--graphs {text!r}: give one of {', '.join(GRAPH_MODES)}")
    return text


@dataclass(frozen=True)
class Placement:
    device: str          # "cpu" or "cuda:N"
    dtype: str           # fp32, fp16 or bf16
    graphs: bool         # forwards through CUDA graphs (real.model.executor)

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    def torch_dtype(self):
        import torch

        return getattr(torch, DTYPES[self.dtype])

    def describe(self) -> str:
        return f"{self.device} {self.dtype}{', CUDA graphs' if self.graphs else ''}"


def default_threads() -> int:
    """Torch intra-op threads of a CPU run when ``--threads`` is not given: ``$OMP_NUM_THREADS`` where
    set, else every core this process may use (its affinity mask)."""
    import os

    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def default_device() -> str:
    """``cuda:0`` where torch sees a CUDA device, else ``cpu``."""
    import torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"


def gpu_facts() -> dict | None:
    """The first CUDA device's name, memory and versions, or ``None`` without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "memory_mib": props.total_memory // 2**20, "cuda": torch.version.cuda,
            "capability": f"{props.major}.{props.minor}", "count": torch.cuda.device_count()}


def resolve(device: str | None = None, dtype: str | None = None, graphs: str = "auto") -> Placement:
    """The placement of ``--device``/``--dtype``/``--graphs`` on this machine; one line if it cannot run here."""
    import torch

    name = check_device_name(device) or default_device()
    dtype = check_dtype_name(dtype) or "fp32"
    check_graphs(graphs)
    if name.startswith("cuda"):
        index = int(name.split(":")[1])
        if not torch.cuda.is_available():
            raise HetSpecError(f"--device {name}: this machine has no CUDA device "
                               f"(torch.cuda.is_available() is False; torch {torch.__version__})")
        if index >= torch.cuda.device_count():
            raise HetSpecError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif dtype == "fp16":
        raise HetSpecError("--dtype fp16 runs on CUDA only; on the CPU use fp32 or bf16")
    if graphs == "on" and not name.startswith("cuda"):
        raise HetSpecError(f"--graphs on needs a CUDA device (--device {name})")
    return Placement(name, dtype, graphs == "on" or (graphs == "auto" and name.startswith("cuda")))


def place_models(models, placement: Placement, in_place: bool = False, executors: bool = True,
                 target_tokens: int | None = None, draft_tokens: int = 2):
    """``models`` (a dataclass with ``target``, ``draft``, ``heads``) on the placement's device and dtype,
    their weights in the layout of :func:`real.model.packing.layout_for` for the most tokens their
    forwards run (``target_tokens``: the verification width, None: keep the loaded layout; the draft
    runs one or two), with a :class:`real.model.executor.StepExecutor` on the target and draft where
    ``graphs`` (and ``executors``). Models already in place are kept; others are moved (``in_place``,
    for models just loaded) or copied: the caller's models are never changed."""
    import copy
    from dataclasses import fields, replace

    import torch

    from real.model.executor import attach
    from real.model.packing import layout_for, pack

    device, dtype = torch.device(placement.device), placement.torch_dtype()
    tokens = {"target": target_tokens, "draft": draft_tokens}
    names = {f.name for f in fields(models)}
    changes = {}
    for name in ("target", "draft", "heads"):
        model = getattr(models, name) if name in names else None
        if model is None:
            continue
        own = in_place
        p = next(model.parameters(), None)
        if p is not None and (p.device != device or p.dtype != dtype):
            model = (model if own else copy.deepcopy(model)).to(device=device, dtype=dtype)
            own = True
        layout = layout_for(device.type, tokens[name]) if tokens.get(name) is not None else "hf"
        if layout != getattr(model, "layout", "hf"):
            model = pack(model if own else copy.deepcopy(model), layout)
            own = True
        if placement.graphs and executors and name != "heads" and hasattr(model, "executor"):
            model = model if own else copy.copy(model)     # shares the weights, not the executor
            attach(model, graphs=True)
        changes[name] = model
    return replace(models, **changes) if changes else models
