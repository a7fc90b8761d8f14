"""LLMCad's weight streaming on the real path: the target's layers read from disk under a memory budget.

LLMCad ("speculative generation pipeline"): the target
does not fit in memory, so its weights are read from storage for every forward; the draft model is
memory-resident and keeps drafting while the target's weights load; the fallback (``T_c < alpha``)
triggers the verification, which waits for whatever is not loaded yet.

Here a target checkpoint (Hugging Face ``config.json`` + safetensors, :mod:`real.model.checkpoint`)
becomes a :class:`real.model.transformer.Transformer` whose ``model.layers`` is a :class:`StreamingLayers`:

- **Memory plan** (:func:`plan_memory`, the accounting of the simulator's ``draft-tree`` memory
  plan, :func:`sim.strategies.draft_tree.memory_plan`): the budget holds the draft model's weights,
  both KV caches, the target's embedding / final norm / LM head, ``staging`` layer buffers (one by
  default, as the simulator counts) and as many *resident* target layers as fit in the rest (the
  first ones). The other layers are *streamed*: read again for every forward, through the staging
  buffers.
- **Loader thread**: reads the streamed layers in order, cycle after cycle, each into the next free
  staging buffer, straight from the safetensors file into the buffer's memory (``os.preadv`` at
  the tensor's offset, parsed from the file header: no intermediate copy; the read releases the
  GIL). As soon as a forward has used a streamed layer its buffer is free and the loader reads the
  next one, so after a verification the loader preloads the next forward's first streamed layers
  (up to the memory bound) *while the draft drafts* -- LLMCad's pipeline -- and the verification
  waits only for the rest.
- ``drop_page_cache`` (default on): before a layer is read, its byte range is dropped from the
  operating system's page cache (``posix_fadvise(DONTNEED)``), so every read comes from the disk
  as on a device whose memory has no room to cache the model; off, repeated reads are served from
  RAM by the OS.

The forward itself is the model's own (``Transformer.forward`` iterating ``model.layers``), so a
streamed target computes exactly what a resident one does: the same tokens (tested). Every
``draft-tree`` round then runs unchanged (:mod:`real.decode.draft_tree`) with this target.
"""

from __future__ import annotations

import json
import os
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from hwmodels.errors import HetSpecError
from real.model.checkpoint import canonical_name, check_shapes
from real.model.transformer import DecoderLayer, Transformer, rope_tables
from sim.model_spec import load_hf_config

#: Staging buffers for streamed layers: one, as the simulator's memory plan counts (LLMCad loads
#: the rest of the target after the fallback, layer after layer).
DEFAULT_STAGING = 1
#: safetensors dtype names -> torch dtypes the reader accepts (the bytes are read as they are).
ST_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
#: Trace device name of the loader's records (the simulator's storage endpoint, hwmodels.platform.STORAGE).
LOADER = "storage"
# ---------------------------------------------------------------------------- safetensors layout
@dataclass(frozen=True)
class TensorLocation:
    path: Path
    offset: int           # absolute byte offset in the file
    nbytes: int
    dtype: torch.dtype
    shape: tuple[int, ...]


def tensor_locations(files: dict[str, Path]) -> dict[str, TensorLocation]:
    """Where each tensor's bytes sit: the safetensors header (8-byte length + JSON) of each file."""
    out: dict[str, TensorLocation] = {}
    headers: dict[Path, tuple[int, dict]] = {}
    for path in sorted(set(files.values())):
        with open(path, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            headers[path] = (8 + n, json.loads(fh.read(n)))
    stored = {path: {canonical_name(k): k for k in header} for path, (_, header) in headers.items()}
    for name, path in files.items():
        base, header = headers[path]
        entry = header[stored[path][name]]
        if entry["dtype"] not in ST_DTYPES:
            raise HetSpecError(f"{path}: tensor {name} is {entry['dtype']}; streaming reads F32, F16 or BF16")
        begin, end = entry["data_offsets"]
        out[name] = TensorLocation(path, base + begin, end - begin, ST_DTYPES[entry["dtype"]], tuple(entry["shape"]))
    return out


def read_into(fd: int, loc: TensorLocation, dst: torch.Tensor) -> None:
    """Read one tensor's bytes from ``fd`` straight into ``dst`` (contiguous CPU, same dtype/shape)."""
    if dst.dtype != loc.dtype or tuple(dst.shape) != loc.shape:
        raise HetSpecError(f"streaming: {loc.path} holds {loc.dtype} {list(loc.shape)} but the buffer is "
                           f"{dst.dtype} {list(dst.shape)} (stream a checkpoint in the model's dtype)")
    view = memoryview(dst.detach().view(torch.uint8).numpy()).cast("B") if dst.numel() else memoryview(b"")
    done = 0
    while done < loc.nbytes:
        got = os.preadv(fd, [view[done:]], loc.offset + done)
        if got <= 0:
            raise HetSpecError(f"streaming: {loc.path} ended before tensor bytes {loc.offset + done}")
        done += got


def read_layer_tensors(fd_of, locs, dsts, drop_page_cache: bool) -> int:
    """Read one layer's tensors as the loader does: every range dropped from the page cache first (when
    ``drop_page_cache``), then each tensor in turn into its buffer. ``fd_of(path)``: an open file's fd.
    Returns the bytes read."""
    if drop_page_cache:
        for loc in locs:
            os.posix_fadvise(fd_of(loc.path), loc.offset, loc.nbytes, os.POSIX_FADV_DONTNEED)
    for loc, dst in zip(locs, dsts):
        read_into(fd_of(loc.path), loc, dst)
    return sum(loc.nbytes for loc in locs)


# ---------------------------------------------------------------------------- memory plan
@dataclass(frozen=True)
class MemoryPlan:
    """How a budget splits (bytes): what must stay, the target's resident and streamed layers."""

    budget: int
    draft: int                 # the draft model's weights
    kv: int                    # both KV caches
    fixed: int                 # the target's embedding, final norm, LM head
    layer: int                 # bytes of one target layer
    staging: int               # staging buffers (layers)
    resident_layers: int
    streamed_layers: tuple[int, ...]

    @property
    def streams(self) -> bool:
        return bool(self.streamed_layers)

    @property
    def used(self) -> int:
        slots = self.staging if self.streams else 0
        return self.draft + self.kv + self.fixed + self.layer * (self.resident_layers + slots)

    def to_json(self) -> dict:
        return {"budget_bytes": self.budget, "draft_bytes": self.draft, "kv_bytes": self.kv, "fixed_bytes": self.fixed,
                "layer_bytes": self.layer, "staging_layers": self.staging if self.streams else 0,
                "resident_layers": self.resident_layers, "streamed_layers": list(self.streamed_layers),
                "used_bytes": self.used}


def plan_memory(n_layers: int, layer_bytes: int, fixed_bytes: int, draft_bytes: int, kv_bytes: int,
                budget_bytes: int, staging: int = DEFAULT_STAGING) -> MemoryPlan:
    """Resident and streamed layers under ``budget_bytes`` (one line if not even the must-haves fit)."""
    if staging < 1:
        raise HetSpecError(f"streaming needs at least one staging layer, got {staging}")
    base = draft_bytes + kv_bytes + fixed_bytes
    if base + n_layers * layer_bytes <= budget_bytes:
        return MemoryPlan(budget_bytes, draft_bytes, kv_bytes, fixed_bytes, layer_bytes, staging, n_layers, ())
    room = budget_bytes - base - staging * layer_bytes
    if room < 0:
        raise HetSpecError(
            f"memory budget {budget_bytes / 1e6:.2f} MB is too small: the draft model ({draft_bytes / 1e6:.2f} MB), "
            f"the KV caches ({kv_bytes / 1e6:.2f} MB), the target's embedding and LM head ({fixed_bytes / 1e6:.2f} MB) "
            f"and {staging} streamed layer(s) ({staging * layer_bytes / 1e6:.2f} MB) need "
            f"{(base + staging * layer_bytes) / 1e6:.2f} MB")
    resident = min(int(room // layer_bytes), n_layers - 1)
    return MemoryPlan(budget_bytes, draft_bytes, kv_bytes, fixed_bytes, layer_bytes, staging, resident,
                      tuple(range(resident, n_layers)))


# ---------------------------------------------------------------------------- the streaming layers
@dataclass
class StreamStats:
    """What the loader and the forwards did (seconds from ``time.perf_counter``)."""

    loads: list = field(default_factory=list)      # (layer, start, end, bytes)
    waits: list = field(default_factory=list)      # (layer, start, end): a forward waiting for a layer
    forwards: list = field(default_factory=list)   # (start, end) of each forward's layer loop

    def summary(self) -> dict:
        load_s = sum(e - s for _, s, e, _ in self.loads)
        nbytes = sum(b for *_, b in self.loads)
        wait_s = sum(e - s for _, s, e in self.waits)
        layers_s = sum(e - s for s, e in self.forwards)
        return {"layer_loads": len(self.loads), "loaded_bytes": nbytes, "load_s": load_s,
                "load_gb_per_s": nbytes / load_s / 1e9 if load_s > 0 else float("nan"),
                "forwards": len(self.forwards), "forward_layers_s": layers_s, "wait_s": wait_s,
                "compute_s": layers_s - wait_s}


class StreamingLayers(nn.Module):
    """``model.layers`` of a streamed target: resident layers, staging buffers and the loader thread.

    Iterating yields the L layers in order (what ``Transformer.forward`` does); a streamed layer is
    yielded once the loader has read it into its staging buffer, and its buffer is freed when the
    forward asks for the next layer.
    """

    def __init__(self, spec, resident: dict[int, DecoderLayer], streamed: tuple[int, ...],
                 locations: dict[str, TensorLocation], staging: int, drop_page_cache: bool,
                 dtype: torch.dtype = torch.float32):
        super().__init__()
        self.spec = spec
        self.n_layers = spec.n_layers
        self.resident = nn.ModuleDict({str(i): m for i, m in resident.items()})
        self.streamed = tuple(streamed)
        self.slots = nn.ModuleList(DecoderLayer(spec, 0).to(dtype).requires_grad_(False)
                                   for _ in range(staging if streamed else 0))
        self.locations = locations
        self.drop_page_cache = drop_page_cache and hasattr(os, "posix_fadvise")
        self.stats = StreamStats()
        self.clock = None                       # a real.decode.common.Clock to trace into (set by the runner)
        self._cond = threading.Condition()
        self._fds: dict[Path, int] = {}
        self._thread = None
        self._start_loader()

    def _start_loader(self) -> None:
        self._slot_layer = [None] * len(self.slots)   # (cycle, layer) loaded in each slot, or None if free/loading
        self._slot_busy = [False] * len(self.slots)   # loading, loaded or in use by a forward
        self._cycle = 0                               # the loader cycle the next forward consumes
        self._stop = False
        self._error: BaseException | None = None
        if self.streamed:
            self._thread = threading.Thread(target=self._load_loop, name="hetspec-loader", daemon=True)
            self._thread.start()

    def _stop_loader(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
            self._thread = None

    # ------------------------------------------------------------------ the loader
    def _fd(self, path: Path) -> int:
        if path not in self._fds:
            self._fds[path] = os.open(path, os.O_RDONLY)
        return self._fds[path]

    def _load_loop(self) -> None:
        cycle = 0
        try:
            while True:
                for j, layer in enumerate(self.streamed):
                    slot = j % len(self.slots)
                    with self._cond:
                        while self._slot_busy[slot] and not self._stop:
                            self._cond.wait()
                        if self._stop:
                            return
                        self._slot_busy[slot] = True
                    t0 = time.perf_counter()
                    nbytes = self._read_layer(layer, self.slots[slot])
                    t1 = time.perf_counter()
                    self.stats.loads.append((layer, t0, t1, nbytes))
                    self._trace(LOADER, "load", t0, t1, f"layer{layer}")
                    with self._cond:
                        self._slot_layer[slot] = (cycle, layer)
                        self._cond.notify_all()
                cycle += 1
        except BaseException as exc:   # reported to the forward that waits
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def _read_layer(self, layer: int, module: DecoderLayer) -> int:
        prefix = f"model.layers.{layer}."
        params = dict(module.named_parameters())
        with torch.no_grad():
            return read_layer_tensors(self._fd, [self.locations[prefix + name] for name in params],
                                      [p.data for p in params.values()], self.drop_page_cache)

    def wait_preloaded(self, timeout_s: float = 5.0) -> None:
        """Block until the loader has filled every staging buffer for the next forward (it then waits for a
        forward to free one), or ``timeout_s`` passed, or it failed."""
        with self._cond:
            self._cond.wait_for(lambda: all(s is not None for s in self._slot_layer) or self._error is not None,
                                timeout=timeout_s)

    def _trace(self, device: str, phase: str, t0: float, t1: float, op: str) -> None:
        clock = self.clock
        if clock is not None:
            from real.hetero.workers import record

            # step -1 here; the runner assigns each load to the step whose verification it feeds
            record(clock, device, -1, phase, max(t0 - clock.t0, 0.0), max(t1 - clock.t0, 0.0), op=op)

    # ------------------------------------------------------------------ the forward's side
    def __len__(self) -> int:
        return self.n_layers

    def __iter__(self):
        cycle = self._cycle
        used = 0
        t_start = time.perf_counter()
        try:
            for i in range(self.n_layers):
                if str(i) in self.resident:
                    yield self.resident[str(i)]
                    continue
                j = self.streamed.index(i)
                slot = j % len(self.slots)
                t0 = time.perf_counter()
                with self._cond:
                    while self._slot_layer[slot] != (cycle, i):
                        if self._error is not None:
                            raise HetSpecError(f"streaming: loading layer {i} failed: {self._error}")
                        self._cond.wait()
                t1 = time.perf_counter()
                if t1 - t0 > 0:
                    self.stats.waits.append((i, t0, t1))
                module = self.slots[slot]
                module.self_attn.layer = i          # the KV-cache layer this buffer computes now
                yield module
                with self._cond:                    # the forward is done with it: free the buffer
                    self._slot_layer[slot] = None
                    self._slot_busy[slot] = False
                    self._cond.notify_all()
                used += 1
        finally:
            self.stats.forwards.append((t_start, time.perf_counter()))
            if self.streamed and used != len(self.streamed):
                # a forward stopped part-way (an error): the loader is ahead of it; start it afresh
                self._stop_loader()
                self._start_loader()
            else:
                self._cycle = cycle + 1

    def close(self) -> None:
        self._stop_loader()
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}


# ---------------------------------------------------------------------------- building a streamed target
def streamed_target(folder: str | Path, budget_bytes: int, draft_bytes: int = 0, kv_bytes: int = 0,
                    staging: int = DEFAULT_STAGING, drop_page_cache: bool = True) -> tuple[Transformer, MemoryPlan]:
    """A target read from ``folder`` whose layers beyond the memory plan stream from disk.

    ``draft_bytes`` / ``kv_bytes``: what else the budget must hold (the draft model, both caches).
    The returned model's ``model.layers`` is a :class:`StreamingLayers` (call ``.close()`` on it
    when done); with a budget that holds everything nothing streams (every layer resident).
    """
    folder = Path(folder)
    spec = load_hf_config(folder)
    files = check_shapes(folder, spec)
    locs = tensor_locations(files)
    layer_bytes = max(sum(l.nbytes for n, l in locs.items() if n.startswith(f"model.layers.{i}."))
                      for i in range(spec.n_layers))
    fixed = sum(l.nbytes for n, l in locs.items() if not n.startswith("model.layers."))
    plan = plan_memory(spec.n_layers, layer_bytes, fixed, draft_bytes, kv_bytes, budget_bytes, staging)
    dtype = locs["model.embed_tokens.weight"].dtype
    with torch.device("meta"):
        model = Transformer(spec)
    fds: dict[Path, int] = {}

    def read(name: str) -> torch.Tensor:
        loc = locs[name]
        t = torch.empty(loc.shape, dtype=loc.dtype)
        if loc.path not in fds:
            fds[loc.path] = os.open(loc.path, os.O_RDONLY)
        read_into(fds[loc.path], loc, t)
        return t

    try:
        with torch.no_grad():
            model.model.embed_tokens.weight = nn.Parameter(read("model.embed_tokens.weight"), requires_grad=False)
            model.model.norm.weight = nn.Parameter(read("model.norm.weight"), requires_grad=False)
            if spec.tie_embeddings:
                model.lm_head.weight = model.model.embed_tokens.weight
            else:
                model.lm_head.weight = nn.Parameter(read("lm_head.weight"), requires_grad=False)
            resident = {}
            for i in range(plan.resident_layers):
                layer = DecoderLayer(spec, i).to(dtype).requires_grad_(False)
                for name, p in layer.named_parameters():
                    p.data = read(f"model.layers.{i}.{name}")
                resident[i] = layer
    finally:
        for fd in fds.values():
            os.close(fd)
    layers = StreamingLayers(spec, resident, plan.streamed_layers, locs, staging, drop_page_cache, dtype)
    model.model.layers = layers
    cos, sin = rope_tables(spec, spec.max_position)
    model.rope_cos, model.rope_sin = cos, sin
    if any(p.is_meta for p in model.parameters()):
        raise HetSpecError("streaming: a target tensor was not loaded")
    return model.eval(), plan


def close_streamed(model) -> None:
    layers = getattr(getattr(model, "model", None), "layers", None)
    if isinstance(layers, StreamingLayers):
        layers.close()
