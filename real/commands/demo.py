"""``hetspec demo``: train (if needed), calibrate, predict and validate on the demo models, end to end."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "demo", help="the whole job on the demo models: train, calibrate, predict, validate",
        description="Train the demo models if they are not cached (tiny unless small is cached or asked for), "
                    "calibrate this machine (reusing a fresh host platform), predict the best configuration of "
                    "every decode method on it, validate the predictions with quick real runs, and print where "
                    "the report is.")
    p.add_argument("--preset", default=None, metavar="P",
                   help="demo preset: tiny (trains in ~2 min) or small (~20-25 min on 2 cores); default: small if "
                        "cached, else tiny")
    p.add_argument("--recalibrate", action="store_true", help="measure the host again even if host.toml is fresh")
    p.add_argument("--out", default=None, metavar="DIR", help="folder of the validation report (default reports/demo)")
    p.add_argument("--device", default="cpu", help="host device: cpu (all threads, default) or a worker cpu0, ...")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from hwmodels.errors import HetSpecError

    if args.preset is not None and args.preset not in ("tiny", "small"):
        raise HetSpecError(f"unknown demo preset {args.preset!r}; valid: small, tiny")
    from real.demo_job import DEFAULT_OUT, run_demo

    run_demo(preset=args.preset, recalibrate=args.recalibrate, out=args.out or DEFAULT_OUT, device=args.device)
    return 0
