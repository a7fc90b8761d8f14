"""One worker: a processing unit of the real path, by the name the ``host`` platform gives it.

A :class:`Worker` is a CUDA device where one exists, or a CPU worker: a Python thread with its own
torch intra-op thread count, pinned to cores where the OS allows. Worker names match the devices
of the ``host`` platform written by ``hetspec calibrate`` (:mod:`real.validation.calibration.calibrate`), so a measured
run and a simulated one name the same units:

- ``cpuN``: one thread with one intra-op thread, pinned to core N (Linux);
- ``cpu``: one thread with as many intra-op threads as this process may use cores, not pinned (it
  runs on every core this process may use, also when a thread pinned to one core starts it);
- ``cuda`` / ``cuda:K``: CUDA device K, driven by its own thread (guarded: a machine without CUDA
  gets one clear line).

What torch and the OS allow per thread (measured on Linux, torch 2.13, OpenMP backend):

- ``torch.set_num_threads(n)`` called *inside* a thread sets that thread's OpenMP
  ``nthreads`` ICV (and MKL's thread-local count): the calling thread's intra-op pool is n wide
  while other threads keep theirs. Side effect: it also stores n as the default that threads
  created *later* pick up lazily on their first parallel operator. :func:`on_worker` restores the
  caller's count, which also restores that default.
- ``os.sched_setaffinity(0, cores)`` pins the *calling thread* only (on Linux the 0 names the
  calling thread, not the process). Threads created afterwards inherit the creator's mask, so a
  worker thread pins itself when it starts. Where the call does not exist (macOS, Windows) the
  worker runs unpinned and :attr:`WorkerState.pinned` says so.

Single-worker runs (a validation or an operator profile on ``cpuN``) run on the calling thread configured
as the worker (:func:`on_worker`); several workers at once are :mod:`real.hetero.workers`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

from hwmodels.errors import HetSpecError

#: The worker names a user may give (``cpuN`` for N among this process's cores).
CUDA_RE = re.compile(r"^cuda(?::(\d+))?$")
CPU_RE = re.compile(r"^cpu(\d+)$")


@dataclass(frozen=True)
class Worker:
    """A processing unit: ``name`` (as the host platform's device), torch ``device``, intra-op
    ``threads`` (None: leave torch's) and the ``cores`` its thread is pinned to (empty: not pinned)."""

    name: str
    device: str
    threads: int | None
    cores: tuple[int, ...] = ()

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")


@lru_cache(maxsize=1)
def allowed_cores() -> tuple[int, ...]:
    """Cores this process may run on: the affinity mask as the process started (all CPUs where the OS has
    no such call). Read once: afterwards the calling thread may itself be pinned to one worker's core,
    and Linux reports the calling thread's mask."""
    if hasattr(os, "sched_getaffinity"):
        return tuple(sorted(os.sched_getaffinity(0)))
    return tuple(range(os.cpu_count() or 1))


def can_pin() -> bool:
    return hasattr(os, "sched_setaffinity")


def valid_names() -> tuple[str, ...]:
    names = ["cpu"] + [f"cpu{c}" for c in allowed_cores()]
    if cuda_devices():
        names += ["cuda"] + [f"cuda:{i}" for i in range(cuda_devices())]
    return tuple(names)


def cuda_devices() -> int:
    """CUDA devices torch sees (0 without CUDA; torch is imported only to ask)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def cuda_torch_device(index: int) -> str:
    """The torch device worker ``cuda:K`` computes on (tests map it to a CPU device to run the CUDA
    case's code path, devices apart, on a machine without CUDA)."""
    return f"cuda:{index}"


def get_worker(name: str) -> Worker:
    """The worker called ``name``; an unknown or unavailable one raises one line."""
    name = name.strip()
    if name == "cpu":
        cores = allowed_cores()
        return Worker("cpu", "cpu", len(cores), ())
    m = CPU_RE.match(name)
    if m:
        core = int(m.group(1))
        if core not in allowed_cores():
            raise HetSpecError(f"worker {name}: core {core} is not one this process may use "
                               f"(cores {', '.join(map(str, allowed_cores()))}); valid: {', '.join(valid_names())}")
        return Worker(name, "cpu", 1, (core,) if can_pin() else ())
    m = CUDA_RE.match(name)
    if m:
        index = int(m.group(1) or 0)
        n = cuda_devices()
        if index >= n:
            have = f"{n} CUDA device(s)" if n else "no CUDA device (torch.cuda.is_available() is False)"
            raise HetSpecError(f"worker {name}: this machine has {have}; valid: {', '.join(valid_names())}")
        return Worker(f"cuda:{index}", cuda_torch_device(index), None, ())
    raise HetSpecError(f"unknown worker {name!r}; valid: {', '.join(valid_names())}")


# ---------------------------------------------------------------------------- configuring threads
@dataclass(frozen=True)
class WorkerState:
    """What configuring a thread for a worker did (and what to restore)."""

    worker: Worker
    pinned: bool
    previous_cores: tuple[int, ...] | None
    previous_threads: int


def configure_current_thread(worker: Worker) -> WorkerState:
    """Pin the calling thread to the worker's cores and set its intra-op threads (and CUDA device)."""
    import torch

    previous_threads = torch.get_num_threads()
    previous_cores = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else None
    pinned = False
    if worker.cores and can_pin():
        os.sched_setaffinity(0, set(worker.cores))
        pinned = True
    elif worker.device == "cpu" and can_pin() and previous_cores != allowed_cores():
        # ``cpu`` (every core) is not pinned, but a thread inherits its creator's mask: a ``cpu`` worker
        # thread started by a caller pinned to one core (workers cpu0,cpu) would run all its intra-op
        # threads on that core. It takes back every core this process may use.
        os.sched_setaffinity(0, set(allowed_cores()))
    if worker.threads is not None:
        torch.set_num_threads(worker.threads)
    if worker.is_cuda:
        torch.cuda.set_device(torch.device(worker.device))
    return WorkerState(worker, pinned, previous_cores, previous_threads)


def restore_current_thread(state: WorkerState) -> None:
    import torch

    if state.previous_cores is not None and can_pin() and tuple(sorted(os.sched_getaffinity(0))) != state.previous_cores:
        os.sched_setaffinity(0, set(state.previous_cores))
    torch.set_num_threads(state.previous_threads)


@contextmanager
def on_worker(worker: Worker) -> Iterator[WorkerState]:
    """Run the block on the calling thread configured as ``worker``; restore affinity and threads after."""
    state = configure_current_thread(worker)
    try:
        yield state
    finally:
        restore_current_thread(state)
