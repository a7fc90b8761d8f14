"""``hetspec sweep``: every configuration over models x platforms x methods x acceptance x context x batch."""

from __future__ import annotations

import argparse
import sys
import time

from sim.cli_numbers import check_int, int_list, name_list
from sim.commands.predict import add_context_args, add_knob_args, space_from_args


def _names(text: str, flag: str, all_names) -> list[str]:
    items = name_list(text, flag)
    return list(all_names) if items == ["all"] else items


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="evaluate every configuration of models x platforms x methods x knobs to a table")
    p.add_argument("--models", required=True, help="comma-separated model presets")
    p.add_argument("--platforms", required=True, help="comma-separated platform presets, or all")
    p.add_argument("--methods", required=True, help="comma-separated methods, or all (those with a strategy)")
    add_context_args(p, many=True)
    add_knob_args(p)
    p.add_argument("--no-refine", action="store_true", help="partition ratio on the coarse grid only")
    p.add_argument("--out", required=True, metavar="FILE", help="output table: .csv or .parquet (needs pyarrow)")
    p.add_argument("--workers", type=int, default=1,
                   help="processes to spread the problems over (default 1); with --scheduler local, its workers")
    p.add_argument("--scheduler", metavar="local|tcp://HOST:PORT",
                   help="run the problems on a Dask cluster (pip install 'hetspec[dask]'): local starts one of "
                        "--workers processes, an address uses a running scheduler; same rows, same order")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(args: argparse.Namespace) -> int:
    from hwmodels.loader import load_platforms
    from sim.commands.catalog import warn_bad_platform_files
    from sim.optimizer import knob_flag
    from sim.strategies import available_methods
    from sim.sweep import check_table_path, sweep, write_table

    check_int(args.workers, "--workers", 1)
    check_table_path(args.out)              # before the sweep: a table that cannot be written fails at once
    models, methods = _names(args.models, "--models", []), _names(args.methods, "--methods", available_methods())
    contexts, batches = int_list(args.contexts, "--contexts", 0), int_list(args.batches, "--batches", 1)
    platforms = _names(args.platforms, "--platforms", ["all"])
    if platforms == ["all"]:
        loaded, problems = load_platforms()
        warn_bad_platform_files(problems)
        platforms = list(loaded)
    start = time.perf_counter()
    result = sweep(models=models, platforms=platforms, methods=methods, acceptances=args.acceptance or (),
                   contexts=contexts, batches=batches,
                   space=space_from_args(args), progress=not args.no_progress, refine=not args.no_refine,
                   workers=args.workers, scheduler=args.scheduler)
    path = write_table(result.table, args.out)
    elapsed = time.perf_counter() - start
    for knob, methods in result.unused_knobs.items():
        print(f"hetspec: note: {knob_flag(knob)} does not apply to {', '.join(methods)}: swept over their own "
              "search space", file=sys.stderr)
    print(f"{result.configurations} configurations in {elapsed:.1f} s -> {path}")
    # what was skipped and why: one line per (model, platform, reason), so no platform drops out unseen
    for model, platform, why, methods, count in result.skip_summary():
        print(f"hetspec: skipped {model} on {platform} ({', '.join(methods)}; {count} problem"
              f"{'s' if count != 1 else ''}): {why}", file=sys.stderr)
    return 0
