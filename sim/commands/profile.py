"""``hetspec profile``: measured operator-latency profiles (import from Vidur or the GPU probe, inspect)."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="measured operator-latency profiles: import (Vidur, GPU probe), show")
    psub = p.add_subparsers(dest="profile_command", metavar="ACTION", required=True)

    v = psub.add_parser("import-vidur", help="convert Vidur's mlp.csv [attention.csv] into a HetSpec profile")
    v.add_argument("mlp_csv", help="Vidur's mlp.csv (rows with one tensor-parallel worker are used)")
    v.add_argument("attention_csv", nargs="?", help="Vidur's attention.csv of the same model (optional)")
    v.add_argument("--out", required=True, help="profile file to write (.csv)")
    v.add_argument("--device", default="", help="the GPU the profile was measured on (header text)")
    v.add_argument("--source", help="where the data comes from (repository, commit, licence); default: Vidur's "
                                    "citation and the input file names")
    v.add_argument("--json", action="store_true", help="print the summary as JSON")
    v.set_defaults(func=cmd_import_vidur)

    e = psub.add_parser("import-probe", help="convert the GPU operator probe's op,shape,q,s,ms (launch-inclusive "
                                             "eager calls) into a HetSpec profile for eager mode")
    e.add_argument("events_csv", help="the probe's CSV: op, shape, q, s, ms")
    e.add_argument("--out", required=True, help="profile file to write (.csv)")
    e.add_argument("--device", default="", help="the GPU it was measured on (header text)")
    e.add_argument("--source", help="where and when it was measured (default: the input file name)")
    e.add_argument("--json", action="store_true", help="print the summary as JSON")
    e.set_defaults(func=cmd_import_probe)

    s = psub.add_parser("show", help="what a profile covers; with --platform, the efficiencies it measures there")
    s.add_argument("file", help="a profile file (hetspec-op-profile/1)")
    s.add_argument("--platform", help="platform whose device peaks the efficiencies are measured against")
    s.add_argument("--device", help="device of --platform (default: its accelerator)")
    s.add_argument("--mode", choices=("eager", "graph"), default="graph",
                   help="execution mode for op_overhead_us (default graph)")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=cmd_show)


def _print_summary(summary: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, indent=1))
        return
    print(f"wrote {summary['out']}: {summary['rows']} rows")
    for key, value in summary.items():
        if key not in ("out", "rows"):
            print(f"  {key}: {value}")


def cmd_import_vidur(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sim.profile_import import VIDUR_CITATION, import_vidur

    files = ", ".join(Path(f).name for f in (args.mlp_csv, args.attention_csv) if f)
    source = args.source or f"Vidur profile ({files}); {VIDUR_CITATION}; converted by hetspec profile import-vidur"
    _print_summary(import_vidur(args.mlp_csv, args.attention_csv, args.out, args.device, source), args.json)
    return 0


def cmd_import_probe(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sim.profile_import import import_probe

    source = args.source or f"GPU operator probe ({Path(args.events_csv).name}); converted by hetspec profile import-probe"
    _print_summary(import_probe(args.events_csv, args.out, args.device, source), args.json)
    return 0


def profile_summary(profile, platform=None, device=None, mode: str = "graph") -> dict:
    """What a profile covers (per operator and shape: rows, token and key ranges) and, given a device,
    the efficiencies it measures there (the values a profiled device's platform file must carry)."""
    from hwmodels.profile import measured_efficiencies

    tables = []
    for (op, shape), table in sorted(profile.tables.items()):
        tokens = [t for line in table.lines for t in line[1]]
        keys = [line[0] for line in table.lines]
        tables.append({"op": op, "shape": shape, "rows": len(tokens), "tokens": [min(tokens), max(tokens)],
                       "keys": [min(keys), max(keys)]})
    out = {"file": profile.path, "dtype": profile.dtype, "device": profile.device, "source": profile.source,
           "rows": profile.rows, "launch_us": dict(profile.launch_us), "tables": tables}
    if device is not None:
        eff = measured_efficiencies(profile, device.mem_bw_gbps, device.peak_flops_per_s(profile.dtype) / 1e12)
        out["platform"] = {
            "platform": platform.name, "device": device.name, "mode": mode,
            "bw_efficiency": round(eff["bw_efficiency"], 3), "bw_where": eff["bw_where"],
            "compute_efficiency": round(eff["compute_efficiency"], 3), "compute_where": eff["compute_where"],
            "op_overhead_us": round(profile.launch_us[mode], 3) if mode in profile.launch_us else None,
        }
    return out


def cmd_show(args: argparse.Namespace) -> int:
    from hwmodels.errors import HetSpecError
    from hwmodels.loader import get_platform
    from hwmodels.profile import read_profile

    profile = read_profile(args.file)
    platform = device = None
    if args.platform:
        platform = get_platform(args.platform)
        device = platform.device(args.device) if args.device else platform.accelerator
    elif args.device:
        raise HetSpecError("--device needs --platform")
    out = profile_summary(profile, platform, device, args.mode)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{out['file']}: {out['rows']} rows, {out['dtype']}, {out['device'] or 'device not named'}")
    print(f"  source: {out['source']}")
    launch = ", ".join(f"{m} {v:g} us" for m, v in out["launch_us"].items()) or "none"
    print(f"  launch cost per kernel (operators not covered): {launch}")
    print(f"  {'op':<12}{'shape':<16}{'rows':>6}{'tokens':>14}{'keys':>14}")
    for t in out["tables"]:
        keys = "-" if t["keys"] == [0, 0] else f"{t['keys'][0]}..{t['keys'][1]}"
        print(f"  {t['op']:<12}{t['shape']:<16}{t['rows']:>6}{t['tokens'][0]:>8}..{t['tokens'][1]:<4}{keys:>14}")
    if "platform" in out:
        p = out["platform"]
        print(f"on {p['platform']}/{p['device']} ({p['mode']} mode), the fields of a profiled device:")
        print(f"  bw_efficiency = {p['bw_efficiency']}   ({p['bw_where']})")
        print(f"  compute_efficiency = {p['compute_efficiency']}   ({p['compute_where']})")
        over = p["op_overhead_us"]
        missing = "(the profile gives no launch_us." + p["mode"] + ")"
        print(f"  op_overhead_us = {over if over is not None else missing}")
    return 0
