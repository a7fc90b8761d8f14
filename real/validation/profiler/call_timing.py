"""How one operator call is timed on any torch device, and which device a ``--device`` name means.

A CPU call's wall time, less torch's bare dispatch cost, is its kernel time; the dispatch is its eager launch
cost, and there are no graphs. On CUDA a call's kernel time is taken with no launch gaps: the call is repeated
inside one captured CUDA graph and the graph's replay time divided by the repeats; what an eager call takes
beyond that is its eager launch cost, and inside a replayed graph a call adds nothing (``graph_launch_s`` 0).
One replay of a graph holding a single call, beyond the call, is the replay's own cost (once per graph).
:mod:`real.validation.profiler.profile_device` times every operator of a profile this way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from hwmodels.errors import HetSpecError
from real.run.repeats import interleaved, median
from real.validation.profiler.device_copies import sync_device, wall_per_call


@dataclass(frozen=True)
class OpTiming:
    """One measured call: seconds of the kernels, and what a call adds on top in eager / graph mode
    (``nan``: that mode does not exist on the device)."""

    kernel_s: float
    eager_launch_s: float
    graph_launch_s: float = math.nan
    #: CUDA: one replay of a graph holding only this call, beyond the call's time inside a graph (the
    #: replay's own cost, once per graph)
    replay_s: float = math.nan


def cpu_worker(text: str):
    """The single-thread worker ``cpuN`` names (:func:`real.run.worker.get_worker`: pinned to core N,
    one torch thread; one line for a core this process may not use), else None."""
    from real.run.worker import CPU_RE, get_worker

    return get_worker(text) if CPU_RE.fullmatch(text.strip()) else None


def parse_device(text: str) -> torch.device:
    """``cpu``, ``cpuN`` (the single-thread worker on core N: the torch device ``cpu``), ``cuda`` or
    ``cuda:N``; one line if CUDA is asked for where there is none."""
    if cpu_worker(text) is not None:
        return torch.device("cpu")
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise HetSpecError(f"--device {text!r}: give cpu, cpuN, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise HetSpecError(f"--device {text!r}: give cpu, cpuN, cuda or cuda:N")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise HetSpecError(f"--device {text}: this torch has no CUDA device (torch {torch.__version__})")
        index = device.index or 0
        if index >= torch.cuda.device_count():
            raise HetSpecError(f"--device {text}: only {torch.cuda.device_count()} CUDA device(s)")
        device = torch.device("cuda", index)
    return device


def graph_per_call(fn: Callable[[], object], device: torch.device, copies: int) -> tuple[float, float]:
    """CUDA only: (seconds per copy of ``fn`` inside one graph of ``copies`` copies, seconds of one
    replay of a graph holding a single copy)."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):   # warm-up on a side stream, as capture requires
        for _ in range(3):
            fn()
    torch.cuda.current_stream(device).wait_stream(stream)
    many, one = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(many):
        for _ in range(copies):
            fn()
    with torch.cuda.graph(one):
        fn()

    def timed(graph) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        graph.replay()
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3

    return timed(many) / copies, timed(one)


def time_op(fn: Callable[[], object], device: torch.device, settings,
            dispatch_s: float = 0.0) -> Callable[[], OpTiming]:
    """A measurement of ``fn`` (called once per sample by the interleaved protocol). ``settings``: a
    :class:`real.validation.profiler.profile_device.ProfileSettings` (its ``calls`` per sample and ``graph_copies``);
    ``dispatch_s``: a CPU's bare dispatch cost, the part of a call's wall time that is not its kernel."""
    fn()   # first call: allocations, kernel selection
    sync_device(device)

    def sample() -> OpTiming:
        eager = wall_per_call(fn, device, settings.calls)
        if device.type != "cuda":
            return OpTiming(kernel_s=max(eager - dispatch_s, 0.0), eager_launch_s=min(dispatch_s, eager))
        kernel, one = graph_per_call(fn, device, settings.graph_copies)
        return OpTiming(kernel_s=kernel, eager_launch_s=max(eager - kernel, 0.0), graph_launch_s=0.0,
                        replay_s=max(one - kernel, 0.0))

    return sample


def op_samples(fn: Callable[[], object], device: torch.device, settings, dispatch_s: float = 0.0) -> list[OpTiming]:
    """``settings.repeats`` samples of ``fn`` (:func:`time_op`), taken by the interleaved protocol
    (:func:`real.run.repeats.interleaved`)."""
    sample = time_op(fn, device, settings, dispatch_s)
    return [r[0] for r in interleaved(1, settings.repeats, lambda *_: sample())[0]]


def median_timing(samples: Sequence[OpTiming]) -> OpTiming:
    """Each field the median of its samples."""
    graphs = device_has_graphs(samples)
    return OpTiming(kernel_s=median(s.kernel_s for s in samples),
                    eager_launch_s=median(s.eager_launch_s for s in samples),
                    graph_launch_s=median(s.graph_launch_s for s in samples) if graphs else math.nan,
                    replay_s=median(s.replay_s for s in samples) if graphs else math.nan)


def device_has_graphs(samples: Sequence[OpTiming]) -> bool:
    """Whether the samples were taken where CUDA graphs exist (a graph launch cost measured, not ``nan``)."""
    return any(not math.isnan(s.graph_launch_s) for s in samples)
