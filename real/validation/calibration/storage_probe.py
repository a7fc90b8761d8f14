"""The storage read path of LLMCad's weight streaming, measured for ``hetspec calibrate``.

The real loader (:mod:`real.hetero.streaming`) reads a streamed layer tensor by tensor from the
target's safetensors file, straight into its staging buffer (:func:`real.hetero.streaming.read_into`:
``os.preadv`` at the tensor's offset), after dropping the tensor's byte range from the page cache
(``os.posix_fadvise(fd, offset, length, POSIX_FADV_DONTNEED)``; no root needed), so every read comes
from the disk. This probe does exactly that on a safetensors file of its own, written next to the
demo models (the disk their weights are read from) and synced (the kernel drops clean pages only):

- tensors of :data:`STORAGE_SIZES` bytes (a Llama layer's norms, K/V, Q/O and MLP matrices span this
  range), :data:`STORAGE_READS` distinct tensors of each size, every read cold (its range dropped; the
  drop is timed with the read, as the loader's load time counts it);
- the same tensors read again without the drop (served from the page cache) tell whether the drop
  really evicts: a cold read much slower than a warm one does;
- per size the median cold read; ``latency + bytes / bandwidth`` through the smallest and the largest
  (latency >= 0) is the ``storage`` link of the host platform.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

#: Tensor sizes read (bytes): 16 KiB up to 4 MiB.
STORAGE_SIZES = (16 * 2**10, 256 * 2**10, 2**20, 4 * 2**20)
#: Distinct tensors read per size (each read cold once and warm once).
STORAGE_READS = 7
#: A cold read at least this much slower than a warm one (largest size) shows the drop evicts.
EVICTION_RATIO = 1.3


@dataclass(frozen=True)
class StorageProbe:
    folder: str                            # where the probe file was written
    sizes: tuple[int, ...]
    cold_s: tuple[float, ...]              # median read per size, page cache dropped first
    warm_s: tuple[float, ...]              # median re-read per size, from the page cache
    latency_s: float                       # fit of the cold reads: latency + bytes / bandwidth
    bw_bytes_per_s: float
    reads: int

    @property
    def evicts(self) -> bool:
        """Whether dropping the page cache made the reads slower (it evicted the pages)."""
        return self.cold_s[-1] >= EVICTION_RATIO * self.warm_s[-1]


def probe_folder() -> Path:
    """The demo models' cache folder (the disk the streamed weights come from), else the temp folder."""
    from real.train.demo import cache_root

    root = cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
        return root
    except OSError:
        return Path(tempfile.gettempdir())


def fit_latency_bandwidth(sizes, seconds) -> tuple[float, float]:
    """``(latency_s, bytes_per_s)`` of ``t = latency + bytes / bw`` through the smallest and the largest read
    (a middle size that a slow moment hit does not move it; latency >= 0)."""
    (s0, t0), (s1, t1) = min(zip(sizes, seconds)), max(zip(sizes, seconds))
    if t1 <= t0:                          # no growth with size: all latency, bandwidth from the largest read
        return float(t0), float(s1 / t1)
    bw = (s1 - s0) / (t1 - t0)
    return float(max(t0 - s0 / bw, 0.0)), float(bw)


def storage_probe(reads: int = STORAGE_READS, folder: str | Path | None = None) -> StorageProbe | None:
    """Time cold and warm tensor reads as the real loader does them (None where ``posix_fadvise`` is missing)."""
    from safetensors.torch import save_file

    from real.hetero.streaming import read_into, tensor_locations

    if not hasattr(os, "posix_fadvise"):
        return None
    folder = Path(folder) if folder is not None else probe_folder()
    gen = torch.Generator().manual_seed(0)
    tensors = {f"t{size}_{i}": torch.randint(-2**31, 2**31 - 1, (size // 4,), dtype=torch.int32, generator=gen)
               .view(torch.float32) for size in STORAGE_SIZES for i in range(reads)}
    fd_tmp, name = tempfile.mkstemp(prefix="hetspec-storage-probe-", suffix=".safetensors", dir=folder)
    os.close(fd_tmp)
    path = Path(name)
    try:
        save_file(tensors, str(path))
        with open(path, "rb+") as fh:
            os.fsync(fh.fileno())          # clean pages: the drop below can evict them
        locs = tensor_locations({k: path for k in tensors})
        fd = os.open(path, os.O_RDONLY)
        try:
            cold: dict[int, list[float]] = {}
            warm: dict[int, list[float]] = {}
            buffers = {size: torch.empty(size // 4) for size in STORAGE_SIZES}
            for i in range(reads):               # sizes interleaved, so a slow moment hits them all
                for size in STORAGE_SIZES:
                    loc = locs[f"t{size}_{i}"]
                    t = time.perf_counter()        # the drop is part of the loader's read (StreamingLayers._read_layer)
                    os.posix_fadvise(fd, loc.offset, loc.nbytes, os.POSIX_FADV_DONTNEED)
                    read_into(fd, loc, buffers[size])
                    cold.setdefault(size, []).append(time.perf_counter() - t)
                    t = time.perf_counter()
                    read_into(fd, loc, buffers[size])
                    warm.setdefault(size, []).append(time.perf_counter() - t)
        finally:
            os.close(fd)
    finally:
        path.unlink(missing_ok=True)
    cold_med = tuple(statistics.median(cold[s]) for s in STORAGE_SIZES)
    warm_med = tuple(statistics.median(warm[s]) for s in STORAGE_SIZES)
    latency, bw = fit_latency_bandwidth(STORAGE_SIZES, cold_med)
    return StorageProbe(folder=str(folder), sizes=STORAGE_SIZES, cold_s=cold_med, warm_s=warm_med, latency_s=latency,
                        bw_bytes_per_s=bw, reads=reads)
