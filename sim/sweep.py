"""Sweeps: every configuration of models x platforms x methods x acceptance models x contexts x batches.

For each problem (model, platform, acceptance, context, batch) and method, the optimizer's full
evaluation (:func:`sim.optimizer.evaluate_space`) adds one row per configuration; the rows are
collected as columns and become one pandas DataFrame at the end (no per-problem DataFrame, which
would cost more than the evaluation itself). A method that cannot run a problem (no acceptance
form it needs, a model that fits nowhere) is listed in ``skipped`` with its one-line reason.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwmodels.datafile import output_path, writing
from hwmodels.errors import HetSpecError
from hwmodels.loader import get_platform
from sim.acceptance import load_acceptance
from sim.model_spec import get_model
from sim.optimizer import TABLE_COLUMNS, ar_baseline, evaluate_space
from sim.strategies.base import Problem

#: Columns that say which problem a row belongs to (first in the table).
PROBLEM_COLUMNS = ("model", "platform", "acceptance", "context", "batch")
#: Configurations per problem whose partition ratio a sweep refines beyond the grid.
SWEEP_REFINE_TOP = 1
#: Methods that use no acceptance model (run once per problem, acceptance column empty).
NO_ACCEPTANCE_METHODS = ("ar", "offload")


@dataclass(frozen=True)
class SweepResult:
    table: Any                              # pandas.DataFrame, one row per configuration
    skipped: tuple[tuple[str, str], ...]     # (what, why)

    @property
    def configurations(self) -> int:
        return int(len(self.table))


def _problem_rows(combo, methods, acc_models, space, refine, refine_top):
    """Every configuration of every method for one (model, platform, context, batch): chunks of
    columns and the skipped (what, why) pairs."""
    model, platform, context, batch = combo
    chunks: list[dict[str, list]] = []
    skipped: list[tuple[str, str]] = []
    base_problem = Problem(model=model, platform=platform, context=int(context), batch=int(batch))
    ar_tps = ar_baseline(base_problem)
    for method in methods:
        accs = [None] if method in NO_ACCEPTANCE_METHODS or not acc_models else acc_models
        for acc in accs:
            problem = Problem(model=model, platform=platform, acceptance=acc, context=int(context), batch=int(batch))
            label = f"{model.name} / {platform.name} / {method} / {acc.name if acc else '-'} / s={context} b={batch}"
            try:
                cols, _, _, _ = evaluate_space(problem, method, space, refine=refine, refine_top=refine_top)
            except HetSpecError as exc:
                skipped.append((label, str(exc)))
                continue
            n = len(cols["step_s"])
            chunks.append({"model": [model.name] * n, "platform": [platform.name] * n,
                           "acceptance": [acc.name if acc else ""] * n, "context": [int(context)] * n,
                           "batch": [int(batch)] * n, **cols,
                           "speedup_vs_ar": [t / ar_tps for t in cols["tokens_per_s"]]})
    return chunks, skipped


def _problem_rows_star(args):
    return _problem_rows(*args)


def sweep(models: Sequence[str], platforms: Sequence[str], methods: Sequence[str], acceptances: Sequence[str] = (),
          contexts: Sequence[int] = (256,), batches: Sequence[int] = (1,), space: Mapping[str, Any] | None = None,
          progress: bool = True, refine: bool = True, refine_top: int = SWEEP_REFINE_TOP,
          workers: int = 1) -> SweepResult:
    """Evaluate every configuration; ``space`` narrows or widens knobs as in :func:`sim.optimizer.optimize`.

    A partition ratio is evaluated on the optimizer's grid for every configuration and refined for
    the ``refine_top`` best of each problem (a sweep is for maps; ``predict`` refines more).
    ``workers`` > 1 spreads the problems over that many processes (rows keep their order).
    """
    import pandas as pd
    from tqdm import tqdm

    from sim.methods import method_info

    model_specs = [get_model(m) for m in models]
    platform_objs = [get_platform(p) for p in platforms]
    acc_models = [load_acceptance(a) for a in acceptances]
    for method in methods:
        method_info(method)
    if workers < 1:
        raise HetSpecError(f"workers must be >= 1 (got {workers})")
    combos = list(itertools.product(model_specs, platform_objs, contexts, batches))
    jobs = [(combo, tuple(methods), acc_models, space, refine, refine_top) for combo in combos]
    chunks: list[dict[str, list]] = []
    skipped: list[tuple[str, str]] = []
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

    if workers == 1 or len(jobs) < 2:
        for job in jobs:
            collect(_problem_rows(*job))
    else:
        import multiprocessing

        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        with multiprocessing.get_context(method).Pool(workers) as pool:
            for result in pool.imap(_problem_rows_star, jobs, chunksize=max(1, len(jobs) // (workers * 8))):
                collect(result)
    bar.close()
    keys = list(PROBLEM_COLUMNS) + list(TABLE_COLUMNS)
    for chunk in chunks:   # method-specific option columns after the common ones
        keys.extend(k for k in chunk if k not in keys)
    table = pd.DataFrame({k: list(itertools.chain.from_iterable(c.get(k, [None] * len(c["step_s"])) for c in chunks))
                          for k in keys})
    return SweepResult(table=table, skipped=tuple(skipped))


def write_table(table, path: str | Path) -> Path:
    """Write a table as ``.csv`` or ``.parquet`` (parquet needs pyarrow: a clear error without it)."""
    path = check_table_path(path)
    with writing(path, "output table"):
        if path.suffix.lower() == ".csv":
            table.to_csv(path, index=False)
        else:
            table.to_parquet(path, index=False)
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


def parse_int_list(text: str, what: str = "value") -> tuple[int, ...]:
    """``"1-8,16,32"`` -> (1, 2, ..., 8, 16, 32); one line for a malformed list."""
    out: list[int] = []
    try:
        for part in (p.strip() for p in str(text).split(",")):
            if "-" in part:
                lo, hi = (int(v) for v in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                out.extend(range(lo, hi + 1))
            elif part:
                out.append(int(part))
    except ValueError:
        raise HetSpecError(f"{what}: expected integers or ranges like 1-8,16 (got {text!r})") from None
    if not out:
        raise HetSpecError(f"{what}: empty list")
    return tuple(dict.fromkeys(out))


def parse_ratio(text: str):
    """``"0.3"`` -> 0.3 (fixed); ``"0.2:0.8"`` -> (0.2, 0.8) (a range the optimizer searches)."""
    try:
        if ":" in text:
            lo, hi = (float(v) for v in text.split(":", 1))
            if not (0.0 <= lo <= hi <= 1.0):
                raise HetSpecError(f"partition ratio range must be within [0, 1] with low <= high (got {text})")
            return (lo, hi)
        value = float(text)
    except ValueError:
        raise HetSpecError(f"partition ratio: expected a number or LOW:HIGH (got {text!r})") from None
    if not 0.0 <= value <= 1.0:
        raise HetSpecError(f"partition ratio must be in [0, 1] (got {value})")
    return value
