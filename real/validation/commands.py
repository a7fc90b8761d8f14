"""The commands that set the simulator against this machine: ``hetspec calibrate``, ``hetspec validate``
and ``hetspec demo``."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from hwmodels.errors import EXIT_UNTRUSTED
from real.train.commands import add_preset_flags, resolve_preset
from real.validation.trust import PROBE_PEAK_LIMIT


def register(subparsers) -> None:
    register_calibrate(subparsers)
    register_validate(subparsers)
    register_demo(subparsers)


# ---------------------------------------------------------------------------- hetspec calibrate
def register_calibrate(subparsers) -> None:
    p = subparsers.add_parser(
        "calibrate", help="measure this machine (torch micro-benchmarks) and write the host platform",
        description="Measure this machine with torch micro-benchmarks: GEMM FLOP/s against the token count "
                    "(weights in the cache and streamed from DRAM), stream bandwidth beyond and inside the "
                    "last-level cache, the real path's fixed cost per operator, 1 thread vs all threads, and "
                    "two workers streaming at once. Writes a platform file (every number with the measurement "
                    "as its source) so that --platform host works afterwards, and the CPU's operator profile "
                    "beside it (profiled-cpu, as --device cpu writes it), which hetspec validate prices the "
                    "grid with next to the roofline; without --quick also the profile of the single-thread "
                    "worker on the first core (profiled-cpu0 on most machines, as --device cpu0 writes it), "
                    "which hetspec validate --device cpu0 prices with.")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="platform file to write (default: host.toml in $HETSPEC_PLATFORMS_DIR or the user "
                        "platform folder)")
    p.add_argument("--quick", action="store_true", help="fewer sizes and repeats, and only the all-thread CPU's operator profile (the full run: "
                        "about 2 minutes of micro-benchmarks, then the guarded operator profiles of cpu and of the "
                        "first core's worker, 7-13 minutes each on a 2-core machine, longer while other work slows it)")
    p.add_argument("--force", action="store_true",
                   help="write the calibration even if the machine changed under it or slowed it throughout (its "
                        f"reference probe below {100 * PROBE_PEAK_LIMIT:.0f} %% of the GEMM peak measured; the warning "
                        "goes into the platform's descriptions and the raw measurements), and measure the guarded "
                        "operator profiles through cores that stay slowed from outside; without it such a "
                        "calibration is refused, and a profile stopped after 15 minutes of slowdown (unbroken, or "
                        "broken only by a moment's quiet: 90 %% of them), with exit status 3")
    p.add_argument("--attempts", type=int, default=None, metavar="N",
                   help="measure the host up to N times while the machine changes under the measurement (default 3; "
                        "not with --device or --check)")
    p.add_argument("--device", default=None, metavar="D",
                   help="profile the operators of a torch device (cpu, cuda, cuda:N; cpuN: the single-thread "
                        "worker pinned to core N) instead: writes a measured operator profile (CSV) and a platform "
                        "whose device is priced by it (TOML); a CPU's rows, without --quick, retaken while a probe "
                        "reads the cores slowed from outside")
    p.add_argument("--models", default=None, metavar="M1,M2",
                   help="with --device: the models whose operator shapes the profile covers (presets, config.json "
                        "paths, demo:tiny, demo:small; default: the demo models, plus llama2-7b on CUDA)")
    p.add_argument("--dtype", default=None, choices=("fp32", "fp16", "bf16"),
                   help="with --device: the dtype profiled (default fp32 on a CPU, fp16 on CUDA)")
    p.add_argument("--check", nargs="?", type=float, const=60.0, default=None, metavar="SECONDS",
                   help="write nothing: read the contention guard's probe for SECONDS (default 60) and say whether "
                        "the cores are quiet enough to calibrate now, against the last calibration's reference "
                        "probe (all torch threads; with --device cpuN, one thread); exit status 3 when slowed")
    p.set_defaults(func=handle_calibrate)


def handle_calibrate(args: argparse.Namespace) -> int:
    from hwmodels.errors import HetSpecError

    if args.check is not None:
        return _check_quiet(args)
    if args.out is not None and not args.out.endswith(".toml"):
        raise HetSpecError(f"--out {args.out}: a platform file ends in .toml")
    from hwmodels.datafile import output_path

    if args.out is not None:   # a file that cannot be written fails now, not after the measurement
        output_path(args.out, "platform file")
    if args.device is not None:
        if args.attempts is not None:
            raise HetSpecError("--attempts goes with the host calibration (without --device): a profile's rows are "
                               "retaken one by one instead")
        return _profile_device(args)
    if args.models is not None or args.dtype is not None:
        raise HetSpecError("--models and --dtype go with --device (the operator profile of a torch device)")
    from real.validation.calibration.calibrate import ATTEMPTS, calibrate, summary_lines
    from real.validation.calibration.host_facts import raw_path

    platform, path, cal = calibrate(args.out, quick=args.quick, progress=True, force=args.force,
                                    attempts=ATTEMPTS if args.attempts is None else args.attempts)
    for line in summary_lines(platform, cal):
        print(line)
    print(f"wrote {path} (measurements: {raw_path(path)})")
    # the CPU's operator profile beside it, which `hetspec validate` prices the grid with next to the roofline
    from real.validation.calibration.cpu_profiles import profile_cpu_beside

    with _force_hint(f"{path} written, an operator profile beside it stopped"):
        lines = profile_cpu_beside(path, args.quick, one_thread=not args.quick, force=args.force)
    for line in lines:
        print(line)
    return 0


@contextlib.contextmanager
def _hinted(kind: type, say):
    """A refusal of ``kind`` re-raised as the same one line, reworded by ``say(exc)`` to tell what the command
    can do about it (what it wrote, that --force goes through it)."""
    try:
        yield
    except kind as exc:
        raise kind(say(exc)) from None


def _force_hint(what: str):
    """A guarded profile the cores stayed too slow for: its one line says what was written and that --force
    measures through it."""
    from real.run.contention import ContendedTooLong

    return _hinted(ContendedTooLong, lambda exc: f"{what}: {exc}, or pass --force to measure through it")


def _profile_device(args: argparse.Namespace) -> int:
    """``hetspec calibrate --device D``: the measured operator profile of a torch device and its platform; a CPU's
    full profile guarded against the cores slowed from outside, as the full calibration's are."""
    from real.validation.profiler import profile_device

    names = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else None
    parts = ["hetspec calibrate", f"--device {args.device}"] + ([f"--models {args.models}"] if args.models else []) + \
        ([f"--dtype {args.dtype}"] if args.dtype else []) + (["--quick"] if args.quick else [])
    guard = None
    if not args.quick and not args.device.strip().startswith("cuda"):
        from real.validation.profiler.call_timing import parse_device
        from real.validation.calibration.cpu_profiles import cpu_profile_guard

        parse_device(args.device)       # a bad name: one line, before the guard's probe
        guard = cpu_profile_guard(args.device, _calibrated_host(), args.force)
    with _force_hint("operator profile stopped, nothing written"):
        lines = profile_device.profile_and_write(args.device, names, args.dtype, args.quick, args.out,
                                                 " ".join(parts), guard=guard)
    for line in lines:
        print(line)
    return 0


def _check_quiet(args: argparse.Namespace) -> int:
    """``hetspec calibrate --check``: the guard probe's readings against the last calibration's, and a verdict."""
    import torch
    from tqdm.auto import tqdm

    from hwmodels.errors import HetSpecError, UntrustedMeasurement
    from real.validation.profiler.call_timing import cpu_worker
    from real.validation.quiet_check import calibrated_reference, check_quiet, readings_in

    extra = [flag for flag, value in (("--out", args.out), ("--quick", args.quick), ("--models", args.models),
                                      ("--dtype", args.dtype), ("--force", args.force),
                                      ("--attempts", args.attempts is not None)) if value]
    if extra:
        raise HetSpecError(f"--check writes nothing and measures no profile: drop {', '.join(extra)}")
    if not args.check > 0:
        raise HetSpecError(f"--check {args.check:g}: a check lasts a positive number of seconds")
    device = (args.device or "cpu").strip()
    if device != "cpu" and cpu_worker(device) is None:     # a core this process may not use: its one line
        raise HetSpecError(f"--check reads the host CPU's cores (--device cpu or cpuN), not {device}")
    threads = 1 if device != "cpu" else torch.get_num_threads()
    reference, note = calibrated_reference(_calibrated_host(), threads)
    pause_s = 2.0
    with tqdm(total=readings_in(args.check, pause_s), desc="guard probe", unit="reading", file=sys.stderr) as bar:
        def shown(gflops: float) -> None:
            bar.set_postfix_str(f"{gflops:.1f} GFLOP/s")
            bar.update(1)
        check = check_quiet(args.check, threads, reference, pause_s=pause_s, on_reading=shown, note=note)
    for line in check.lines():
        print(line)
    if not check.quiet:
        raise UntrustedMeasurement(check.refusal())
    return 0


def _calibrated_host():
    """The calibrated ``host`` platform where ``hetspec calibrate`` has written one, else None."""
    from hwmodels.errors import HetSpecError
    from hwmodels.loader import load_platform_file
    from real.validation.calibration.calibrate import default_out

    path = default_out()
    try:
        return load_platform_file(path) if path.exists() else None
    except HetSpecError:      # unreadable: the guard times its reference now
        return None


# ---------------------------------------------------------------------------- hetspec validate
def register_validate(subparsers) -> None:
    from real.validation.trust import BEFORE_GRID_PAUSE_S, BEFORE_GRID_READINGS, CALIBRATION_CHANGE_LIMIT

    p = subparsers.add_parser(
        "validate", help="predict and measure the demo models' decode speed on this machine; write a report",
        description="Measure the acceptance profile on calibration prompts, predict step latency and tokens/s "
                    "of a grid (ar; chain gamma 1-8; draft-tree budgets; medusa widths 1-64) with the simulator "
                    "on the calibrated host platform, run the same grid for real on held-out evaluation prompts, "
                    "time random-weight Llama-shaped models, and write report.md, PNG plots and results.json.")
    p.add_argument("--quick", action="store_true",
                   help="fewer prompts, tokens and repeats (the acceptance run of docs/validation.md; minutes)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="output folder (default: $HETSPEC_REPORTS_DIR/validation, else "
                        "~/.local/share/hetspec/reports/validation; the repository's committed report is "
                        "regenerated only by --out reports/validation)")
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
                   help="interleaved repeats of every timing, each in a process of its own on a CPU (default 3); "
                        "more repeats average more of the machine's slow stretches (docs/validation.md)")
    p.add_argument("--force", action="store_true",
                   help="run the grid even when the reference probe before it reads the machine changed since the "
                        f"calibration (beyond {100 * CALIBRATION_CHANGE_LIMIT:.0f} %% on fixed cost per operator, DRAM "
                        f"triad or GEMM rate, in each of {BEFORE_GRID_READINGS} readings {BEFORE_GRID_PAUSE_S:.0f} s "
                        "apart; the report then says it is not a validation); without it such a run stops there with "
                        "exit status 3, having written nothing")
    p.add_argument("--json", action="store_true",
                   help="print the acceptance check (per method: median errors, best configs, regret) as JSON")
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


def handle_validate(args: argparse.Namespace) -> int:
    from hwmodels.errors import HetSpecError

    if args.preset is not None and args.preset not in ("tiny", "small"):
        raise HetSpecError(f"unknown demo preset {args.preset!r}; valid: small, tiny")
    repeats = args.repeats
    if repeats is not None and repeats < 1:
        raise HetSpecError(f"--repeats must be at least 1, got {repeats}")
    from real.validation.gpu_target import check_placement

    check_placement(args.device, args.dtype, args.graphs)   # a GPU this machine lacks: one line, before anything
    from real.validation.validate import acceptance_check, default_out, validate

    out = args.out or str(default_out("validation"))
    resolve_preset(args, announce=False)   # validate() says which preset and why
    floor = getattr(args, "alspec_agreement", None)
    if floor is not None and not 0.0 <= floor <= 1.0:
        raise HetSpecError(f"--alspec-agreement must be in [0, 1], got {floor}")
    if floor is not None and not (args.hetero or args.hetero_only):
        raise HetSpecError("--alspec-agreement goes with --hetero or --hetero-only")
    if args.hetero_only:
        if args.device is not None or args.dtype is not None or args.graphs != "auto" or args.force:
            raise HetSpecError("--hetero-only runs on its worker pair (cuda:0 + cpu where CUDA exists, else two "
                               "cores); --device, --dtype, --graphs and --force apply to the grid")
        return _hetero_only(args, out)
    parts = ["hetspec validate"] + (["--quick"] if args.quick else []) + (["--hetero"] if args.hetero else []) + \
        ([f"--preset {args.preset}"] if args.preset else []) + \
        ([f"--platform {args.platform}"] if args.platform != "host" else []) + _device_parts(args) + [f"--out {out}"]
    from dataclasses import replace

    from real.validation.hetero.setup import settings_for, with_repeats
    from real.validation.validate import settings_for as grid_settings

    hetero_settings = settings = None
    if floor is not None or repeats is not None:
        hetero_settings = with_repeats(settings_for(args.quick), repeats)
    if floor is not None:
        hetero_settings = replace(hetero_settings, alspec_agreement=floor)
        parts.insert(-1, f"--alspec-agreement {floor:g}")
    if repeats is not None:
        settings = replace(grid_settings(args.quick), repeats=repeats)
        parts.insert(-1, f"--repeats {repeats}")
    if args.force:
        parts.insert(-1, "--force")
    from real.validation.trust import ChangedBeforeGrid

    with _hinted(ChangedBeforeGrid, lambda exc: f"{exc}; or pass --force to run the grid anyway (its report then "
                                                "says it is not a validation)"):
        doc = validate(out, preset=args.preset, quick=args.quick, device=args.device, platform=args.platform,
                       progress=True, command=" ".join(parts), settings=settings, hetero=args.hetero, dtype=args.dtype,
                       graphs=args.graphs, hetero_settings=hetero_settings, force=args.force)
    check = acceptance_check(doc)
    if doc.get("hetero"):
        check["hcmp_ratio_regret"] = doc["hetero"]["hcmp"]["regret"]
        check["hetero"] = doc["hetero"].get("summary")
    check["report"] = f"{out}/report.md"
    if args.json:
        print(json.dumps(check, indent=2))
        return 0 if check["trusted"] else EXIT_UNTRUSTED
    print(f"\nreport: {out}/report.md (plots and results.json next to it)")
    if not check["trusted"]:
        print(f"  {check['headline']}")
        return EXIT_UNTRUSTED
    for method, m in check["methods"].items():
        print(f"  {method:<10} step error {_pct(m['median_step_error'])}, tokens/s error "
              f"{_pct(m['median_tokens_per_s_error'])}, regret {_pct(m['regret'])} "
              f"(predicted best {m['predicted_best']}, measured best {m['measured_best']})"
              f"{'' if m['passes'] else '  <- misses the target'}")
    return 0


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
                    "every decode method on it, validate the predictions with quick real runs, and print where "
                    "the report is.")
    add_preset_flags(p)
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
    done = run_demo(preset=args.preset, recalibrate=args.recalibrate, out=args.out, device=args.device,
                    dtype=args.dtype, graphs=args.graphs)
    return 0 if done["check"]["trusted"] else EXIT_UNTRUSTED
