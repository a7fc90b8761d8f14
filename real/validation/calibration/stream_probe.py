"""What LLMCad's weight streaming costs the compute beside it: ``hetspec calibrate``'s streaming-loop probe.

The storage probe (:mod:`real.validation.calibration.storage_probe`) times single tensor reads. This probe runs the
real loader (:mod:`real.hetero.streaming`) on a random-weight checkpoint of its own, written next to the
demo models (the disk the streamed weights come from), on one single-thread worker, and measures what
the pipeline of the ``draft-tree`` strategy (:mod:`sim.strategies.streaming_pipeline`) needs beyond the
link's latency and bandwidth:

- ``layer_load_s`` / ``layer_bytes``: the loader's whole-layer reads (all of a layer's tensors dropped
  from the page cache, then read one after the other: ``StreamingLayers._read_layer``) while the forward
  waits for them: each layer's median read over the rounds, averaged over the layers. A forward that
  streams every layer pays the sum of their reads, and on a virtual disk the layers of one file do not
  read alike: on the 2-core development machine the 7 layers the forward waited for read in medians of
  6.79, 6.29, 6.36, 6.31, 5.02, 4.81 and 3.81 ms in one calibration, and the median over every read of a
  4-layer checkpoint took whichever kind was the majority (1.47 GB/s in another, where the validation's
  streamed target then read at 0.88-0.94 GB/s);
- ``resident_layer_s`` / ``streamed_layer_s``: a layer's compute in a :data:`STREAM_TOKENS`-token forward
  of the same model, every layer resident vs every layer streamed through one staging buffer (the
  layer loop's time minus its waits, per layer): a streamed layer is computed right after the forward
  waited for its read, and costs more than a resident one that follows another layer at once;
- ``alone_s`` / ``beside_s``: a one-token forward of a model of the demo draft's shape
  (:data:`STREAM_DRAFTER_SPEC`: LLMCad's drafter, which drafts while the loader reads) timed alone and
  while a thread reads the checkpoint's layers as the loader does, page cache dropped: the share of the
  worker a read in flight takes away (``1 - alone / beside``). The drafter's ~10 MB of weights stay in the
  last-level cache between its passes and a read streaming through the cache evicts them: on the 2-core
  development machine a drafter-sized pass was 20 % slower beside a read, a pass of the probe's 50 MB
  target-shaped model (never cache-resident) 7 %; the calibrations that timed the latter
  wrote a ``host_share`` of 0.00-0.06 where the validation's drafting beside the reads ran 24-47 % slower
  than without them. The reading thread runs on
  the cores the real loader runs on: a streamed target's loader thread is started by the thread that
  builds the target, outside the worker, and inherits that thread's cores (on Linux a thread inherits
  its creator's affinity), so the reader takes the mask the probe had before it pinned itself to the
  worker. A reader started inside the worker shares its one core and time-slices with the forward: the
  calibrations that did so wrote a ``host_share`` of 0.45-0.46 on the 2-core development machine, and the
  validation's streamed drafting, priced with it, came out up to 53 % slower than resident drafting where
  the runs measured -4 to +24 %.

Rounds interleave every kind of sample, so a slow moment of the machine hits them all alike; values are
medians. The model has the demo target's layer shape (:data:`STREAM_PROBE_SPEC`), the shape the demo's
streamed target has, with random weights and fewer layers.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from sim.model_spec import ModelSpec

#: The probe's model: the demo target's layer shape (hidden 384, intermediate 1024, 6 heads, 2 KV heads,
#: vocabulary 4096; ``hetspec demo``'s default preset) and its 8 layers, random weights, fp32.
STREAM_PROBE_SPEC = ModelSpec(name="stream-probe", n_layers=8, hidden=384, intermediate=1024, n_heads=6,
                              n_kv_heads=2, vocab=4096, dtype="fp32", max_position=512,
                              source="the demo target's layer shape; random weights (timing only)")
#: The drafter timed beside the reads: the demo draft's shape (hidden 256, intermediate 704, 2 layers, 4 heads,
#: 2 KV heads, vocabulary 4096: ``hetspec demo``'s default preset), random weights, fp32.
STREAM_DRAFTER_SPEC = ModelSpec(name="stream-probe-drafter", n_layers=2, hidden=256, intermediate=704, n_heads=4,
                                n_kv_heads=2, vocab=4096, dtype="fp32", max_position=512,
                                source="the demo draft's shape; random weights (timing only)")
#: Tokens of the probe's verification-like forward (the validation's 16-token trees).
STREAM_TOKENS = 16
#: One-token forwards per sample of the alone / beside timing.
BESIDE_PASSES = 8


@dataclass(frozen=True)
class StreamLoopProbe:
    worker: str
    layers: int
    tokens: int
    layer_bytes: int
    layer_load_s: float           # one streamed layer's read by the real loader (per-layer medians, mean)
    reads_per_layer: int
    resident_layer_s: float       # a resident layer's compute in a STREAM_TOKENS-token forward
    streamed_layer_s: float       # a streamed layer's compute, after the forward waited for it
    alone_s: float                # a one-token forward of the drafter-sized model alone
    beside_s: float               # the same while the checkpoint's layers are read beside it
    rounds: int
    layer_reads_s: tuple = ()     # each streamed layer's median read, in layer order (layer_load_s: their mean)

    @property
    def resume_s(self) -> float:
        """Seconds a streamed layer's compute costs beyond a resident one's (>= 0)."""
        return max(self.streamed_layer_s - self.resident_layer_s, 0.0)

    @property
    def host_share(self) -> float:
        """The share of the worker's compute a read in flight beside it takes away (in [0, 0.9])."""
        return min(max(1.0 - self.alone_s / self.beside_s, 0.0), 0.9) if self.beside_s > 0 else 0.0

    @property
    def layer_bw_bytes_per_s(self) -> float:
        return self.layer_bytes / self.layer_load_s if self.layer_load_s > 0 else float("nan")


def _layer_loop_s(model, tokens: torch.Tensor) -> tuple[float, list]:
    """The layer loop's compute (minus waits) of one forward, per layer, and the loads it consumed."""
    from real.hetero.streaming import StreamStats

    layers = model.model.layers
    layers.stats = StreamStats()
    cache = model.new_cache(tokens.shape[1] + 8)
    model(tokens, cache=cache)
    s = layers.stats.summary()
    return s["compute_s"] / layers.n_layers, list(layers.stats.loads)


def _reader(locations: list, stop: threading.Event, cores: set[int] | None = None) -> None:
    """Read the checkpoint's layers cold, one after the other, until ``stop`` (as the loader reads), on
    ``cores`` (None: the creating thread's)."""
    from real.hetero.streaming import read_layer_tensors

    if cores is not None:
        os.sched_setaffinity(0, cores)

    fds: dict = {}

    def fd_of(path) -> int:
        if path not in fds:
            fds[path] = os.open(path, os.O_RDONLY)
        return fds[path]

    bufs = [torch.empty(loc.shape, dtype=loc.dtype) for loc in locations[0]]
    try:
        while not stop.is_set():
            for layer in locations:
                read_layer_tensors(fd_of, layer, bufs, drop_page_cache=True)
                if stop.is_set():
                    break
    finally:
        for fd in fds.values():
            os.close(fd)


def layer_medians(reads: dict[int, list[float]]) -> tuple[float, ...]:
    """Each layer's median read, in layer order (layers never read are left out)."""
    return tuple(statistics.median(reads[k]) for k in sorted(reads) if reads[k])


def _mean(medians: tuple[float, ...]) -> float:
    return statistics.fmean(medians) if medians else float("nan")


def layer_read_s(reads: dict[int, list[float]]) -> float:
    """A streamed layer's read: each layer's median over its reads, averaged over the layers (a forward
    that streams them all pays the sum). NaN where nothing was read."""
    return _mean(layer_medians(reads))


def _one_token_s(model, passes: int) -> float:
    """Seconds of one of ``passes`` one-token forwards, after one untimed (the first after other work finds the
    model evicted: alone and beside would start unlike)."""
    cache = model.new_cache(passes + 9)
    tok = torch.zeros(1, 1, dtype=torch.long)
    model(tok, cache=cache)
    t = time.perf_counter()
    for _ in range(passes):
        model(tok, cache=cache)
    return (time.perf_counter() - t) / passes


def stream_loop_probe(worker: str, rounds: int, warmup: int = 1, folder: str | Path | None = None) -> StreamLoopProbe | None:
    """Run the probe on ``worker`` (a single-thread worker name); None where ``posix_fadvise`` is missing."""
    from real.hetero.streaming import close_streamed, streamed_target, tensor_locations
    from real.run.worker import can_pin, get_worker, on_worker
    from real.model.checkpoint import check_shapes, save_model
    from real.model.random_models import random_transformer
    from real.validation.calibration.storage_probe import probe_folder

    if not hasattr(os, "posix_fadvise"):
        return None
    loader_cores = set(os.sched_getaffinity(0)) if can_pin() else None   # where the real loader thread runs
    spec = STREAM_PROBE_SPEC
    root = Path(folder) if folder is not None else probe_folder()
    ckpt = Path(tempfile.mkdtemp(prefix="hetspec-stream-probe-", dir=root))
    resident = streamed = None
    try:
        save_model(random_transformer(spec, seed=0), ckpt)
        for f in ckpt.iterdir():                       # clean pages: the loader's drop can evict them
            with open(f, "rb+") as fh:
                os.fsync(fh.fileno())
        locs = tensor_locations(check_shapes(ckpt, spec))
        per_layer = [[loc for n, loc in locs.items() if n.startswith(f"model.layers.{i}.")] for i in range(spec.n_layers)]
        layer_bytes = max(sum(l.nbytes for l in layer) for layer in per_layer)
        fixed = sum(l.nbytes for n, l in locs.items() if not n.startswith("model.layers."))
        resident, _ = streamed_target(ckpt, 1 << 40)
        streamed, _ = streamed_target(ckpt, fixed + layer_bytes)     # room for one staging layer: none resident
        drafter = random_transformer(STREAM_DRAFTER_SPEC, seed=1).eval()
        tokens = torch.arange(STREAM_TOKENS).unsqueeze(0)
        samples: dict[str, list[float]] = {"resident": [], "streamed": [], "alone": [], "beside": []}
        reads: dict[int, list[float]] = {}                       # layer -> its read times
        with on_worker(get_worker(worker)), torch.inference_mode():
            for r in range(warmup + rounds):
                keep = r >= warmup
                streamed.model.layers.wait_preloaded()
                res_s, _ = _layer_loop_s(resident, tokens)
                str_s, loads = _layer_loop_s(streamed, tokens)
                streamed.model.layers.wait_preloaded()
                alone = _one_token_s(drafter, BESIDE_PASSES)
                stop = threading.Event()
                reader = threading.Thread(target=_reader, args=(per_layer, stop, loader_cores), daemon=True)
                reader.start()
                time.sleep(0.002)                      # the reader's first read is in flight
                beside = _one_token_s(drafter, BESIDE_PASSES)
                stop.set()
                reader.join()
                if keep:
                    samples["resident"].append(res_s)
                    samples["streamed"].append(str_s)
                    samples["alone"].append(alone)
                    samples["beside"].append(beside)
                    for layer, t0, t1, _ in loads:
                        reads.setdefault(layer, []).append(t1 - t0)
    finally:
        for m in (resident, streamed):
            if m is not None:
                close_streamed(m)
        shutil.rmtree(ckpt, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in samples.items()}
    reads_s = layer_medians(reads)
    return StreamLoopProbe(worker=worker, layers=spec.n_layers, tokens=STREAM_TOKENS, layer_bytes=layer_bytes,
                           layer_load_s=_mean(reads_s), reads_per_layer=len(per_layer[0]),
                           resident_layer_s=med["resident"], streamed_layer_s=med["streamed"], alone_s=med["alone"],
                           beside_s=med["beside"], rounds=rounds,
                           layer_reads_s=reads_s)
