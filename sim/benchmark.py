"""Speed benchmark of the simulator: ``python -m sim.benchmark``.

Measures the simulator's two speed targets and prints them:

1. one ``hetspec predict`` with its full search (the reference example: Vicuna-7B on the Jetson
   Xavier NX at 204 MHz, Medusa, Ghidorah's MBPP table), as a fresh process (Python start-up and
   imports included: what a user waits for) and in-process (the search alone); target < 2 s;
2. a sweep of at least 100,000 configurations (models x platforms x methods x acceptance x
   contexts x batches, every knob combination); target < 60 s;
3. the same grid on the platforms whose GPUs are priced by measured operator profiles
   (``a100-80gb-vidur``, ``h100-sxm-vidur``) and on their roofline twins: configurations per
   second with a profiled device (the sweep's speed must hold: 100,000 a minute).

Timings are noisy on a shared machine: medians of ``--repeats`` runs are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PREDICT_ARGS = ("--model", "vicuna-7b", "--platform", "jetson-xavier-nx-204mhz", "--method", "medusa",
                "--acceptance", "ghidorah-mbpp")
FALLBACK_PLATFORM = "a100-80gb-pcie"
#: The benchmark sweep: every model x platform x method x acceptance x context x batch below.
SWEEP_MODELS = ("llama2-7b", "vicuna-7b", "llama2-13b", "vicuna-13b", "llama3.1-8b", "tinyllama-1.1b")
SWEEP_ACCEPTANCE = ("ghidorah-mbpp", "alpha:0.8")
SWEEP_CONTEXTS = (256, 2048)
SWEEP_BATCHES = (1, 4)
TARGET_CONFIGS = 100_000
#: Platforms whose GPUs are priced by measured operator profiles (sim.op_timing), and their roofline twins:
#: the same benchmark grid on both shows what a profiled device costs the sweep.
PROFILED_PLATFORMS = ("a100-80gb-vidur", "h100-sxm-vidur")
ROOFLINE_TWINS = ("a100-80gb-pcie", "h100-sxm")


def _predict_args() -> list[str]:
    from hwmodels.loader import platform_names

    args = list(PREDICT_ARGS)
    if "jetson-xavier-nx-204mhz" not in platform_names():
        args[3] = FALLBACK_PLATFORM
    return args


def time_predict_cli(repeats: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))}
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "hetspec", "predict", *_predict_args(), "--json"], cwd=REPO,
                              env=env, capture_output=True, text=True)
        out.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise RuntimeError(f"predict failed: {proc.stderr.strip()}")
    return out


def time_predict_in_process(repeats: int) -> tuple[list[float], int]:
    from hwmodels.loader import get_platform
    from sim.acceptance_loader import load_acceptance
    from sim.model_spec import get_model
    from sim.optimizer import optimize
    from sim.strategies.base import Problem

    a = _predict_args()
    out, rows = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        # load everything each time: a fresh problem, as one predict call does
        problem = Problem(get_model(a[1]), get_platform(a[3]), load_acceptance(a[7]))
        rows = optimize(problem, a[5]).rows
        out.append(time.perf_counter() - start)
    return out, rows


def time_sweep(platforms: tuple[str, ...], methods: tuple[str, ...], contexts=SWEEP_CONTEXTS,
               models=SWEEP_MODELS, workers: int = 1) -> dict[str, tuple[float, int, int]]:
    """Per method: (seconds, configurations, skipped method/problem pairs) of the benchmark sweep."""
    from sim.sweep import sweep

    out = {}
    for method in methods:
        start = time.perf_counter()
        result = sweep(models, platforms, (method,), SWEEP_ACCEPTANCE, contexts=contexts, batches=SWEEP_BATCHES,
                       progress=False, workers=workers)
        out[method] = (time.perf_counter() - start, result.configurations, len(result.skipped))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.benchmark", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per predict measurement (median reported)")
    parser.add_argument("--quick", action="store_true", help="a small sweep (for a smoke test), not the 100k one")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes for the sweep (default: every CPU, as `hetspec sweep --workers N`)")
    parser.add_argument("--methods", help="comma-separated methods of the sweep (default: every method with a strategy)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)

    from hwmodels.loader import platform_names
    from sim.strategies import available_methods

    cli = time_predict_cli(args.repeats)
    warm, rows = time_predict_in_process(args.repeats)
    platforms = tuple(platform_names()) if not args.quick else ("a100-80gb-pcie",)
    methods = tuple(args.methods.split(",")) if args.methods else available_methods()
    if args.quick:
        per_method = time_sweep(platforms, methods, contexts=(256,), models=("vicuna-7b",), workers=args.workers)
    else:
        per_method = time_sweep(platforms, methods, workers=args.workers)
    sweep_s = sum(v[0] for v in per_method.values())
    configs = sum(v[1] for v in per_method.values())
    skipped = sum(v[2] for v in per_method.values())
    profiled = time_profiled(methods, args.workers, args.quick)
    report = {
        "predict_command": "hetspec predict " + " ".join(_predict_args()) + " --json",
        "predict_configurations": rows,
        "predict_cli_median_s": statistics.median(cli),
        "predict_in_process_median_s": statistics.median(warm),
        "predict_target_s": 2.0,
        "sweep_configurations": configs,
        "sweep_s": sweep_s,
        "sweep_configs_per_s": configs / sweep_s,
        "sweep_skipped_problem_methods": skipped,
        "sweep_workers": args.workers,
        "sweep_by_method": {m: {"s": v[0], "configurations": v[1], "configs_per_s": v[1] / v[0] if v[0] else 0.0}
                            for m, v in per_method.items()},
        "sweep_target": f">= {TARGET_CONFIGS} configurations in < 60 s",
        "sweep_grid": {"models": list(SWEEP_MODELS) if not args.quick else ["vicuna-7b"], "platforms": list(platforms),
                       "methods": list(methods), "acceptance": list(SWEEP_ACCEPTANCE),
                       "contexts": list(SWEEP_CONTEXTS) if not args.quick else [256],
                       "batches": list(SWEEP_BATCHES)},
        "cpus": os.cpu_count(),
        "load_average_1_5_15": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
    report["profiled_sweep"] = profiled
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"predict ({report['predict_configurations']} configurations): "
          f"{report['predict_cli_median_s']:.2f} s as a fresh process, "
          f"{report['predict_in_process_median_s'] * 1e3:.0f} ms in-process "
          f"(median of {args.repeats}; target < 2 s)")
    print(f"  {report['predict_command']}")
    print(f"sweep: {configs} configurations in {sweep_s:.1f} s ({report['sweep_configs_per_s']:.0f} /s, "
          f"{args.workers} worker processes; target >= {TARGET_CONFIGS} in < 60 s)")
    print(f"  {len(report['sweep_grid']['models'])} models x {len(platforms)} platforms x {len(methods)} methods "
          f"({', '.join(methods)}) x {len(SWEEP_ACCEPTANCE)} acceptance x "
          f"{len(report['sweep_grid']['contexts'])} contexts x {len(SWEEP_BATCHES)} batches; "
          f"{skipped} method/problem pairs skipped (no fitting acceptance or device)")
    if report["load_average_1_5_15"]:
        load = report["load_average_1_5_15"]
        print(f"  machine load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} on {os.cpu_count()} CPUs "
              "(other jobs slow every figure above)")
    for method, v in report["sweep_by_method"].items():
        print(f"  {method:<11}{v['configurations']:>8} configurations {v['s']:>7.1f} s {v['configs_per_s']:>9.0f} /s")
    for label, v in profiled.items():
        print(f"sweep on {label} ({', '.join(v['platforms'])}): {v['configurations']} configurations in {v['s']:.1f} s "
              f"({v['configs_per_s']:.0f} /s, {60 * v['configs_per_s']:.0f} a minute)")
    return 0


def time_profiled(methods: tuple[str, ...], workers: int, quick: bool) -> dict[str, dict]:
    """The benchmark grid on the profiled platforms and on their roofline twins: seconds, configurations, rate."""
    from hwmodels.loader import platform_names

    names = set(platform_names())
    out = {}
    for label, platforms in (("profiled devices", PROFILED_PLATFORMS), ("their roofline twins", ROOFLINE_TWINS)):
        platforms = tuple(p for p in platforms if p in names)
        if not platforms:
            continue
        kw = {"contexts": (256,), "models": ("vicuna-7b",)} if quick else {}
        per_method = time_sweep(platforms, methods, workers=workers, **kw)
        secs = sum(v[0] for v in per_method.values())
        configs = sum(v[1] for v in per_method.values())
        out[label] = {"platforms": list(platforms), "configurations": configs, "s": secs,
                      "configs_per_s": configs / secs if secs else 0.0}
    return out


if __name__ == "__main__":
    raise SystemExit(main())
