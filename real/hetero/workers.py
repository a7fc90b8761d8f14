"""Several workers at once: what the heterogeneous real path runs its methods on.

The workers themselves (names, :class:`~real.run.worker.Worker`, a thread configured as one) are
:mod:`real.run.worker`. Here: several of them in one run. torch releases the GIL inside operators, so two CPU
workers compute at the same time; the Python between operators (module calls, argument handling) still takes
turns on the GIL.

Synchronisation: :class:`PairBarrier` (two parties, raw locks: about 2.4x cheaper than
``threading.Barrier`` here, measured 80 vs 185 us per round trip on the loaded 2-core CI machine)
and :class:`WorkerThread` (a persistent thread that runs one submitted call at a time). One
worker of a :class:`WorkerSession` runs on the calling thread (configured for it while the
session lasts), the others on their own threads.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hwmodels.errors import HetSpecError
from real.run.worker import (
    Worker,
    WorkerState,
    allowed_cores,
    can_pin,
    configure_current_thread,
    get_worker,
    restore_current_thread,
)
from sim.trace import TraceRecord


def parse_workers(text: str | Sequence[str], count: int | None = None, what: str = "--workers") -> tuple[Worker, ...]:
    """Workers from ``"cpu0,cpu1"`` (or a sequence of names); ``count``: exactly this many."""
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    if not names:
        raise HetSpecError(f"{what}: give worker names separated by commas, e.g. cpu0,cpu1")
    if count is not None and len(names) != count:
        raise HetSpecError(f"{what} needs exactly {count} workers, got {len(names)}: {','.join(names)}")
    return tuple(get_worker(n) for n in names)


# ---------------------------------------------------------------------------- binding a team
#: Seconds of parallel work that tell the calling thread's OpenMP helpers apart (CPU time in /proc is
#: counted in 10 ms ticks: each of two threads gets ~10 of them).
TEAM_PROBE_S = 0.2


def _thread_cpu_ticks() -> dict[int, int]:
    """CPU time (user + system, clock ticks) of every thread of this process, by native thread id."""
    out: dict[int, int] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            out[int(tid)] = int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return out


def team_helpers(threads: int, seconds: float = TEAM_PROBE_S) -> tuple[int, ...]:
    """Native ids of the OpenMP helper threads of the calling thread's ``threads``-wide team: the threads
    whose CPU time grows while the calling thread runs parallel products for ``seconds`` (nothing else of
    this process computes meanwhile). Empty where /proc is missing or the count is not ``threads - 1``."""
    import torch

    if threads < 2:
        return ()
    before = _thread_cpu_ticks()
    a = torch.ones(256, 256)
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        a @ a
    after = _thread_cpu_ticks()
    me = threading.get_native_id()
    busy = tuple(sorted(k for k in after if k != me and after[k] - before.get(k, 0) >= 2))
    return busy if len(busy) == threads - 1 else ()


@dataclass(frozen=True)
class TeamBinding:
    """The calling thread and its OpenMP helpers, each pinned to its own core, and the masks they had."""

    caller_core: int
    helpers: tuple[tuple[int, int], ...]             # (native thread id, core)
    previous: tuple[tuple[int, tuple[int, ...]], ...]  # (native thread id, its mask before), caller: id 0


def bind_team(worker: Worker) -> TeamBinding | None:
    """Pin the calling thread (configured as the all-core ``worker``) and each of its OpenMP team's helper
    threads to a core of its own: the caller to the last of :func:`allowed_cores`, the helpers to the others
    in order. None where this cannot be done (no pinning, one thread, helpers not found).

    Why: Dovetail's drafter and verifier take turns. After a round drafted on a single-thread worker the
    multi-thread verifier's helper has slept through the drafting, and an unpinned helper woken for the
    verification can be run on its waker's core, which makes that verification several times slower than
    the median (``hetspec run --method dovetail --workers cpu0,cpu --trace`` shows the outliers); a helper
    that spins instead of sleeping (``OMP_WAIT_POLICY=ACTIVE GOMP_SPINCOUNT=infinite``) does not show them."""
    cores = allowed_cores()
    n = worker.threads or 1
    if not can_pin() or worker.device != "cpu" or worker.cores or n < 2 or len(cores) < n:
        return None
    helpers = team_helpers(n)
    if not helpers:
        return None
    previous = [(0, tuple(sorted(os.sched_getaffinity(0))))]
    placed = list(zip(helpers, cores[:n - 1]))
    try:
        for tid, _ in placed:
            previous.append((tid, tuple(sorted(os.sched_getaffinity(tid)))))
        os.sched_setaffinity(0, {cores[-1]})
        for tid, core in placed:
            os.sched_setaffinity(tid, {core})
    except OSError:                                 # a helper gone meanwhile: leave every mask as it was
        unbind_team(TeamBinding(cores[-1], tuple(placed), tuple(previous)))
        return None
    return TeamBinding(cores[-1], tuple(placed), tuple(previous))


def unbind_team(binding: TeamBinding | None) -> None:
    """Give the calling thread and the helpers of ``binding`` back the masks they had."""
    if binding is None:
        return
    for tid, mask in binding.previous:
        try:
            os.sched_setaffinity(tid, set(mask))
        except OSError:
            continue


# ---------------------------------------------------------------------------- synchronisation
class BrokenBarrier(HetSpecError):
    """The other party of a :class:`PairBarrier` failed; its error is reported separately."""


class PairBarrier:
    """A barrier for exactly two parties (0 and 1) built on raw locks.

    Party p announces its arrival by releasing the other party's lock and waits on its own. Locks
    alternate by round parity: a party can be at most one round ahead (it waits for the other in
    the next round), so it never releases a lock the other has not consumed yet. :meth:`abort`
    wakes a waiting party with :class:`BrokenBarrier` (an exception on the other side must not
    leave it waiting forever).
    """

    def __init__(self) -> None:
        self._locks = [[threading.Lock(), threading.Lock()] for _ in range(2)]   # [parity][party]
        for pair in self._locks:
            for lock in pair:
                lock.acquire()
        self._round = [0, 0]
        self.broken = False

    def wait(self, party: int) -> None:
        parity = self._round[party] & 1
        self._round[party] += 1
        if self.broken:
            raise BrokenBarrier("the other worker failed")
        self._locks[parity][1 - party].release()
        self._locks[parity][party].acquire()
        if self.broken:
            raise BrokenBarrier("the other worker failed")

    def abort(self) -> None:
        self.broken = True
        for pair in self._locks:
            for lock in pair:
                if lock.locked():
                    try:
                        lock.release()
                    except RuntimeError:
                        pass


class WorkerThread:
    """A persistent thread configured as ``worker`` that runs one submitted call at a time.

    ``submit(fn, *args)`` hands a call over (raw-lock signalling, no queue), ``result()`` waits for
    it and returns its value or re-raises its exception; ``call`` is both. Calls run under
    ``torch.inference_mode()`` (grad mode is per thread and would not follow the caller's).
    """

    def __init__(self, worker: Worker):
        self.worker = worker
        self._job: tuple[Callable, tuple] | None = None
        self._value: Any = None
        self._error: BaseException | None = None
        self._ready, self._done = threading.Lock(), threading.Lock()
        self._ready.acquire()
        self._done.acquire()
        self._busy = False
        self._closed = False
        self.state: WorkerState | None = None
        self._thread = threading.Thread(target=self._loop, name=f"hetspec-{worker.name}", daemon=True)
        self._thread.start()
        self.call(lambda: None)     # wait until the thread has configured itself

    def _loop(self) -> None:
        import torch

        self.state = configure_current_thread(self.worker)
        with torch.inference_mode():    # grad mode is per thread; workers only run inference
            self._serve()

    def _serve(self) -> None:
        while True:
            self._ready.acquire()
            if self._closed:
                return
            fn, args = self._job
            try:
                self._value, self._error = fn(*args), None
            except BaseException as exc:   # handed to the caller by result()
                self._value, self._error = None, exc
            self._done.release()

    def submit(self, fn: Callable, *args) -> None:
        if self._busy:
            raise HetSpecError(f"worker {self.worker.name} is still running a call")
        if self._closed:
            raise HetSpecError(f"worker {self.worker.name} is closed")
        self._busy = True
        self._job = (fn, args)
        self._ready.release()

    def result(self) -> Any:
        self._done.acquire()
        self._busy = False
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._value

    def call(self, fn: Callable, *args) -> Any:
        self.submit(fn, *args)
        return self.result()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._ready.release()
            self._thread.join(timeout=5.0)


def sequential_caller(workers: Sequence[Worker]) -> int:
    """Which of ``workers`` a session whose workers take turns (never two at once, as Dovetail's drafter
    and verifier) runs on the calling thread: the all-core ``cpu`` worker where there is one, else the
    first. A multi-threaded step driven from a :class:`WorkerThread` beside a pinned caller runs at
    single-thread speed or slower even with every core in the thread's mask, so the all-core worker's
    steps belong on the calling thread (``hetspec validate --hetero`` times Dovetail's verification after
    drafting on either worker). Sessions whose workers compute at once (hcmp, alspec) keep their first
    worker on the calling thread."""
    for i, w in enumerate(workers):
        if w.device == "cpu" and not w.cores and (w.threads or 1) > 1:
            return i
    return 0


class WorkerSession:
    """The workers of one run: one worker runs on the calling thread (configured for it until
    :meth:`close`; ``caller``, default the first, see :func:`sequential_caller`), every other distinct
    worker on a :class:`WorkerThread`.

    ``run(i, fn, *args)`` runs a call on worker i and waits; ``submit`` / ``result`` overlap a call
    on a thread worker with work on the caller. Giving the same worker twice (e.g. Dovetail's
    draft and verification on one CPU worker) maps both entries to one executor.
    """

    def __init__(self, workers: Sequence[Worker], caller: int = 0, bind: bool = False):
        if not workers:
            raise HetSpecError("a worker session needs at least one worker")
        self.workers = tuple(workers)
        if not 0 <= caller < len(self.workers):
            raise HetSpecError(f"a worker session of {len(self.workers)} workers has no worker {caller}")
        distinct: list[Worker] = [self.workers[caller]]
        for w in self.workers:
            if w not in distinct:
                distinct.append(w)
        self._main = distinct[0]
        self._state = configure_current_thread(self._main)
        # before any worker thread exists: nothing else of this process computes while the team is found
        self.binding = bind_team(self._main) if bind else None
        self._threads: dict[Worker, WorkerThread] = {}
        try:
            for w in distinct[1:]:
                self._threads[w] = WorkerThread(w)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "WorkerSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def on_caller(self, i: int) -> bool:
        """Whether worker i runs on the calling thread."""
        return self.workers[i] == self._main

    def thread(self, i: int) -> WorkerThread:
        return self._threads[self.workers[i]]

    def run(self, i: int, fn: Callable, *args) -> Any:
        if self.on_caller(i):
            return fn(*args)
        return self.thread(i).call(fn, *args)

    def submit(self, i: int, fn: Callable, *args) -> None:
        if self.on_caller(i):
            raise HetSpecError(f"worker {self.workers[i].name} runs on the calling thread; call it directly")
        self.thread(i).submit(fn, *args)

    def result(self, i: int) -> Any:
        return self.thread(i).result()

    @property
    def bound(self) -> str | None:
        """The worker whose OpenMP team is bound one thread a core (:func:`bind_team`), if any."""
        return self._main.name if self.binding is not None else None

    def pinned(self) -> dict[str, bool]:
        out = {self._main.name: self._state.pinned}
        for w, t in self._threads.items():
            out[w.name] = bool(t.state and t.state.pinned)
        return out

    def close(self) -> None:
        for t in self._threads.values():
            t.close()
        self._threads = {}
        unbind_team(self.binding)
        self.binding = None
        if self._state is not None:
            restore_current_thread(self._state)
            self._state = None


# ---------------------------------------------------------------------------- traces and transfers
def in_runtime(runtime_type, models, config, body):
    """``body(runtime)`` with ``models`` if it already is an open runtime of ``runtime_type`` (a ratio
    sweep keeps one session across runs), else with a runtime opened for this call and closed after."""
    if isinstance(models, runtime_type):
        return body(models)
    with runtime_type(models, config) as runtime:
        return body(runtime)


def record(clock, worker: str, step: int, phase: str, start_s: float, end_s: float, op: str = "",
           proposed: int = 0, accepted: int = 0) -> None:
    """Append one trace record of ``worker`` to a :class:`real.decode.common.Clock` (thread-safe:
    list appends are atomic under the GIL)."""
    clock.records.append(TraceRecord(step=step, phase=phase, device=worker, start_s=start_s, end_s=end_s,
                                     tokens_proposed=proposed, tokens_accepted=accepted, op=op))


def synchronize(device) -> None:
    """Wait for a CUDA device's queued work (nothing to wait for on a CPU)."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def copy_into(dst, src) -> int:
    """Copy ``src`` into the preallocated ``dst`` (another worker's buffer; host<->device where
    they differ), wait for it to land, and return the bytes moved."""
    dst.copy_(src)
    synchronize(dst.device)
    return src.numel() * src.element_size()


def barrier_round_trip_s(workers: Sequence[Worker], rounds: int = 400, warmup: int = 50) -> float:
    """Median seconds of one :class:`PairBarrier` round between two workers doing nothing else: what
    one synchronisation point of a split step costs both of them."""
    if len(workers) != 2:
        raise HetSpecError("barrier timing needs exactly two workers")
    barrier = PairBarrier()
    samples: list[float] = []

    def other() -> None:
        for _ in range(warmup + rounds):
            barrier.wait(1)

    with WorkerSession(workers) as session:
        if session.on_caller(1):
            raise HetSpecError("barrier timing needs two different workers")
        session.submit(1, other)
        for r in range(warmup + rounds):
            t = time.perf_counter()
            barrier.wait(0)
            if r >= warmup:
                samples.append(time.perf_counter() - t)
        session.result(1)
    return statistics.median(samples)
