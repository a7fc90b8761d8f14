"""The commands that set the simulator against this machine: ``hetspec calibrate``, ``hetspec validate``
and ``hetspec demo``."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from real.train.commands import add_preset_flags, resolve_preset
from sim.cli_numbers import check_float


def register(subparsers) -> None:
    register_calibrate(subparsers)
    register_validate(subparsers)
    register_demo(subparsers)


# ---------------------------------------------------------------------------- hetspec calibrate
def register_calibrate(subparsers) -> None:
    from real.validation.calibration.budget import DEFAULT_BUDGET_S, QUICK_BUDGET_S
    from real.validation.trust import SPREAD_LIMIT

    p = subparsers.add_parser(
        "calibrate", help="measure this machine (torch micro-benchmarks) and write the host platform",
        description="Measure this machine with torch micro-benchmarks in short interleaved rounds inside a time "
                    "budget: GEMM FLOP/s against the token count (weights in the cache and streamed from DRAM), "
                    "stream bandwidth beyond and inside the last-level cache, the real path's fixed cost per "
                    "operator, 1 thread vs all threads, and two workers streaming at once. Writes a platform file "
                    "(every number with the measurement as its source, the medians over the rounds and their "
                    "spread) so that --platform host works afterwards, and, without --quick, the CPU's quick "
                    "operator profile beside it (profiled-cpu), which hetspec validate prices the grid with next "
                    "to the roofline.")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="platform file to write (default: host.toml in $HETSPEC_PLATFORMS_DIR or the user "
                        "platform folder)")
    p.add_argument("--quick", action="store_true",
                   help=f"a {QUICK_BUDGET_S:.0f} s budget and no operator profile (default: a "
                        f"{DEFAULT_BUDGET_S:.0f} s budget of micro-benchmarks, then the CPU's quick operator profile)")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="seconds the micro-benchmarks may take (default: the budget of --quick or of the default run)")
    p.add_argument("--profile", action="store_true",
                   help="the explicit, longer run: the full operator profiles of cpu and of the first core's "
                        "single-thread worker (which hetspec validate --device cpuN prices with), guarded against "
                        "the cores slowed from outside; tens of minutes on 2 cores")
    p.add_argument("--strict", action="store_true",
                   help=f"refuse a calibration a key quantity of which spread over its rounds beyond "
                        f"{100 * SPREAD_LIMIT:.0f} %% (exit status 3); without it such a calibration is written, "
                        "labelled with its spread")
    p.add_argument("--record", default=None, metavar="DIR",
                   help="also write the calibration as a run record into DIR: report.md (the summary), "
                        "results.json (the measurements and their record) and machine.json")
    p.add_argument("--device", default=None, metavar="D",
                   help="profile the operators of a torch device (cpu, cuda, cuda:N; cpuN: the single-thread "
                        "worker pinned to core N) instead: writes a measured operator profile (CSV) and a platform "
                        "whose device is priced by it (TOML)")
    p.add_argument("--models", default=None, metavar="M1,M2",
                   help="the models whose operator shapes the operator profile covers: presets, GGUF files, "
                        "config.json files or Hugging Face model folders, demo:tiny, demo:small. Without --device: "
                        "the CPU's operator profile beside the calibration covers them in addition to the demo models "
                        "(so that "
                        "--platform profiled-cpu prices them by measurement); with --device: instead of the default "
                        "(the demo models, plus llama2-7b on CUDA)")
    p.add_argument("--dtype", default=None, choices=("fp32", "fp16", "bf16"),
                   help="with --device: the dtype profiled (default fp32 on a CPU, fp16 on CUDA)")
    p.set_defaults(func=handle_calibrate)


def handle_calibrate(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from hwmodels.datafile import output_folder, output_path
    from hwmodels.errors import HetSpecError

    if args.out is not None and not args.out.endswith(".toml"):
        raise HetSpecError(f"--out {args.out}: a platform file ends in .toml")
    if args.budget is not None:
        check_float(args.budget, "--budget", above=0)
    if args.quick and args.profile:
        raise HetSpecError("--quick and --profile: the quick run writes no operator profile; choose one")
    if args.out is not None:   # a file that cannot be written fails now, not after the measurement
        output_path(args.out, "platform file")
    if args.device is not None:
        if args.budget is not None or args.strict or args.profile or args.record is not None:
            raise HetSpecError("--budget, --strict, --profile and --record go with the host calibration "
                               "(without --device)")
        return _profile_device(args)
    if args.dtype is not None:
        raise HetSpecError("--dtype goes with --device (the operator profile of a torch device)")
    extra = None
    if args.models is not None:
        if args.quick:
            raise HetSpecError("--models and --quick: the quick run writes no operator profile to cover them; "
                               "drop --quick")
        extra = _model_names(args.models)     # a bad name or path: one line, before anything is measured
    from real.validation.calibration.calibrate import budget_for, calibrate, summary_lines
    from real.validation.calibration.hetero_probes import HETERO_PROBES
    from real.validation.calibration.host_facts import raw_path, settings_for

    budget = budget_for(args.quick, args.budget)
    started = datetime.now(timezone.utc)
    if args.record is not None:
        output_folder(args.record, "run record folder")
    _say(f"calibrate: micro-benchmarks for at most {budget.seconds:.0f} s"
         + ("" if args.quick else ", then the CPU's quick operator profile" if not args.profile else
            ", then the full operator profiles of cpu and the first core's worker (tens of minutes)"))
    # the full benchmark sizes go with the full run; the budget bounds the rounds of either
    platform, path, cal = calibrate(args.out, quick=args.quick, progress=True, strict=args.strict, budget=budget,
                                    settings=settings_for(not args.profile), probes=HETERO_PROBES)
    lines = summary_lines(platform, cal) + [f"wrote {path} (measurements: {raw_path(path)})"]
    for line in lines:
        print(line)
    if not args.quick:
        # the CPU's operator profile beside it, which `hetspec validate` prices the grid with next to the roofline
        from real.validation.calibration.cpu_profiles import profile_cpu_beside

        for line in profile_cpu_beside(path, quick=not args.profile, one_thread=args.profile, extra_models=extra):
            print(line)
            lines.append(line)
    if args.record is not None:
        _calibration_record(args.record, path, lines, started)
    return 0


def _calibration_record(folder: str, platform_path, lines: list[str], started) -> None:
    """The calibration as a run record: its summary as report.md, its measurements (with their ``record``) as
    results.json, and machine.json."""
    import shlex
    import shutil
    import sys
    from pathlib import Path

    from hwmodels import atomic_files
    from real.validation.calibration.host_facts import raw_path
    from sim.records import write_machine_json

    out = Path(folder)
    command = "hetspec " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["calibrate"] else "hetspec calibrate"
    atomic_files.write_text(out / "report.md", "\n".join([
        "# HetSpec calibration of this machine", "",
        f"Generated by `{command}`; do not edit. The platform it wrote: `{platform_path}`.", "", "```",
        *lines, "```", ""]))
    with atomic_files.atomic_path(out / "results.json") as temp:
        shutil.copyfile(raw_path(platform_path), temp)
    write_machine_json(out, command=command, started=started, calibration={"platform": str(platform_path)})
    print(f"wrote the run record {out}")


def _model_names(text: str) -> list[str]:
    """The names of ``--models`` (comma-separated), each resolved once (a preset, a GGUF file, a config.json or a
    model folder, ``demo:<preset>``), so that a bad one is one line before anything is measured."""
    from hwmodels.errors import HetSpecError
    from real.validation.profiler.profile_device import resolve_models

    names = [m.strip() for m in text.split(",") if m.strip()]
    if not names:
        raise HetSpecError(f"--models {text!r}: give at least one model (a preset, a .gguf file, a config.json or a "
                           "model folder, demo:tiny, demo:small)")
    for name in names:
        try:
            resolve_models([name])
        except HetSpecError as exc:
            raise HetSpecError(f"--models {name}: {exc}") from None
    return names


def _say(text: str) -> None:
    import sys

    print(text, file=sys.stderr, flush=True)


def _profile_device(args: argparse.Namespace) -> int:
    """``hetspec calibrate --device D``: the measured operator profile of a torch device and its platform; a CPU's
    full profile guarded against the cores slowed from outside."""
    from real.validation.profiler import profile_device

    names = _model_names(args.models) if args.models is not None else None
    parts = ["hetspec calibrate", f"--device {args.device}"] + ([f"--models {args.models}"] if args.models else []) + \
        ([f"--dtype {args.dtype}"] if args.dtype else []) + (["--quick"] if args.quick else [])
    guard = None
    if not args.quick and not args.device.strip().startswith("cuda"):
        from real.validation.calibration.cpu_profiles import cpu_profile_guard
        from real.validation.profiler.call_timing import parse_device

        parse_device(args.device)       # a bad name: one line, before the guard's probe
        guard = cpu_profile_guard(args.device)
    lines = profile_device.profile_and_write(args.device, names, args.dtype, args.quick, args.out,
                                             " ".join(parts), guard=guard)
    for line in lines:
        print(line)
    return 0


# ---------------------------------------------------------------------------- hetspec validate
def register_validate(subparsers) -> None:
    p = subparsers.add_parser(
        "validate", help="predict and measure the demo models' decode speed on this machine; write a report",
        description="Measure the acceptance profile on calibration prompts, predict step latency and tokens/s "
                    "of a grid (ar; chain gamma 1-8; draft-tree budgets; medusa widths 1-64) with the simulator "
                    "on the calibrated host platform, run the same grid for real on held-out evaluation prompts, "
                    "every configuration in short A/B blocks with ar, and judge the predicted speedups over ar "
                    "against the paired measurements; write report.md, PNG plots and results.json.")
    p.add_argument("--quick", action="store_true",
                   help="fewer prompts, tokens and repeats (the acceptance run of docs/validation.md; minutes)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="output folder (default: $HETSPEC_REPORTS_DIR/validation, else "
                        "~/.local/share/hetspec/reports/validation; a committed run record is written only by "
                        "--out reports/runs/<date>-<machine>-<what>)")
    add_preset_flags(p)
    p.add_argument("--platform", default="host", help="calibrated platform name or .toml file (default host)")
    add_device_flags(p)
    p.add_argument("--hetero", action="store_true",
                   help="add the heterogeneous section: hcmp ratio sweep with its regret, dovetail "
                        "placements, alspec hit rates, weight streaming")
    p.add_argument("--hetero-only", action="store_true",
                   help="run only the heterogeneous section (writes hetero.md, hetero.json and its plots)")
    p.add_argument("--alspec-agreement", type=float, default=None, metavar="F",
                   help="heterogeneous section: the best alspec (S, lambda) keeps at least this share of the exact "
                        "greedy tokens (default 0.99)")
    p.add_argument("--repeats", type=int, default=None, metavar="N",
                   help="exactly N A/B blocks with ar per configuration (default: at least 3, further rounds while "
                        "the paired band is wider than half the speedup target and the run's time budget lasts)")
    p.add_argument("--json", action="store_true",
                   help="print the verdict (per pricing and method: speedup error, regret, best configs, absolute "
                        "errors, whether the noise band lets them be judged) as JSON")
    p.set_defaults(func=handle_validate)


def add_device_flags(p) -> None:
    """``--device`` (a host CPU device or a GPU), ``--dtype`` and ``--graphs`` of validate and demo."""
    p.add_argument("--device", default=None, metavar="D",
                   help="where the grid decodes: cpu (all threads), a single-thread worker cpu0, cpu1, ... (steadier "
                        "on a machine shared with other jobs), or a GPU cuda / cuda:N priced on the platform "
                        "`hetspec calibrate --device cuda:N` writes (default cuda:0 where CUDA exists, else cpu)")
    p.add_argument("--dtype", default=None, choices=("fp32", "fp16", "bf16"),
                   help="with a CUDA --device: weights and activations (default: the dtype of the GPU's operator "
                        "profile, else fp32)")
    p.add_argument("--graphs", default="auto", choices=("auto", "on", "off"),
                   help="with a CUDA --device: replay the steps as CUDA graphs (auto: on)")


def _device_parts(args) -> list[str]:
    return ([f"--device {args.device}"] if args.device not in (None, "cpu") else []) + \
        ([f"--dtype {args.dtype}"] if args.dtype else []) + ([f"--graphs {args.graphs}"] if args.graphs != "auto" else [])


def remove_stale_outputs(out: Path, names) -> list[str]:
    """Delete the files ``names`` an earlier run left in ``out`` that this one did not write (the
    heterogeneous section's without ``--hetero``, the random-weight plot without random-weight rows), so the
    folder never mixes two runs; returns the names removed."""
    removed = []
    for name in names:
        if (Path(out) / name).is_file():
            (Path(out) / name).unlink()
            removed.append(name)
    return removed


def handle_validate(args: argparse.Namespace) -> int:
    from hwmodels.errors import HetSpecError

    if args.preset is not None:
        from real.train.demo import get_recipe

        get_recipe(args.preset)          # an unknown preset: one line naming the valid ones
    repeats = args.repeats
    if repeats is not None and repeats < 1:
        raise HetSpecError(f"--repeats must be at least 1, got {repeats}")
    from real.validation.gpu_target import check_placement

    check_placement(args.device, args.dtype, args.graphs)   # a GPU this machine lacks: one line, before anything
    from real.validation.validate import default_out, validate

    floor = getattr(args, "alspec_agreement", None)
    if floor is not None:
        check_float(floor, "--alspec-agreement", 0, 1)
    if floor is not None and not (args.hetero or args.hetero_only):
        raise HetSpecError("--alspec-agreement goes with --hetero or --hetero-only")
    if args.hetero_only and (args.device is not None or args.dtype is not None or args.graphs != "auto"):
        raise HetSpecError("--hetero-only runs on its worker pair (cuda:0 + cpu where CUDA exists, else two "
                           "cores); --device, --dtype and --graphs apply to the grid")
    out = args.out or str(default_out("validation"))
    resolve_preset(args, announce=False)   # validate() says which preset and why: after every flag is checked
    if args.hetero_only:
        return _hetero_only(args, out)
    parts = ["hetspec validate"] + (["--quick"] if args.quick else []) + (["--hetero"] if args.hetero else []) + \
        ([f"--preset {args.preset}"] if args.preset else []) + \
        ([f"--platform {args.platform}"] if args.platform != "host" else []) + _device_parts(args) + [f"--out {out}"]
    from real.validation.validate import settings_for as grid_settings

    settings = None
    if floor is not None:
        parts.insert(-1, f"--alspec-agreement {floor:g}")
    if repeats is not None:
        settings = grid_settings(args.quick, args.preset).with_repeats(repeats)
        parts.insert(-1, f"--repeats {repeats}")
    section, stale = _hetero_section(args, repeats, floor)
    doc = validate(out, preset=args.preset, quick=args.quick, device=args.device, platform=args.platform,
                   progress=True, command=" ".join(parts), settings=settings, dtype=args.dtype,
                   graphs=args.graphs, section=section)
    removed = remove_stale_outputs(out, stale + ([] if doc["random_weight"] else ["random_weight_timing.png"]))
    if removed:
        _say(f"removed {', '.join(removed)} from {out}: an earlier run's, not this one's")
    check = acceptance_check(doc)
    if doc.get("hetero"):
        check["hcmp_ratio_regret"] = doc["hetero"]["hcmp"]["regret"]
        check["hetero"] = doc["hetero"].get("summary")
    check["report"] = f"{out}/report.md"
    if args.json:
        print(json.dumps(check, indent=2))
        return 0
    print(f"\nreport: {out}/report.md (plots and results.json next to it)")
    from real.validation.verdict import verdict_lines

    for line in verdict_lines(doc["verdicts"]):
        print(line)
    return 0


def acceptance_check(doc: dict) -> dict:
    """The ``--json`` answer: per pricing and speculative method, the paired figures and the absolute ones, and
    the run's headline."""
    from real.validation.verdict import headline

    out = {"preset": doc["preset"], "device": doc["platform"]["device"], "command": doc["command"],
           "record": doc["record"], "pricings": {}}
    for v in doc["verdicts"]:
        methods = {}
        for m in v["methods"]:
            if m["method"] == "ar":
                continue
            methods[m["method"]] = {
                "median_speedup_error": _round(m["median_speedup_error"]), "regret": _round(m["regret"]),
                "predicted_best": m["predicted_best"], "measured_best": m["measured_best"],
                "median_step_error": _round(m["median_step_error"]),
                "median_tokens_per_s_error": _round(m["median_tokens_per_s_error"]),
                "meets_paired": m["meets_paired"], "meets_absolute": m["meets_absolute"]}
        out["pricings"][v["pricing"]] = {"methods": methods, "noise_band": _round(v["noise_band"]),
                                         "absolute_judged": v["absolute"]["judged"],
                                         "paired_judged": v["paired"]["judged"], "headline": headline(v)}
    return out


def _round(x: float) -> float | None:
    return round(x, 4) if x is not None and math.isfinite(x) else None


def _hetero_section(args, repeats, floor):
    """The heterogeneous section of ``--hetero`` as the validation's further section, and the files of the
    section an earlier run may have left (none with ``--hetero``)."""
    from real.validation.hetero.report import PLOTS as HETERO_PLOTS
    from real.validation.hetero.setup import JSON_FILE, MARKDOWN_FILE

    if not args.hetero:
        return None, [MARKDOWN_FILE, JSON_FILE, *HETERO_PLOTS.values()]
    from dataclasses import replace

    from real.validation.hetero.report import markdown
    from real.validation.hetero.section import validate_hetero
    from real.validation.hetero.setup import settings_for, with_repeats

    settings = with_repeats(settings_for(args.quick), repeats)
    if floor is not None:
        settings = replace(settings, alspec_agreement=floor)

    def section(models, host, ctx, out):
        doc = validate_hetero(models, host, ctx, out, settings, True)
        return doc, markdown(doc)

    section.settings = settings          # what the section runs with, for whoever asks
    return section, []


def _hetero_only(args: argparse.Namespace, out: str) -> int:
    """``--hetero-only``: the heterogeneous section on its own."""
    from real.validation.hetero.section import MARKDOWN_FILE, validate_hetero_only

    floor = getattr(args, "alspec_agreement", None)
    parts = ["hetspec validate --hetero-only"] + (["--quick"] if args.quick else []) + \
        ([f"--preset {args.preset}"] if args.preset else []) + \
        ([f"--platform {args.platform}"] if args.platform != "host" else []) + \
        ([f"--alspec-agreement {floor:g}"] if floor is not None else []) + \
        ([f"--repeats {args.repeats}"] if args.repeats is not None else []) + [f"--out {out}"]
    doc = validate_hetero_only(out, preset=args.preset, quick=args.quick, platform=args.platform, progress=True,
                               command=" ".join(parts), alspec_agreement=floor, repeats=args.repeats)
    h, d = doc["hcmp"], doc["dovetail"]
    methods = (doc.get("summary") or {}).get("methods", {})
    summary = {"report": f"{out}/{MARKDOWN_FILE}", "hcmp_regret": h["regret"],
               "hcmp_predicted_best_ratio": h["predicted_best_ratio"], "hcmp_measured_best_ratio": h["measured_best_ratio"],
               "dovetail_regret": d.get("regret"), "dovetail_predicted_best": d.get("predicted_best"),
               "dovetail_measured_best": d.get("measured_best"), "methods": methods}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"\nreport: {summary['report']} (plots and hetero.json next to it)")
    for method, m in methods.items():
        print(f"  {method:<10} step error {_pct(m['median_step_error'])}, tokens/s error "
              f"{_pct(m['median_tokens_per_s_error'])}, largest {_pct(m['max_error'])}, regret {_pct(m['regret'])} "
              f"(predicted best {m['predicted_best']}, measured best {m['measured_best']})"
              f"{'' if m['meets_targets'] else '  <- misses the target'}")
    if not methods:
        print(f"  hcmp      predicted best r={h['predicted_best_ratio']}, measured best r={h['measured_best_ratio']}, "
              f"regret {_pct(h['regret'])}")
    return 0


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


# ---------------------------------------------------------------------------- hetspec demo
def register_demo(subparsers) -> None:
    p = subparsers.add_parser(
        "demo", help="the whole job on the demo models: train, calibrate, predict, validate",
        description="Train the demo models if they are not cached (tiny unless small is cached or asked for), "
                    "calibrate this machine (reusing a fresh host platform), predict the best configuration of "
                    "every decode method on it, validate the predictions with quick paired runs (every "
                    "configuration in A/B blocks with ar), and print every method's best configuration and the "
                    "verdict. Exits 0 whenever the pipeline ran, however noisy the machine: the verdict's "
                    "headline says how far the noise let it judge.")
    add_preset_flags(p, smollm2=False)
    p.add_argument("--recalibrate", action="store_true", help="measure the host again even if host.toml is fresh")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="folder of the validation report (default: $HETSPEC_REPORTS_DIR/demo, else "
                        "~/.local/share/hetspec/reports/demo)")
    add_device_flags(p)
    p.set_defaults(func=handle_demo)


def handle_demo(args: argparse.Namespace) -> int:
    from hwmodels.errors import HetSpecError

    if args.preset is not None and args.preset not in ("tiny", "small"):
        raise HetSpecError(f"unknown demo preset {args.preset!r}; valid: small, tiny")
    from real.validation.gpu_target import check_placement

    check_placement(args.device, args.dtype, args.graphs)   # a GPU this machine lacks: one line, before anything
    from real.validation.demo_job import run_demo

    resolve_preset(args, announce=False)   # run_demo() says which preset and why
    run_demo(preset=args.preset, recalibrate=args.recalibrate, out=args.out, device=args.device,
             dtype=args.dtype, graphs=args.graphs)
    return 0
