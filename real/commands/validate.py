"""``hetspec validate``: predicted vs measured decode speed of the demo models on the calibrated host."""

from __future__ import annotations

import argparse
import json


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "validate", help="predict and measure the demo models' decode speed on this machine; write a report",
        description="Measure the acceptance profile on calibration prompts, predict step latency and tokens/s "
                    "of a grid (ar; chain gamma 1-8; draft-tree budgets; medusa widths 1-64) with the simulator "
                    "on the calibrated host platform, run the same grid for real on held-out evaluation prompts, "
                    "time random-weight Llama-shaped models, and write report.md, PNG plots and results.json.")
    p.add_argument("--quick", action="store_true",
                   help="fewer prompts, tokens and repeats (the issue's acceptance run; minutes)")
    p.add_argument("--out", default=None, metavar="DIR", help="output folder (default reports/validation)")
    p.add_argument("--preset", default=None, metavar="P",
                   help="demo preset: tiny or small (default: small if its models are cached, else tiny)")
    p.add_argument("--platform", default="host", help="calibrated platform name or .toml file (default host)")
    p.add_argument("--device", default="cpu",
                   help="device of the platform to run on: cpu (all threads, default) or a single-thread worker "
                        "cpu0, cpu1, ... (steadier on a machine shared with other jobs)")
    p.add_argument("--hetero", action="store_true",
                   help="add the heterogeneous section (issue 7): hcmp ratio sweep with its regret, dovetail "
                        "placements, alspec hit rates, weight streaming")
    p.add_argument("--hetero-only", action="store_true",
                   help="run only the heterogeneous section (writes hetero.md, hetero.json and its plots)")
    p.add_argument("--json", action="store_true",
                   help="print the acceptance check (per method: median errors, best configs, regret) as JSON")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from hwmodels.errors import HetSpecError

    if args.preset is not None and args.preset not in ("tiny", "small"):
        raise HetSpecError(f"unknown demo preset {args.preset!r}; valid: small, tiny")
    from real.validate import DEFAULT_OUT, acceptance_check, validate

    out = args.out or DEFAULT_OUT
    if args.hetero_only:
        return _hetero_only(args, out)
    parts = ["hetspec validate"] + (["--quick"] if args.quick else []) + (["--hetero"] if args.hetero else []) + \
        ([f"--preset {args.preset}"] if args.preset else []) + \
        ([f"--platform {args.platform}"] if args.platform != "host" else []) + \
        ([f"--device {args.device}"] if args.device != "cpu" else []) + [f"--out {out}"]
    doc = validate(out, preset=args.preset, quick=args.quick, device=args.device, platform=args.platform,
                   progress=True, command=" ".join(parts), hetero=args.hetero)
    check = acceptance_check(doc)
    if doc.get("hetero"):
        check["hcmp_ratio_regret"] = doc["hetero"]["hcmp"]["regret"]
    check["report"] = f"{out}/report.md"
    if args.json:
        print(json.dumps(check, indent=2))
        return 0
    print(f"\nreport: {out}/report.md (plots and results.json next to it)")
    for method, m in check["methods"].items():
        print(f"  {method:<10} step error {_pct(m['median_step_error'])}, tokens/s error "
              f"{_pct(m['median_tokens_per_s_error'])}, regret {_pct(m['regret'])} "
              f"(predicted best {m['predicted_best']}, measured best {m['measured_best']})"
              f"{'' if m['passes'] else '  <- misses the target'}")
    return 0


def _hetero_only(args: argparse.Namespace, out: str) -> int:
    """``--hetero-only``: the heterogeneous section on its own."""
    from real.validation_hetero import MARKDOWN_FILE, validate_hetero_only

    parts = ["hetspec validate --hetero-only"] + (["--quick"] if args.quick else []) + \
        ([f"--preset {args.preset}"] if args.preset else []) + \
        ([f"--platform {args.platform}"] if args.platform != "host" else []) + [f"--out {out}"]
    doc = validate_hetero_only(out, preset=args.preset, quick=args.quick, platform=args.platform, progress=True,
                               command=" ".join(parts))
    h, d = doc["hcmp"], doc["dovetail"]
    summary = {"report": f"{out}/{MARKDOWN_FILE}", "hcmp_regret": h["regret"],
               "hcmp_predicted_best_ratio": h["predicted_best_ratio"], "hcmp_measured_best_ratio": h["measured_best_ratio"],
               "dovetail_regret": d.get("regret"), "dovetail_predicted_best": d.get("predicted_best"),
               "dovetail_measured_best": d.get("measured_best")}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"\nreport: {summary['report']} (plots and hetero.json next to it)")
    print(f"  hcmp      predicted best r={h['predicted_best_ratio']}, measured best r={h['measured_best_ratio']}, "
          f"regret {_pct(h['regret'])}")
    if d.get("regret") is not None:
        print(f"  dovetail  predicted best {d['predicted_best']}, measured best {d['measured_best']}, "
              f"regret {_pct(d['regret'])}")
    return 0


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"
