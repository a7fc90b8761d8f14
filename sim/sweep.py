"""Sweeps: every configuration of models x platforms x methods x acceptance models x contexts x batches.

For each problem (model, platform, acceptance, context, batch) and method, the optimizer's full
evaluation (:func:`sim.optimizer.evaluate_space`) adds one row per configuration; the rows are
collected as columns and become one pandas DataFrame at the end (no per-problem DataFrame, which
would cost more than the evaluation itself). A method that cannot run a problem (no acceptance
form it needs, a model that fits nowhere, a device without a peak for the model's dtype, a
context beyond the model's positions) is listed in ``skipped`` with its one-line reason.

Knobs (``space``) narrow the methods that take them (:func:`sim.optimizer.declared_knobs`); the
others run over their own search space, and ``unused_knobs`` says which. A knob no method swept
takes is an error.

Where the problems run: in this process, in ``workers`` processes (a local pool), or on a Dask
cluster (``scheduler``: ``"local"`` starts a ``LocalCluster`` of ``workers`` processes; an address
such as ``tcp://host:8786`` uses a running one). Each runs the same chunks of problems and the
rows come back in the same order, so every way gives the same table. Local workers end with the
process that started them (:mod:`sim.parent_watch`); the table is written atomically
(:mod:`hwmodels.atomic_files`), so a killed sweep leaves the earlier table or none.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwmodels.atomic_files import atomic_path
from hwmodels.datafile import output_path, writing
from hwmodels.errors import HetSpecError
from hwmodels.loader import get_platform
from sim.acceptance_loader import load_acceptance
from sim.model_spec import get_model
from sim.optimizer import (TABLE_COLUMNS, UnusedKnobError, ar_by_device, check_knob_names, declared_knobs,
                           evaluate_space, knob_flag, speedups_vs_ar)
from sim.strategies import get_strategy
from sim.strategies.base import Problem

#: Columns that say which problem a row belongs to (first in the table).
PROBLEM_COLUMNS = ("model", "platform", "acceptance", "context", "batch")
#: Configurations per problem whose partition ratio a sweep refines beyond the grid.
SWEEP_REFINE_TOP = 1
#: Methods that use no acceptance model (run once per problem, acceptance column empty).
NO_ACCEPTANCE_METHODS = ("ar", "offload")
#: Seconds to wait for a Dask scheduler before giving up with one line.
CONNECT_TIMEOUT_S = 5.0
#: Most problems (model x platform x context x batch) one sweep evaluates: each costs milliseconds to a
#: second per method, so a larger grid would run for hours; split it into several sweeps.
MAX_PROBLEMS = 100_000
#: ``LocalCluster`` workers are processes (``False``: threads of this process, for tests).
LOCAL_CLUSTER_PROCESSES = True


@dataclass(frozen=True)
class SweepResult:
    table: Any                              # pandas.DataFrame, one row per configuration
    skipped: tuple[tuple[str, str], ...]     # (what, why)
    #: (model, platform, method) of each ``skipped`` entry, in the same order
    skipped_where: tuple[tuple[str, str, str], ...] = ()
    #: knob -> the methods swept that do not take it (they ran over their own search space)
    unused_knobs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def configurations(self) -> int:
        return int(len(self.table))

    def skip_summary(self) -> list[tuple[str, str, str, tuple[str, ...], int]]:
        """One entry per (model, platform, reason): ``(model, platform, why, methods, count)`` in first-seen order."""
        groups: dict[tuple[str, str, str], list] = {}
        for (_, why), (model, platform, method) in zip(self.skipped, self.skipped_where):
            entry = groups.setdefault((model, platform, why), [[], 0])
            if method not in entry[0]:
                entry[0].append(method)
            entry[1] += 1
        return [(m, p, why, tuple(methods), n) for (m, p, why), (methods, n) in groups.items()]


def method_spaces(methods: Sequence[str], space: Mapping[str, Any] | None) -> tuple[dict, dict]:
    """Each method's share of ``space`` (the knobs it declares) and, per knob, the methods that do not take it.

    A knob that no method takes is one line (for one method: the optimizer's own message)."""
    space = {k: v for k, v in (space or {}).items() if v is not None}
    if len(methods) == 1:
        check_knob_names(get_strategy(methods[0]), space)
    declared = {m: set(declared_knobs(get_strategy(m))) for m in methods}
    unused = {k: tuple(m for m in methods if k not in declared[m]) for k in space}
    for knob, without in unused.items():
        if len(without) == len(methods):
            raise UnusedKnobError(f"{knob_flag(knob)} does not apply to any method swept ({', '.join(methods)})")
    per_method = {m: {k: v for k, v in space.items() if k in declared[m]} for m in methods}
    return per_method, {k: v for k, v in unused.items() if v}


def _problem_rows(combo, methods, acc_models, spaces, refine, refine_top):
    """Every configuration of every method for one (model, platform, context, batch): chunks of
    columns and the skipped (what, why, (model, platform, method)) entries."""
    model, platform, context, batch = combo
    chunks: list[dict[str, list]] = []
    skipped: list[tuple[str, str, tuple[str, str, str]]] = []
    if int(context) + 1 > model.max_position:
        why = (f"context {context} + 1 new token exceeds model {model.name}'s max_position {model.max_position}")
        for method in methods:
            skipped.append((f"{model.name} / {platform.name} / {method} / s={context} b={batch}", why,
                            (model.name, platform.name, method)))
        return chunks, skipped
    base_problem = Problem(model=model, platform=platform, context=int(context), batch=int(batch))
    ar_tps = ar_by_device(base_problem)
    for method in methods:
        accs = [None] if method in NO_ACCEPTANCE_METHODS or not acc_models else acc_models
        for acc in accs:
            problem = Problem(model=model, platform=platform, acceptance=acc, context=int(context), batch=int(batch))
            label = f"{model.name} / {platform.name} / {method} / {acc.name if acc else '-'} / s={context} b={batch}"
            try:
                cols, _, _, _ = evaluate_space(problem, method, spaces[method], refine=refine, refine_top=refine_top)
            except HetSpecError as exc:
                skipped.append((label, str(exc), (model.name, platform.name, method)))
                continue
            n = len(cols["step_s"])
            speedup, _ = speedups_vs_ar(problem, cols["device"], cols["tokens_per_s"], ar_tps)
            chunks.append({"model": [model.name] * n, "platform": [platform.name] * n,
                           "acceptance": [acc.name if acc else ""] * n, "context": [int(context)] * n,
                           "batch": [int(batch)] * n, **cols, "speedup_vs_ar": speedup})
    return chunks, skipped


def _problem_rows_star(args):
    return _problem_rows(*args)


def _chunk_rows(jobs):
    """The results of a chunk of problems (one Dask task), in order."""
    return [_problem_rows(*job) for job in jobs]


def sweep(models: Sequence[str], platforms: Sequence[str], methods: Sequence[str], acceptances: Sequence[str] = (),
          contexts: Sequence[int] = (256,), batches: Sequence[int] = (1,), space: Mapping[str, Any] | None = None,
          progress: bool = True, refine: bool = True, refine_top: int = SWEEP_REFINE_TOP,
          workers: int = 1, scheduler: str | None = None) -> SweepResult:
    """Evaluate every configuration; ``space`` narrows or widens knobs as in :func:`sim.optimizer.optimize`
    for the methods that take them (see the module docstring).

    A partition ratio is evaluated on the optimizer's grid for every configuration and refined for
    the ``refine_top`` best of each problem (a sweep is for maps; ``predict`` refines more).
    ``workers`` > 1 spreads the problems over that many processes (rows keep their order);
    ``scheduler`` runs them on a Dask cluster instead: ``"local"`` (a ``LocalCluster`` of ``workers``
    processes) or a scheduler address (``tcp://host:8786``), with the same rows in the same order.
    """
    import pandas as pd
    from tqdm import tqdm

    from sim.methods import method_info

    if workers < 1:
        raise HetSpecError(f"workers must be >= 1 (got {workers})")
    if scheduler is not None:
        _check_scheduler(scheduler, workers)
    model_specs = [get_model(m) for m in models]
    platform_objs = [get_platform(p) for p in platforms]
    acc_models = [load_acceptance(a) for a in acceptances]
    for method in methods:
        method_info(method)
    spaces, unused = method_spaces(methods, space)
    n_problems = len(model_specs) * len(platform_objs) * len(contexts) * len(batches)
    if n_problems > MAX_PROBLEMS:
        raise HetSpecError(f"the sweep holds {n_problems:,} problems (models x platforms x contexts x batches), "
                           f"more than {MAX_PROBLEMS:,}; split it into several sweeps")
    combos = list(itertools.product(model_specs, platform_objs, contexts, batches))
    jobs = [(combo, tuple(methods), acc_models, spaces, refine, refine_top) for combo in combos]
    chunks: list[dict[str, list]] = []
    skipped: list[tuple[str, str, tuple[str, str, str]]] = []
    stack = contextlib.ExitStack()
    client = stack.enter_context(_dask_client(scheduler, workers)) if scheduler is not None else None
    bar = tqdm(total=len(combos), desc="sweep", unit="problem", disable=not progress, leave=False)
    rows = 0

    def collect(result) -> None:
        nonlocal rows
        got, why = result
        chunks.extend(got)
        skipped.extend(why)
        rows += sum(len(c["step_s"]) for c in got)
        bar.update(1)
        bar.set_postfix(configs=rows)

    if client is not None:
        with stack:
            for result in _dask_results(client, jobs):
                collect(result)
    elif workers == 1 or len(jobs) < 2:
        for job in jobs:
            collect(_problem_rows(*job))
    else:
        import multiprocessing
        import os

        from sim.parent_watch import die_with_parent

        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        # workers end with this process, even when a signal kills it (sim.parent_watch)
        with multiprocessing.get_context(method).Pool(workers, initializer=die_with_parent,
                                                       initargs=(os.getpid(),)) as pool:
            for result in pool.imap(_problem_rows_star, jobs, chunksize=_chunk_size(len(jobs), workers)):
                collect(result)
    bar.close()
    keys = list(PROBLEM_COLUMNS) + list(TABLE_COLUMNS)
    for chunk in chunks:   # method-specific option columns after the common ones
        keys.extend(k for k in chunk if k not in keys)
    table = pd.DataFrame({k: list(itertools.chain.from_iterable(c.get(k, [None] * len(c["step_s"])) for c in chunks))
                          for k in keys})
    return SweepResult(table=table, skipped=tuple((what, why) for what, why, _ in skipped),
                       skipped_where=tuple(where for _, _, where in skipped), unused_knobs=unused)


def _chunk_size(jobs: int, workers: int) -> int:
    """Problems per task: about 8 tasks per worker (fewer tasks cost less; more balance the load)."""
    return max(1, jobs // (workers * 8))


# ---------------------------------------------------------------------- Dask
def _check_scheduler(scheduler: str, workers: int) -> None:
    if scheduler != "local" and "://" not in scheduler:
        raise HetSpecError(f"--scheduler expects local or a Dask scheduler address like tcp://HOST:8786 "
                           f"(got {scheduler!r})")
    if scheduler != "local" and workers != 1:
        raise HetSpecError(f"--workers sizes the local pool or --scheduler local; the cluster at {scheduler} "
                           "has its own workers (leave --workers out)")
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        raise HetSpecError("--scheduler needs Dask: pip install 'hetspec[dask]' (or dask[distributed])") from None


@contextlib.contextmanager
def _dask_client(scheduler: str, workers: int):
    """A Dask client: of a new ``LocalCluster`` of ``workers`` processes (``"local"``), or of the scheduler
    at ``scheduler`` (one line if it does not answer within :data:`CONNECT_TIMEOUT_S`)."""
    import logging

    from dask.distributed import Client, LocalCluster

    if scheduler == "local":
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=LOCAL_CLUSTER_PROCESSES,
                          dashboard_address=None, silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
            yield client
        return
    try:
        client = Client(scheduler, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HetSpecError(f"cannot reach the Dask scheduler at {scheduler} within {CONNECT_TIMEOUT_S:g} s "
                           f"({reason})") from None
    with client:
        yield client


def _dask_results(client, jobs: list):
    """Each problem's result, in ``jobs`` order, computed on the cluster in chunks (one task each)."""
    n_workers = max(1, len(client.scheduler_info().get("workers", {})))
    size = _chunk_size(len(jobs), n_workers)
    parts = [jobs[i:i + size] for i in range(0, len(jobs), size)]
    for future in client.map(_chunk_rows, parts, pure=False):    # in submission order: the local order
        yield from future.result()


def write_table(table, path: str | Path) -> Path:
    """Write a table as ``.csv`` or ``.parquet`` (parquet needs pyarrow: a clear error without it)."""
    path = check_table_path(path)
    with writing(path, "output table"), atomic_path(path) as temp:
        if path.suffix.lower() == ".csv":
            table.to_csv(temp, index=False)
        else:
            table.to_parquet(temp, index=False)
    return path


def check_table_path(path: str | Path) -> Path:
    """``path`` checked before a sweep: ``.csv`` or ``.parquet`` (with pyarrow installed), in a place
    that can be written; one line otherwise."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise HetSpecError(f"output file {path}: suffix must be .csv or .parquet")
    if suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise HetSpecError("writing .parquet needs pyarrow (pip install pyarrow, or hetspec[parquet]); "
                               "use a .csv file instead") from None
    return output_path(path, "output table")
