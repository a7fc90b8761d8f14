"""Interleaved repeats of the heterogeneous sweeps (:mod:`real.validation.hetero.setup`): each measurement
bracketed by the contention guard (:mod:`real.run.contention`), which retakes a measurement the cores were slowed
under, and each repeat, where asked, in a spawned process of its own (CPU workers: a fresh process per repeat).
The protocol itself, one round of :func:`real.run.repeats.interleaved`, is :mod:`real.run.repeats`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TypeVar

from hwmodels.errors import HetSpecError, UntrustedMeasurement
from real.run.repeats import check_counts, interleaved, rotation

T = TypeVar("T")


def interleaved_repeats(n: int, repeats: int, measure: Callable[[object, int, int, bool], T], payload: object,
                        tick: Callable[[], None] | None = None, fresh_processes: bool = False,
                        threads: int | None = None, guard=None, log: list | None = None) -> list[list[T]]:
    """``out[item][repeat]`` of ``measure(payload, item, repeat, first)``: :func:`interleaved` with one round,
    in this process or (``fresh_processes``) each repeat in a spawned process of its own with ``threads``
    torch threads. ``first`` says that this process has not measured the item before (every item of a
    fresh process; the first repeat here), so a warm-up is due. ``measure`` is a module-level function and
    ``payload`` is pickled over (models included). ``tick`` after every measurement. A failure in a
    process is raised here as one line. ``guard`` (:class:`real.run.contention.Guard`): each measurement
    bracketed by its probe and retaken while the cores were slowed from outside; its records are appended
    to ``log``."""
    from real.run.contention import guarded

    records: list = []

    def one(i: int, rep: int, _j: int):
        result, record = guarded(guard, partial(measure, payload, i, rep), i, rep, rep == 0)
        records.append(record)
        return result

    if not fresh_processes:
        out = [[r[0] for r in row] for row in interleaved(n, repeats, one, tick=tick)]
    else:
        check_counts(n, repeats, 1)
        runs = [_one_repeat(n, rep, measure, payload, tick, threads, guard, records) for rep in range(repeats)]
        out = [[runs[rep][i] for rep in range(repeats)] for i in range(n)]
    if log is not None:
        log.extend(r for r in records if r is not None)
    return out


def _one_repeat(n: int, rep: int, measure, payload, tick, threads, guard=None, records: list | None = None) -> list:
    import multiprocessing

    from real.run.contention import adopt

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_repeat_child, args=(child, n, rep, measure, payload, threads, guard), daemon=True)
    proc.start()
    child.close()
    got: dict[int, object] = {}
    try:
        while True:
            try:
                message = parent.recv()
            except EOFError:
                raise HetSpecError(f"the measuring process of repeat {rep + 1} ended without its results "
                                   f"(exit code {proc.exitcode})") from None
            if message[0] == "error":       # an untrusted measurement keeps its exit status
                raise (UntrustedMeasurement if message[2] else HetSpecError)(
                    f"repeat {rep + 1}, in its own process: {message[1]}")
            if message[0] == "done":
                if guard is not None:    # the next process's guard carries on from this one's stretch
                    adopt(guard.stretch, message[1])
                break
            got[message[1]] = message[2]
            if records is not None:
                records.append(message[3])
            if tick is not None:
                tick()
    finally:
        parent.close()
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
    return [got[i] for i in range(n)]


def _repeat_child(conn, n: int, rep: int, measure, payload, threads, guard=None) -> None:
    """The spawned process of one repeat: sends ``("item", i, result, guard record)`` per item, then
    ``("done", guard's stretch)``; a failure as ``("error", one line, whether it is an untrusted measurement)``."""
    from real.run.contention import guarded

    try:
        if threads:
            import torch

            torch.set_num_threads(threads)
        if guard is not None:
            guard.probe()        # discarded: a fresh process's first GEMMs read low, and would cost a wait
        for i in rotation(n, rep):
            result, record = guarded(guard, partial(measure, payload, i, rep), i, rep, True)
            conn.send(("item", i, result, record))
        conn.send(("done", guard.stretch if guard is not None else None))
    except Exception as exc:            # handed to the parent, which raises it in one line
        first = str(exc).splitlines()[0] if str(exc) else ""
        untrusted = isinstance(exc, UntrustedMeasurement)
        conn.send(("error", first if untrusted else f"{type(exc).__name__}: {first}", untrusted))
    finally:
        conn.close()
