"""``hetspec validate``: predict the demo models' decode speed on the calibrated host, measure it, compare.

Stages (each announced, each with a progress bar):

1. the ``host`` platform written by ``hetspec calibrate`` (a device of it: ``cpu`` = all torch
   threads, or one single-thread worker ``cpuN``; or a GPU, :mod:`real.validation.gpu_target`);
2. the demo models of a preset (trained first if not cached);
3. the acceptance profile, measured on **calibration** prompts (:mod:`real.run.acceptance`);
4. predictions of the grid (:mod:`real.validation.grid`) by the simulator's closed form
   (:mod:`real.validation.predict`), priced from the calibration alone, by the roofline and, where the
   CPU's operator profile exists, by it too (:mod:`real.validation.backends`);
5. real runs of the same grid on held-out **evaluation** prompts, each configuration in A/B blocks with
   ``ar`` (:mod:`real.validation.measure`); then, per method whose predicted best is not its measured best, the
   two head to head (:func:`real.validation.verdict.contests`);
6. one forward step of random-weight Llama-shaped models, for several token counts, predicted vs measured
   (:mod:`real.model.random_models`), where the settings ask for them;

then ``results.json`` (with its ``record``), the PNG plots and ``report.md`` in the output folder. The
verdict is on the paired speedups over ``ar`` (:mod:`real.validation.verdict`).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from hwmodels import atomic_files
from hwmodels.errors import HetSpecError
from hwmodels.loader import write_platform_file
from real.train.demo import choose_preset
from real.validation.backends import profiled_variant
from real.validation.gpu_target import validation_target
from real.validation.trust import shown_path

#: Where user runs write their reports unless ``--out`` says otherwise: ``$HETSPEC_REPORTS_DIR``,
#: else ``platformdirs.user_data_dir("hetspec")/reports`` (``~/.local/share/hetspec/reports`` on
#: Linux). A committed run record (``reports/runs/``) is written only by an ``--out`` that names it.
REPORTS_DIR_ENV = "HETSPEC_REPORTS_DIR"
#: The platform that priced a run, every number with its source, beside its report.
PRICED_PLATFORM = "platform.toml"


def default_out(kind: str = "validation") -> Path:
    """The default report folder of ``hetspec validate`` (``kind`` "validation") or ``hetspec demo`` ("demo")."""
    import os

    from platformdirs import user_data_dir

    root = os.environ.get(REPORTS_DIR_ENV)
    return (Path(root) if root else Path(user_data_dir("hetspec")) / "reports") / kind


@dataclass(frozen=True)
class Settings:
    """How much validation decodes and times."""

    calibration_prompts: int     # calibration prompts the acceptance profile is measured on
    eval_prompts: int            # evaluation prompts every A/B block decodes
    prompt_tokens: int
    max_new_tokens: int
    repeats: int                 # A/B blocks per configuration, at least
    random_models: tuple[str, ...]
    random_tokens: tuple[int, ...]
    random_repeats: int
    random_context: int
    label: str = "full"
    most_repeats: int | None = None         # A/B blocks at most (None: ``repeats``)
    measure_budget_s: float | None = None   # seconds of A/B blocks after which no further round starts
    settled_band: float = 0.0               # a paired band this narrow needs no further round

    def stopping(self, share: float = 1.0):
        """When the A/B blocks stop (:class:`real.validation.measure.Stopping`), within ``share`` of the budget."""
        from real.validation.measure import Stopping

        budget = self.measure_budget_s * share if self.measure_budget_s is not None else None
        return Stopping(self.repeats, self.most_repeats or self.repeats, budget, self.settled_band)

    def with_repeats(self, repeats: int) -> Settings:
        """Exactly ``repeats`` A/B blocks per configuration (``--repeats``)."""
        return replace(self, repeats=repeats, most_repeats=repeats, measure_budget_s=None)


#: The share of the A/B blocks' budget a method's head-to-head pairing may take (three: at most half of it).
HEAD_TO_HEAD_SHARE = 1 / 6

#: Quick: the demo's validation, in a few minutes on 2 cores with the tiny preset. Full: more prompts,
#: tokens and blocks, every token count of the random models. Tokens per step vary from prompt to prompt
#: (sd 0.76 of 3.55 for Medusa's 16-token tree on 12 evaluation prompts of the small demo models), so the
#: prompt samples bound how close a prediction can come: 12 prompts carry a standard error of 6 %, 48 under 3 %.
#: The A/B blocks go on past the third while the paired band is wider than half the speedup target and time
#: is left: a round of the quick grid (one block of each of its 18 configurations) took about 15 s on the
#: tiny models on 2 cores, so the quick budget fits about ten rounds on a quiet machine, fewer on a busy one.
QUICK = Settings(calibration_prompts=48, eval_prompts=6, prompt_tokens=64, max_new_tokens=64, repeats=3,
                 random_models=(), random_tokens=(1, 4, 16, 64), random_repeats=3, random_context=128,
                 label="quick", most_repeats=12, measure_budget_s=150.0, settled_band=0.05)
#: Full fits 25 minutes on 2 cores with the small preset (an ``ar`` step of about 10 ms there): an A/B block of
#: 48 prompts x 96 tokens took 96-106 s, so 57 blocks of the whole grid ran 95 minutes, and the acceptance
#: profile on 96 prompts of 96 tokens 7 minutes. It decodes 64 calibration prompts and 12 evaluation prompts of
#: 64 tokens over the thinner grid of :data:`real.validation.grid.FULL_VALUES` (blocks of about 17 s).
FULL = Settings(calibration_prompts=64, eval_prompts=12, prompt_tokens=64, max_new_tokens=64, repeats=3,
                random_models=("random-smollm-135m", "random-smollm-360m"), random_tokens=(1, 2, 4, 8, 16, 32, 64),
                random_repeats=5, random_context=256, label="full", most_repeats=4, measure_budget_s=780.0,
                settled_band=0.025)


#: Quick on a pretrained target (``smollm2``: an fp32 ar step of 85-90 ms on a 2-core EPYC against ~1 ms for
#: tiny): a quarter of the calibration prompts and half the evaluation prompts, with the thinner grid of
#: :data:`real.validation.grid.PRETRAINED_QUICK_VALUES`; about half an hour on two cores.
QUICK_PRETRAINED = replace(QUICK, calibration_prompts=12, eval_prompts=3, label="quick")


def _quick_on_pretrained(quick: bool, preset: str | None) -> bool:
    from real.train.demo import get_recipe

    return quick and preset is not None and get_recipe(preset).pretrained


def settings_for(quick: bool, preset: str | None = None) -> Settings:
    if _quick_on_pretrained(quick, preset):
        return QUICK_PRETRAINED
    return QUICK if quick else FULL


def grid_for(quick: bool, preset: str | None = None):
    """The grid a run validates: the whole grid in a quick run, thinner in a full one and in a quick run on a
    pretrained target."""
    from real.validation.grid import FULL_VALUES, PRETRAINED_QUICK_VALUES, default_grid

    if not quick:
        return default_grid(values=FULL_VALUES)
    return default_grid(values=PRETRAINED_QUICK_VALUES if _quick_on_pretrained(quick, preset) else None)


def banner(text: str, progress: bool = True) -> None:
    if progress:
        print(f"\n== {text}", file=sys.stderr, flush=True)


def _priced(pred, meas) -> dict:
    """A pricing of a measured point: its predictions, the measurements and the errors (a row holds the
    roofline's at its top level and the profiled backend's under ``profiled``)."""
    from real.validation.metrics import signed_error

    return {"pred_step_ms": pred.step_s * 1e3, "pred_tokens_per_s": pred.tokens_per_s,
            "pred_tokens_per_step": pred.tokens_per_step, "meas_step_ms": meas.step_s * 1e3,
            "meas_tokens_per_s": meas.tokens_per_s, "meas_tokens_per_step": meas.tokens_per_step,
            "step_error_signed": signed_error(pred.step_s, meas.step_s),
            "tps_error_signed": signed_error(pred.tokens_per_s, meas.tokens_per_s),
            "pred_breakdown_ms": {k: v * 1e3 for k, v in pred.breakdown.items()}, "missing": pred.missing}


def _row(point, pred, meas) -> dict:
    return {
        "method": point.method, "knob": point.knob, "value": point.value, "label": point.label,
        **_priced(pred, meas),
        "meas_step_ms_min": min(meas.step_samples) * 1e3, "meas_step_ms_max": max(meas.step_samples) * 1e3,
        "meas_tokens_per_s_min": min(meas.tps_samples), "meas_tokens_per_s_max": max(meas.tps_samples),
        "pred_tokens_per_step_independent": pred.tokens_per_step_independent,
        "meas_phase_ms": meas.phase_ms, "meas_draft_passes_per_step": meas.draft_passes_per_step,
        "meas_verified_per_step": meas.verified_per_step, "pred_verified_per_step": pred.verified_per_step,
        "pred_draft_passes_per_step": pred.draft_passes_per_step,
        "meas_step_ms_samples": [s * 1e3 for s in meas.step_samples],
        "pairs": {k: [[round(x, 7) for x in block] for block in v] for k, v in meas.pairs.items()},
    }


def point_rows(points, preds, meas, preds_profiled=None) -> list[dict]:
    """One row per grid point; with ``preds_profiled``, the profiled backend's pricing under ``profiled``."""
    rows = [_row(p, pr, m) for p, pr, m in zip(points, preds, meas)]
    if preds_profiled is not None:
        for row, pr, m in zip(rows, preds_profiled, meas):
            row["profiled"] = _priced(pr, m)
    return rows


def verdicts_of(rows: list[dict], quick: bool, settled: dict | None = None) -> list[dict]:
    """The paired verdict of each pricing the rows carry (roofline; profiled where priced), ``settled`` per it."""
    from real.validation.verdict import FULL_TARGETS, QUICK_TARGETS, verdict

    targets = QUICK_TARGETS if quick else FULL_TARGETS
    return [verdict(rows, targets, pricing, settled)
            for pricing in (None, "profiled") if pricing is None or any(pricing in r for r in rows)]


def growing(bar, per_round: int) -> Callable[[], None]:
    """An A/B blocks bar's tick: a block done, the bar grown by a round where a further one starts."""
    def tick() -> None:
        if bar.n >= bar.total:
            bar.total += per_round
        bar.update()

    return tick


def _random_weight(settings: Settings, platform, device: str, threads: int, progress: bool,
                   placement=None) -> list[dict]:
    from tqdm.auto import tqdm

    from real.model.random_models import random_spec, random_transformer, time_steps
    from real.validation.gpu_target import priced_as_run
    from real.validation.calibration.microbench import torch_threads
    from sim.closed_form import step_seconds

    if placement is not None:     # the steps are timed as eager forwards: priced in eager mode where profiled so
        platform = priced_as_run(platform, device, graphs=False)
    rows = []
    total = len(settings.random_models) * len(settings.random_tokens) * settings.random_repeats
    with tqdm(total=total, desc="random-weight timing", unit="step", disable=not progress, file=sys.stderr) as bar:
        for name in settings.random_models:
            spec = random_spec(name)
            bar.set_postfix_str(f"{name} ({spec.params / 1e6:.0f} M params)")
            if placement is not None:    # on the GPU, in the run's dtype (priced in it)
                spec = spec.with_dtype(placement.dtype)
                model = random_transformer(spec, device=placement.device, dtype=placement.torch_dtype())
            else:
                model = random_transformer(spec)
            with torch_threads(threads):
                timings = time_steps(model, settings.random_tokens, settings.random_context, settings.random_repeats,
                                     tick=bar.update)
            del model
            for t in timings:
                pred = float(step_seconds(spec, platform, device, t.tokens, t.context))
                rows.append({"model": name, "params": spec.params, "weight_mb": spec.weight_bytes() / 1e6,
                             "tokens": t.tokens, "context": t.context, "meas_ms": t.seconds * 1e3,
                             "pred_ms": pred * 1e3, "error_signed": (pred - t.seconds) / t.seconds,
                             "label": "random-weight timing run"})
    return rows


def draft_in_dtype(config_path: str, dtype: str, out: Path) -> str:
    """``config_path`` (the draft's config.json) as a config of the same model in ``dtype``, written into ``out``
    (the strategies take a draft model by path and price it in its config's dtype); the path itself where the
    dtype is already that one."""
    from sim.model_spec import get_model

    spec = get_model(config_path)
    if spec.dtype == dtype:
        return config_path
    path = out / f"draft-config-{dtype}.json"
    atomic_files.write_text(path, json.dumps(spec.with_dtype(dtype).to_hf_config(), indent=1) + "\n")
    return str(path)


def validate(out: str | Path | None = None, preset: str | None = None, quick: bool = False, device: str | None = "cpu",
             platform: str = "host", progress: bool = True, command: str = "hetspec validate",
             settings: Settings | None = None, grid=None, dtype: str | None = None, graphs: str = "auto",
             section: Callable | None = None, kind: str = "validate") -> dict:
    """Run the whole validation; write ``results.json``, the plots and ``report.md`` into ``out``.

    ``device``: a device of the calibrated host (``cpu``, ``cpuN``) or a GPU (``cuda:N``, decoded there
    in ``dtype`` with CUDA graphs per ``graphs``, priced on the platform's device for it); None: ``cuda:0``
    where CUDA exists, else ``cpu`` (:mod:`real.validation.gpu_target`).
    ``grid``: the :class:`~real.validation.grid.GridPoint` s to run (default: the whole grid).
    ``section``: a further section run after the grid, ``section(models, host, ctx, out) -> (dict, markdown
    lines)``, its dict kept under ``doc["hetero"]`` and its lines in the report (the heterogeneous section). ``kind``: the run record's kind.
    Returns the results document (what ``results.json`` holds).
    """
    import torch
    from tqdm.auto import tqdm

    from real.run.acceptance import measure_profile
    from real.run.session import load_models
    from real.train.corpus import prompts as corpus_prompts
    from real.validation.calibration.microbench import torch_threads
    from real.validation.grid import draft_tree_widths, medusa_tree, real_config
    from real.validation.measure import head_to_head, measure_grid
    from real.validation.predict import PredictionContext, predict_point
    from real.validation.report import write_report
    from real.validation.verdict import contests, headline, record

    t_start = time.perf_counter()
    started = datetime.now(timezone.utc)
    out = Path(out) if out is not None else default_out()
    if out.exists() and not out.is_dir():
        raise HetSpecError(f"--out {out} is a file; give a folder")

    banner("[1/6] host platform", progress)
    target = validation_target(platform, device, dtype, graphs)
    host, device, placement = target.platform, target.device, target.placement
    dev = host.device(device)
    threads = (dev.cores if placement is None else None) or torch.get_num_threads()
    if progress:
        print(f"{host.name}: {host.description}\ndevice {device}: {dev.description} ({threads} torch threads)",
              file=sys.stderr)

    preset, why = choose_preset(preset)
    banner(f"[2/6] demo models: preset {preset} ({why})", progress)
    models = load_models(preset, progress, placement)
    settings = settings or settings_for(quick, preset)
    grid = tuple(grid) if grid else grid_for(quick, preset)

    banner(f"[3/6] acceptance profile on {settings.calibration_prompts} calibration prompts", progress)
    calib = [list(p) for p in corpus_prompts(models.tokenizer, "calibration", settings.calibration_prompts,
                                             settings.prompt_tokens, seed=0)]
    with torch_threads(threads):
        profile = measure_profile(models, calib, settings.max_new_tokens, name=f"demo-{preset}-validation",
                                  source=f"measured by {command} on {len(calib)} calibration prompts of the demo "
                                         f"{preset} models",
                                  meta={"preset": preset, "prompt_tokens": settings.prompt_tokens},
                                  draft_tree_widths=draft_tree_widths(grid))
    out.mkdir(parents=True, exist_ok=True)

    banner(f"[4/6] predictions for {len(grid)} configurations ({host.name}:{device})", progress)
    trees = {p: medusa_tree(p.value, profile.medusa_accuracy) for p in grid if p.method == "medusa"}
    target_spec, draft_config = models.target.spec, str(Path(models.folder) / "draft" / "config.json")
    if placement is not None:     # on the GPU both models run, and are priced, in the run's dtype
        target_spec = target_spec.with_dtype(placement.dtype)
        draft_config = draft_in_dtype(draft_config, placement.dtype, out)
    ctx = PredictionContext(target=target_spec, draft_config=draft_config,
                            medusa_heads=models.heads.n_heads, platform=host, device=device,
                            context=settings.prompt_tokens + settings.max_new_tokens // 2, profile=profile)
    preds = [predict_point(p, ctx, trees.get(p)) for p in grid]
    # the same grid priced by the CPU's measured operator profile, beside the roofline (when there is one)
    variant = profiled_variant(host, device) if placement is None else None
    preds_profiled = ([predict_point(p, replace(ctx, platform=variant.platform), trees.get(p)) for p in grid]
                      if variant is not None and variant.platform is not None else None)
    if progress and variant is not None:
        print("operator profile: " + (f"also priced by {variant.source['profile']}" if preds_profiled
                                      else variant.reason), file=sys.stderr)
        if preds_profiled and variant.source.get("older_than_host"):
            print(f"warning: {variant.source['older_than_host']}", file=sys.stderr)

    stop = settings.stopping()
    per_round = max(len(grid) - 1, 1)
    count = (f"{stop.least}" if stop.least == stop.most else
             f"{stop.least} to {stop.most}" + (f" (further rounds while the paired band is over "
                                                f"±{100 * stop.settled:.1f} % and within {stop.budget_s:.0f} s)"
                                                if stop.budget_s else ""))
    banner(f"[5/6] real runs: {len(grid)} configurations, each in {count} A/B blocks with ar, one pair per "
           f"evaluation prompt ({settings.eval_prompts} x {settings.max_new_tokens} tokens)", progress)
    evaluation = [list(p) for p in corpus_prompts(models.tokenizer, "evaluation", settings.eval_prompts,
                                                  settings.prompt_tokens, seed=0)]
    configs = [real_config(p, profile.medusa_accuracy, trees.get(p)) for p in grid]
    with tqdm(total=per_round * stop.least, desc="A/B blocks", unit="block", disable=not progress,
              file=sys.stderr) as bar, torch_threads(threads):
        meas = measure_grid(models, grid, configs, evaluation, settings.max_new_tokens, stop, worker=device,
                            tick=growing(bar, per_round))
    rows, judged_quick = point_rows(grid, preds, meas, preds_profiled), quick or settings.label != "full"
    settled, fights = {}, contests(verdicts_of(rows, judged_quick))
    if fights:
        banner(f"[5/6] head to head, to settle the regret: {', '.join(fights)}'s predicted vs measured best", progress)
        with tqdm(total=stop.least * sum(len(r) for _, r in fights.values()), desc="head-to-head blocks",
                  unit="block", disable=not progress, file=sys.stderr) as bar, torch_threads(threads):
            settled = head_to_head(models, grid, configs, evaluation, settings.max_new_tokens,
                                   settings.stopping(HEAD_TO_HEAD_SHARE), fights, worker=device, tick=growing(bar, 1))
    verdicts = verdicts_of(rows, judged_quick, settled)

    random_rows = []
    if settings.random_models:
        banner(f"[6/6] random-weight timing runs: {', '.join(settings.random_models)}", progress)
        random_rows = _random_weight(settings, host, device, threads, progress, placement)
    doc = {
        "format": "hetspec-validation/2",
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "preset": preset, "preset_reason": why,
        "platform": {"name": host.name, "description": host.description, "path": shown_path(host.path), "device": device,
                     "threads": threads, "file": PRICED_PLATFORM,
                     "placement": placement.describe() if placement is not None else None},
        "settings": asdict(settings),
        "context_priced": ctx.context,
        "protocol": "paired: every configuration in A/B blocks with ar, in this process",
        "models": {"target": models.target.spec.to_dict(), "draft": models.draft.spec.to_dict(),
                   "medusa_heads": models.heads.n_heads, "summary": {k: models.summary.get(k) for k in (
                       "fingerprint", "trained_at", "device", "bf16_autocast", "torch", "target_eval_perplexity",
                       "draft_greedy_agreement")}},
        "acceptance": {"draft_alpha": profile.draft_alpha, "chain_length": profile.chain_acceptance_length,
                       "medusa_length": ({p.value: profile.acceptance_length.get(p.value) for p in trees}
                                         if profile.acceptance_length else None),
                       "medusa_top1": [row[0] for row in profile.medusa_accuracy] if profile.medusa_accuracy else None,
                       "positions": profile.meta.get("positions")},
        "points": rows,
        "verdicts": verdicts,
        "head_to_head": settled,
        "profiled": ({"source": variant.source} if preds_profiled else
                     {"reason": variant.reason if variant is not None else
                      "GPU run: priced on the GPU platform's own device"}),
        "random_weight": random_rows,
    }
    extra = None
    if section is not None:
        doc["hetero"], extra = section(models, host, ctx, out)
    doc["seconds"] = round(time.perf_counter() - t_start, 1)
    doc["record"] = record(kind, verdicts)
    if progress:
        for v in verdicts:
            print(headline(v), file=sys.stderr)
    profile.save(out / "acceptance-profile.json")     # with the report: a run stopped midway leaves the folder be
    write_report(doc, out, extra)
    write_run_machine(out, command, started, host, device)
    write_platform_file(host, out / PRICED_PLATFORM)
    return doc


def write_run_machine(out: Path, command: str, started: datetime, host, device: str) -> Path:
    """``machine.json`` beside the report: this machine, the command, its start and end, and the calibration
    that priced it (the GPU's facts where the run decoded on one)."""
    from real.model.placement import gpu_facts
    from sim.records import write_machine_json

    calibration = {"platform": shown_path(host.path), "description": host.description}
    extra = {"gpu": gpu_facts()} if str(device).startswith("cuda") else None
    return write_machine_json(out, command=command, started=started, calibration=calibration, extra=extra)
