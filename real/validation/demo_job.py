"""``hetspec demo``: the whole job on an embedded default, for a first-time user.

1. **Demo models**: the ``small`` preset if its models are cached, else ``tiny`` (trained in under
   a minute on two cores; ``small`` takes 15-30 minutes, so the demo does not start it unasked:
   ``--preset small`` asks on a terminal, ``--train`` trains without asking).
2. **Calibrate** this host (``hetspec calibrate``), unless a host platform younger than
   :data:`real.validation.calibration.host_facts.FRESH_DAYS` days already exists (``--recalibrate`` forces it);
   a calibration that finds the machine busy moves the demo to the single-thread worker (:func:`host_platform`).
3. **Predict** the best configuration of every decode method for the demo models on ``host``
   (the optimizer's full search, with the acceptance profile measured on calibration prompts).
4. **Validate** quickly (``hetspec validate --quick``: every configuration in A/B blocks with ``ar``) into
   the user's report folder (``$HETSPEC_REPORTS_DIR/demo``, default ``~/.local/share/hetspec/reports/demo``)
   or ``--out``, and print every method's best configuration and the paired verdict of both pricings.

Every stage is announced with a banner and shows a progress bar while it works. The demo always answers:
however noisy the machine, the verdict's headline says how far the noise let it judge; only bad input, a
broken cache or a crash end it otherwise.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hwmodels import atomic_files
from hwmodels.errors import HetSpecError
from real.train.demo import choose_preset

#: Methods the demo predicts (the ones the single-worker real path runs).
DEMO_METHODS = ("ar", "chain", "draft-tree", "medusa")
#: Distinct (width, depth) configurations per method kept in ``predictions.json``, fastest first, and every one
#: within :data:`NEAR_BEST` of the best (a draft tree's flat optimum ties hundreds): where another run's best ranks.
TOP_ROWS = 40


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def banner(step: int, total: int, text: str) -> None:
    say(f"\n=== [{step}/{total}] {text}")


def host_platform(recalibrate: bool, device: str | None, preset: str = "tiny"):
    """The ``host`` platform and the device the demo runs on: reused when fresh, else measured now inside the
    calibration's time budget, with the CPU's quick operator profile of the ``preset`` demo models' shapes
    beside it (the second pricing). ``device`` None (the default): ``cpu``, all threads, unless the calibration
    finds the machine busy (all threads measuring slower than one: a multi-threaded operator waits for the
    thread whose core another job holds); then the single-thread worker on the first core, which another job
    slows far less, and its profile instead."""
    from hwmodels.loader import get_platform
    from real.validation.calibration.budget import DEFAULT_BUDGET_S
    from real.validation.calibration.calibrate import (busy_warnings, calibrate, calibration_age_days, default_out,
                                                         summary_lines)
    from real.validation.calibration.cpu_profiles import first_worker, profile_cpu_beside
    from real.validation.calibration.host_facts import FRESH_DAYS

    path = default_out()
    age = calibration_age_days(path)
    if age is not None and age < FRESH_DAYS and not recalibrate:
        say(f"reusing {path} (calibrated {age:.1f} days ago; --recalibrate to measure again)")
        platform = get_platform(str(path))
        return platform, device or "cpu"
    why = ("no host platform yet" if age is None else f"{path} is {age:.0f} days old" if not recalibrate
           else "--recalibrate")
    say(f"{why}: measuring this machine: at most {DEFAULT_BUDGET_S:.0f} s of micro-benchmarks, then the CPU's "
        "quick operator profile (a progress bar each)")
    platform, path, cal = calibrate(path, progress=True)
    for line in summary_lines(platform, cal):
        say(line)
    say(f"wrote {path}")
    worker = first_worker(platform)
    busy = device is None and worker is not None and worker in platform.devices and bool(busy_warnings(cal, platform))
    if busy:
        say(f"the machine looks busy (all threads measured slower than one): the demo predicts and validates on "
            f"the single-thread worker {worker}, which another job slows far less (--device cpu insists on all "
            "threads)")
    for line in profile_cpu_beside(path, quick=True, models=[f"demo:{preset}"], one_thread=busy,
                                   all_threads=not busy):     # validate's second pricing
        say(line)
    device = worker if busy else device or "cpu"
    platform.device(device)
    return platform, device


def predict_best(models, platform, device: str, profile, context: int) -> list[dict]:
    """The optimizer's best configuration of every demo method on ``platform:device``."""
    from tqdm.auto import tqdm

    from sim.acceptance import from_profile
    from sim.optimizer import optimize
    from sim.strategies.base import Problem

    problem = Problem(model=models.target.spec, platform=platform, acceptance=from_profile(profile), context=context)
    draft = str(Path(models.folder) / "draft" / "config.json")
    spaces = {
        "ar": {"device": device},
        "chain": {"device": device, "draft_device": device, "draft_model": draft},
        "draft-tree": {"device": device, "draft_device": device, "draft_model": draft},
        "medusa": {"device": device, "medusa_heads": models.heads.n_heads, "medusa_heads_impl": "hetspec"},
    }
    rows = []
    for method in tqdm(DEMO_METHODS, desc="predict", unit="method", file=sys.stderr):
        try:
            result = optimize(problem, method, spaces[method])
        except HetSpecError as exc:
            rows.append({"method": method, "error": str(exc)})
            continue
        best = result.best
        ranked = result.table.sort_values("tokens_per_s", ascending=False).drop_duplicates(["tree_width", "draft_depth"])
        ranked = ranked.head(max(TOP_ROWS, int((ranked.tokens_per_s >= (1 - NEAR_BEST) * best["tokens_per_s"]).sum())))
        top = [{"tree_width": int(r.tree_width), "draft_depth": int(r.draft_depth),
                "tokens_per_s": float(r.tokens_per_s)} for r in ranked.itertuples()]
        rows.append({"method": method, "tree_width": int(best["tree_width"]), "draft_depth": int(best["draft_depth"]),
                     "tokens_per_step": float(best["tokens_per_step"]), "step_ms": 1e3 * float(best["step_s"]),
                     "tokens_per_s": float(best["tokens_per_s"]), "speedup_vs_ar": float(best["speedup_vs_ar"]),
                     "evaluated": len(result.table), "top": top})
    return rows


#: Configurations predicted within this share of a method's best are printed beside it: where the optimum is
#: flat, a recalibration may pick any of them.
NEAR_BEST = 0.02


def near_best(row: dict) -> str:
    """The widths and depths of ``row``'s kept configurations predicted within :data:`NEAR_BEST` of its best."""
    near = [r for r in row.get("top", ()) if r["tokens_per_s"] >= (1 - NEAR_BEST) * row["tokens_per_s"]]
    if len(near) < 2:
        return "-"

    def span(key: str) -> str:
        lo, hi = min(r[key] for r in near), max(r[key] for r in near)
        return f"{lo}" if lo == hi else f"{lo}-{hi}"

    return f"w {span('tree_width')}, d {span('draft_depth')}"


def prediction_table(rows: list[dict]) -> str:
    lines = [f"{'method':<11} {'width':>5} {'depth':>5} {'tok/step':>8} {'step ms':>8} {'tok/s':>8} {'vs ar':>6}  "
             f"within {100 * NEAR_BEST:.0f} % of it"]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['method']:<11} no prediction: {r['error']}")
            continue
        lines.append(f"{r['method']:<11} {r['tree_width']:>5} {r['draft_depth']:>5} {r['tokens_per_step']:>8.2f} "
                     f"{r['step_ms']:>8.3f} {r['tokens_per_s']:>8.0f} {r['speedup_vs_ar']:>5.2f}x  {near_best(r)}")
    return "\n".join(lines)


def gpu_platform(device: str, dtype: str | None, graphs: str):
    """The platform pricing GPU ``device`` (:func:`real.validation.gpu_target.validation_target`); when none
    exists yet, the GPU is profiled now (``hetspec calibrate --device D --quick``) into the user platform folder."""
    from hwmodels.loader import user_platform_dir
    from real.validation.gpu_target import profiled_platform_name, validation_target
    from real.validation.profiler.profile_device import (
        QUICK,
        default_models,
        profile_device,
        resolve_models,
        summary_lines,
        write_device_profile,
    )

    try:
        return validation_target("host", device, dtype, graphs)
    except HetSpecError as exc:
        if "has no device for it" not in str(exc):
            raise
    name = profiled_platform_name(device)
    say(f"no platform describes {device} yet: profiling it (hetspec calibrate --device {device} --quick)...")
    prof = profile_device(device, resolve_models(default_models(device)), QUICK, None, progress=True)
    csv_path, toml_path = write_device_profile(prof, user_platform_dir() / f"{name}.toml",
                                               f"hetspec calibrate --device {device} --quick")
    for line in summary_lines(prof, csv_path, toml_path):
        say(line)
    return validation_target("host", device, dtype, graphs)


def run_demo(preset: str | None = None, recalibrate: bool = False, out: str | Path | None = None,
             device: str | None = "cpu", validate_settings=None, dtype: str | None = None, graphs: str = "auto",
             grid=None) -> dict:
    """The whole demo; returns the predictions, the validation's run record and where its report is. ``out``: the
    report folder (default :func:`real.validation.validate.default_out` ``("demo")``, outside the repository).
    ``device``: as ``hetspec validate --device`` (None: ``cuda:0`` where CUDA exists, else ``cpu``); on a
    GPU the host is calibrated as always, and the predictions and the validation use the GPU's platform."""
    from real.run.acceptance import measure_profile
    from real.run.session import load_models
    from real.train.corpus import prompts as corpus_prompts
    from real.validation.gpu_target import default_device_name, is_cuda_name
    from real.validation.calibration.microbench import torch_threads
    from real.validation.validate import QUICK, default_out, validate
    from real.validation.verdict import verdict_lines

    out = Path(out) if out is not None else default_out("demo")
    total = 5
    preset, why = choose_preset(preset)
    banner(1, total, f"demo models: preset {preset} ({why})")
    models = load_models(preset, progress=True)
    say(f"target {models.target.spec.params / 1e6:.1f} M parameters, draft {models.draft.spec.params / 1e6:.2f} M, "
        f"{models.heads.n_heads} Medusa heads (cache: {models.folder})")

    banner(2, total, "calibrate this machine (hetspec calibrate)")
    run_device = default_device_name(device)                  # where the validation decodes
    gpu = is_cuda_name(run_device)
    platform, device = host_platform(recalibrate, None if device is None and not gpu else
                                     "cpu" if gpu else run_device, preset)   # the device the predictions use
    run_device = run_device if gpu else device
    threads = platform.device(device).cores
    if gpu:
        target = gpu_platform(run_device, dtype, graphs)
        platform, device = target.platform, target.device

    settings = validate_settings or QUICK
    banner(3, total, f"acceptance on {settings.calibration_prompts} calibration prompts")
    calib = [list(p) for p in corpus_prompts(models.tokenizer, "calibration", settings.calibration_prompts,
                                             settings.prompt_tokens, seed=0)]
    with torch_threads(threads):
        profile = measure_profile(models, calib, settings.max_new_tokens, name=f"demo-{preset}",
                                  source=f"measured by hetspec demo on {len(calib)} calibration prompts")
    say(f"draft per-token acceptance {profile.draft_alpha:.3f}; Medusa top-1 by head "
        + ", ".join(f"{row[0]:.2f}" for row in profile.medusa_accuracy))

    banner(4, total, f"predict the best configuration per method on {platform.name}:{device}")
    rows = predict_best(models, platform, device, profile, settings.prompt_tokens + settings.max_new_tokens // 2)
    print(prediction_table(rows))

    banner(5, total, "validate: predicted vs measured, every configuration in A/B blocks with ar")
    doc = validate(out, preset=preset, device=run_device, progress=True, settings=settings, dtype=dtype, graphs=graphs,
                   quick=True, kind="demo", grid=grid,
                   command=f"hetspec validate --quick --preset {preset} --out {out}"
                           + (f" --device {run_device}" if run_device != "cpu" else "")
                           + (f" --dtype {dtype}" if dtype else "") + (f" --graphs {graphs}" if graphs != "auto" else ""))
    atomic_files.write_text(Path(out) / "predictions.json", json.dumps(rows, indent=1) + "\n")
    print(f"\nreport: {Path(out) / 'report.md'} (plots, results.json and predictions.json next to it)")
    print("\nbest configuration per method, predicted / measured (paired speedup over ar):")
    for m in doc["verdicts"][0]["methods"]:
        if m["method"] != "ar":
            print(f"  {m['method']:<11} predicted best {m['predicted_best']} ({m['predicted_best_speedup']:.2f}x "
                  f"predicted), measured best {m['measured_best']} ({m['measured_best_speedup']:.2f}x measured)")
    for line in verdict_lines(doc["verdicts"]):
        print(line)
    return {"preset": preset, "predictions": rows, "record": doc["record"], "report": str(Path(out) / "report.md")}
