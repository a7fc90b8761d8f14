"""The heterogeneous section of ``hetspec validate``: ratio sweep, placements, ALSpec, streaming.

1. **hcmp ratio sweep** -- the demo target's greedy Medusa tree (from the head accuracies measured on
   calibration prompts) verified by ``hcmp`` on two workers at r = 0, 0.1, ..., 1: measured on
   held-out evaluation prompts (interleaved repeats, medians) and predicted by the simulator's
   ``hcmp`` strategy on the calibrated ``host`` platform with ``device`` / ``secondary`` = the two
   workers (``cpu0`` / ``cpu1``), ``attention_split=static`` (the real split: dense part on the
   primary, sparse on the secondary), the heads the real path computes. The page syncs are priced
   at the round trip of the barrier the split step really uses (:func:`real.hetero.workers.barrier_round_trip_s`,
   measured at the start of this section; the platform's calibrated hand-off is kept for the record).
   Reported: predicted and measured step latency and tokens/s per ratio, both optima, and the
   **regret** of the predicted best ratio (:func:`real.validation.metrics.regret`).
2. **dovetail placements** -- drafter and verifier on each pair of workers (``cpu0``, ``cpu1`` and
   ``cpu`` = all cores; ``cuda:0`` where one exists): measured, and predicted by the ``dovetail``
   strategy with the demo draft model as drafter, tokens per round measured on calibration prompts.
   The host platform links its single-thread workers to one another only; links between ``cpu``
   and a ``cpuN`` (the same zero-copy hand-over between threads) are added with the calibrated
   hand-off latency (:func:`with_worker_links`).
3. **alspec** -- hit rate, agreement with exact decoding and speed against lambda and S: predicted by
   the ``alspec`` strategy (``loop="hetspec"``) from the hit rates measured on calibration prompts,
   measured on evaluation prompts; the best (S, lambda) under an agreement floor, both ways, and the regret.
4. **streaming** -- ``draft-tree`` with the target's layers streamed from disk under budgets that
   keep all, 3/4, half, 1/4 or none of its layers resident: tokens/s and the load / wait / compute split,
   predicted by the ``draft-tree`` strategy's staged pipeline on the calibrated storage link, and measured.

Before and after the four parts, the one-thread step of the calibration's streaming decoder is re-timed on the
primary worker and set against the calibration (:mod:`real.validation.hetero.worker_drift`); a move beyond 15 % is
said at the top of ``hetero.md``.

A summary (:mod:`real.validation.hetero.summary`) gives per method the median step-latency and tokens/s
errors, the regret of the predicted best and the largest single error, against the section's targets.

Predictions that need a device the platform does not describe (``cuda:0`` on a host calibrated
without one) are reported as missing, with the reason; their measurements are still reported.

Each experiment is a module of its own (``hetero_hcmp``, ``hetero_dovetail``, ``hetero_alspec``,
``hetero_streaming``); what they share is :mod:`real.validation.hetero.setup`.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from hwmodels import atomic_files
from hwmodels.datafile import output_folder, writing
from real.validation.hetero.alspec import alspec_table
from real.validation.hetero.dovetail import dovetail_placements
from real.validation.hetero.hcmp import hcmp_sweep
from real.validation.hetero.setup import (
    JSON_FILE,
    MARKDOWN_FILE,
    HeteroSettings,
    default_cpu_pair,
    default_pair,
    fresh_processes,
    section_guard,
    settings_for,
    split_prompts,
    with_repeats,
)
from real.validation.hetero.streaming import streaming_table
from real.validation.hetero.summary import hetero_summary
from real.validation.hetero.worker_drift import calibrated_step_s, drift_lines, drift_record, worker_step_s


def validate_hetero(models, platform, ctx, out: str | Path, settings: HeteroSettings, progress: bool = True,
                    pair: tuple[str, str] | None = None, guard=None) -> dict:
    """Run the four parts, write the plots and ``hetero.md`` / ``hetero.json`` into ``out``; return the document.
    ``guard`` (:class:`real.run.contention.Guard`): the contention guard of the timed sections on CPU workers
    when the settings ask for one (default: one with a reference timed here)."""
    import json

    from real.validation.hetero.report import markdown, write_plots

    out = output_folder(out, "report folder")
    pair = pair or default_pair()
    t0 = time.perf_counter()
    doc = {"settings": asdict(settings), "pair": list(pair), "fresh_processes": fresh_processes(settings, pair)}
    guard = section_guard(settings, pair, platform, guard)

    def announce(text: str) -> None:
        if progress:
            print(f"\n== heterogeneous: {text}", file=sys.stderr, flush=True)

    calibrated = calibrated_step_s(platform) if not pair[0].startswith("cuda") else None
    before = worker_step_s(pair[0]) if calibrated else None
    announce(f"hcmp ratio sweep on {pair[0]} + {pair[1]}")
    doc["hcmp"] = hcmp_sweep(models, platform, ctx, settings, pair, progress, guard)
    announce("dovetail placements")
    doc["dovetail"] = dovetail_placements(models, platform, ctx, settings, pair, progress, guard)
    announce("alspec hit rate and speed vs lambda and S")
    doc["alspec"] = alspec_table(models, settings, pair, progress, platform=platform, ctx=ctx, guard=guard)
    announce("LLMCad weight streaming")
    doc["streaming"] = streaming_table(models, settings, default_cpu_pair()[0], progress, platform=platform, ctx=ctx)
    doc["worker_drift"] = drift_record(pair[0], calibrated, before, worker_step_s(pair[0]) if calibrated else None)
    if progress and calibrated:
        print("\n".join(drift_lines(doc["worker_drift"])).strip(), file=sys.stderr, flush=True)
    doc["summary"] = hetero_summary(doc)
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    doc["plots"] = write_plots(doc, out)
    with writing(out, "report folder"):
        atomic_files.write_text(out / JSON_FILE, json.dumps(doc, indent=1, default=float) + "\n")
        atomic_files.write_text(out / MARKDOWN_FILE, "\n".join(markdown(doc, standalone=True)) + "\n")
    return doc


def validate_hetero_only(out: str | Path, preset: str | None = None, quick: bool = False, platform: str = "host",
                         progress: bool = True, command: str = "hetspec validate --hetero-only",
                         alspec_agreement: float | None = None, repeats: int | None = None) -> dict:
    """The section on its own (``hetspec validate --hetero-only``): models, host, acceptance on calibration
    prompts, then :func:`validate_hetero`. ``repeats``: of every timed section (default: the settings')."""
    import torch

    from real.run.acceptance import measure_profile
    from real.run.session import load_models
    from real.train.demo import choose_preset
    from real.validation.trust import load_host
    from real.validation.predict import PredictionContext

    settings = with_repeats(settings_for(quick), repeats)
    if alspec_agreement is not None:
        settings = replace(settings, alspec_agreement=float(alspec_agreement))
    host = load_host(platform)
    preset, why = choose_preset(preset)
    if progress:
        print(f"== demo models: preset {preset} ({why}); platform {host.name}", file=sys.stderr, flush=True)
    models = load_models(preset, progress)
    calib = split_prompts(models, "calibration", settings.calibration_prompts, settings.prompt_tokens)
    with torch.inference_mode():
        profile = measure_profile(models, calib, settings.max_new_tokens, name=f"demo-{preset}-hetero",
                                  source=f"measured by {command} on {len(calib)} calibration prompts",
                                  meta={"preset": preset, "prompt_tokens": settings.prompt_tokens})
    ctx = PredictionContext(target=models.target.spec, draft_config=str(Path(models.folder) / "draft" / "config.json"),
                            medusa_heads=models.heads.n_heads, platform=host, device="cpu",
                            context=settings.prompt_tokens + settings.max_new_tokens // 2, profile=profile)
    doc = validate_hetero(models, host, ctx, out, settings, progress)
    doc.update({"command": command, "preset": preset, "platform": host.name, "date": time.strftime("%Y-%m-%d %H:%M")})
    from real.validation.hetero.report import markdown

    import json

    with writing(out, "report folder"):
        atomic_files.write_text(Path(out) / MARKDOWN_FILE, "\n".join(markdown(doc, standalone=True)) + "\n")
        atomic_files.write_text(Path(out) / JSON_FILE, json.dumps(doc, indent=1, default=float) + "\n")
    return doc
