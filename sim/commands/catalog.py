"""``hetspec platforms``, ``hetspec platform show NAME``, ``hetspec models``."""

from __future__ import annotations

import argparse
import json
import sys

from hwmodels.loader import get_platform, load_platforms
from hwmodels.platform import Platform
from sim.model_spec import get_model, model_names


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("platforms", help="list platform presets (and calibrated user platforms)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_platforms)

    p = sub.add_parser("platform", help="inspect one platform")
    psub = p.add_subparsers(dest="platform_command", metavar="ACTION", required=True)
    show = psub.add_parser("show", help="devices, links and memory domains of a platform, with sources")
    show.add_argument("name", help="preset name or path to a platform .toml")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(func=cmd_platform_show)

    p = sub.add_parser("models", help="list model presets")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_models)


def warn_bad_platform_files(problems) -> None:
    """One stderr line per platform file that does not load (the listing goes on without it), and per
    user file that a built-in preset of the same name hides."""
    from hwmodels.loader import shadow_warning, shadowed_platform_files

    for problem in problems:
        print(f"hetspec: warning: skipped a platform file that does not load: {problem}", file=sys.stderr)
    for name, path in shadowed_platform_files().items():
        print(shadow_warning(name, path), file=sys.stderr)


def cmd_platforms(args: argparse.Namespace) -> int:
    platforms, problems = load_platforms()
    warn_bad_platform_files(problems)
    rows = []
    for name, plat in platforms.items():
        kinds = "+".join(f"{d.kind}:{n}" for n, d in plat.devices.items())
        rows.append({"name": name, "devices": kinds, "description": plat.description, "path": plat.path})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        width = max((len(r["name"]) for r in rows), default=0)
        for r in rows:
            print(f"{r['name']:<{width}}  {r['devices']:<18}  {r['description']}")
    return 0


def platform_summary(plat: Platform) -> dict:
    from hwmodels.loader import platform_to_dict

    return platform_to_dict(plat)


def cmd_platform_show(args: argparse.Namespace) -> int:
    plat = get_platform(args.name)
    if args.json:
        print(json.dumps(platform_summary(plat), indent=2))
        return 0
    print(f"{plat.name}: {plat.description}\n  file: {plat.path}")
    for name, d in plat.devices.items():
        print(f"\ndevice {name} ({d.kind}) {d.description}")
        peaks = ", ".join(f"{dt} {v:g}" + (f" (derived from {d.derived_peaks[dt][0]})" if dt in d.derived_peaks else "")
                          for dt, v in d.peak_tflops.items())
        print(f"  peak TFLOP/s       {peaks}")
        for key, unit in (("mem_bw_gbps", "GB/s"), ("mem_capacity_gb", "GB"), ("bw_efficiency", ""),
                          ("compute_efficiency", ""), ("op_overhead_us", "us"), ("token_tile", "tokens"),
                          ("sparse_attn_efficiency", ""), ("cores", "")):
            value = getattr(d, key)
            if value is not None:
                print(f"  {key:<22} {value:<10g} {unit:<7} [{d.sources.get(key, '')}]")
        if d.gemm_efficiency_curve:
            curve = ", ".join(f"{t}:{e:.2f}" for t, e in d.gemm_efficiency_curve)
            print(f"  gemm_efficiency_curve {curve}  [{d.sources.get('gemm_efficiency_curve', '')}]")
        for dt, own in d.dtype_gemm_efficiency_curves.items():
            curve = ", ".join(f"{t}:{e:.2f}" for t, e in own)
            source = d.sources.get(f"dtype_gemm_efficiency_curve.{dt}", "")
            print(f"  dtype_gemm_efficiency_curve.{dt} {curve}  [{source}]")
        if d.timing is not None:
            for key, value in (("backend", d.timing.backend), ("profile", d.timing.profile_file),
                               ("mode", d.timing.mode)):
                if key in d.timing.sources:
                    print(f"  timing.{key:<15} {value:<10} {'':<7} [{d.timing.sources[key]}]")
    for link in plat.links:
        print(f"\nlink {link.name} ({link.kind}) {link.src} <-> {link.dst}: {link.bw_gbps:g} GB/s x "
              f"{link.efficiency:g}, {link.latency_us:g} us  [{link.sources.get('bw_gbps', '')}]")
    for dom in plat.memory_domains:
        print(f"\nmemory domain {dom.name}: {', '.join(dom.devices)}; {dom.bw_gbps:g} GB/s shared, "
              f"{dom.capacity_gb:g} GB, contention efficiency {dom.contention_efficiency:g}"
              f"  [{dom.sources.get('bw_gbps', '')}]")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    rows = []
    for name in model_names():
        m = get_model(name)
        rows.append({"name": name, "arch": m.arch, "params_b": round(m.params / 1e9, 3), "n_layers": m.n_layers,
                     "hidden": m.hidden, "intermediate": m.intermediate, "n_heads": m.n_heads,
                     "n_kv_heads": m.n_kv_heads, "vocab": m.vocab, "dtype": m.dtype, "source": m.source})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'name':<20}{'arch':<6}{'params':>9}{'layers':>7}{'hidden':>7}{'inter':>7}{'heads':>6}{'kv':>4}{'vocab':>8}")
        for r in rows:
            print(f"{r['name']:<20}{r['arch']:<6}{r['params_b']:>8.3f}B{r['n_layers']:>7}{r['hidden']:>7}"
                  f"{r['intermediate']:>7}{r['n_heads']:>6}{r['n_kv_heads']:>4}{r['vocab']:>8}")
    return 0
