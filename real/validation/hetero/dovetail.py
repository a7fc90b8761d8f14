"""Dovetail's placements: the drafter and the verifier on each pair of workers, measured and predicted."""

from __future__ import annotations

from pathlib import Path

from real.run.repeats import finite_median, median_index
from real.validation.gpu_target import platform_device
from real.validation.hetero.setup import (
    HeteroSettings,
    placements,
    split_prompts,
    timed_sweep,
    with_worker_links,
)


def _measure_placement(payload, i: int, _rep: int, _first: bool):
    """One placement's run (after its warm-up): round seconds, tokens/s, tokens per round, ms per part."""
    from real.hetero.dovetail import prepare
    from real.hetero.runner import run_runtime

    models, configs, verifiers, prompts, max_new_tokens = payload
    with prepare(models, configs[i]) as rt:
        res = run_runtime(rt, "dovetail", configs[i], prompts, max_new_tokens, verifiers[i], warmup=True)
    phase = {}
    for r in res.records:
        phase[r.phase] = phase.get(r.phase, 0.0) + r.duration_s
    parts = {k: 1e3 * phase.get(k, 0.0) / res.steps for k in ("draft", "verify", "transfer")}
    # host: the round's time outside its drafter passes, transfers and verification (the tree's Python,
    # acceptance): what the prediction prices as the drafter device's dovetail host costs
    parts["host"] = 1e3 * res.decode_s / res.steps - sum(parts.values())
    return res.decode_s / res.steps, res.tokens_per_s, res.mean_accepted_per_step, parts


def dovetail_placements(models, platform, ctx, settings: HeteroSettings, pair: tuple[str, str],
                        progress: bool = True, guard=None) -> dict:
    """Measured and predicted dovetail round time and tokens/s for each (drafter, verifier) placement;
    ``guard``: :mod:`real.run.contention`."""
    from real.hetero.dovetail import DovetailConfig, prepare
    from real.hetero.runner import run_runtime
    from real.validation.metrics import regret
    from sim.strategies import get_strategy
    from sim.strategies.base import Problem, StrategyConfig

    places = placements(pair, settings.all_core_placements)
    configs = [DovetailConfig(tree_width=settings.dovetail_width, draft_depth=settings.dovetail_depth,
                              top_k=settings.dovetail_top_k, workers=p) for p in places]
    # tokens per round, measured on calibration prompts (placement does not change them: greedy, lossless)
    calib = split_prompts(models, "calibration", settings.tau_prompts, settings.prompt_tokens)
    with prepare(models, configs[0]) as rt:
        tau = run_runtime(rt, "dovetail", configs[0], calib, settings.max_new_tokens, places[0][1],
                          warmup=False).mean_accepted_per_step
    prompts = split_prompts(models, "evaluation", settings.eval_prompts, settings.prompt_tokens)

    samples, contention = timed_sweep(settings, pair, len(places), settings.repeats, _measure_placement,
                                      (models, configs, [v for _, v in places], prompts, settings.max_new_tokens),
                                      "dovetail placements", guard, progress)
    draft_config = str(Path(models.folder) / "draft" / "config.json")
    plat = with_worker_links(platform)
    strategy = get_strategy("dovetail")
    rows = []
    for (d, v), row in zip(places, samples):
        pd_, pv = platform_device(platform, d), platform_device(platform, v)
        missing = "" if pd_ and pv else f"platform {platform.name} has no device for worker {d if not pd_ else v}"
        pred = {}
        if not missing:
            problem = Problem(model=ctx.target, platform=plat, context=ctx.context)
            cfg = strategy.resolve(problem, StrategyConfig(method="dovetail").with_knobs(
                device=pv, draft_device=pd_, draft_model=draft_config, tree_width=settings.dovetail_width,
                draft_depth=settings.dovetail_depth, top_k=settings.dovetail_top_k, draft_dtype="fp32",
                tau=float(min(max(tau, 1.0), settings.dovetail_width))))
            est = strategy.estimate(problem, cfg)
            pred = {"pred_step_ms": 1e3 * est.step_s, "pred_tokens_per_s": est.tokens_per_s,
                    "pred_parts_ms": {k: 1e3 * est.breakdown[k] for k in ("draft", "transfer", "verify", "host")}}
        median_row = row[median_index([s[0] for s in row])]
        rows.append({"drafter": d, "verifier": v, "label": f"{d} -> {v}", "missing": missing,
                     "meas_step_ms": 1e3 * finite_median(s[0] for s in row), "meas_tokens_per_s": finite_median(s[1] for s in row),
                     "meas_tokens_per_step": row[0][2], "meas_parts_ms": median_row[3],
                     "meas_step_ms_samples": [1e3 * s[0] for s in row], **pred})
    usable = [r for r in rows if not r["missing"]]
    out = {"tau_calibration": tau, "drafter": "demo draft model", "width": settings.dovetail_width,
           "depth": settings.dovetail_depth, "top_k": settings.dovetail_top_k, "placements": rows,
           "contention": contention, "host_costs_missing": missing_host_costs(platform, usable)}
    if usable:
        reg, p_best, m_best = regret([r["pred_tokens_per_s"] for r in usable], [r["meas_tokens_per_s"] for r in usable])
        out.update({"regret": reg, "predicted_best": usable[p_best]["label"], "measured_best": usable[m_best]["label"]})
    return out


def missing_host_costs(platform, rows) -> str:
    """Which drafter devices of ``rows`` (the predicted placements) have no calibrated ``dovetail`` loop costs,
    as a sentence (empty where all have them): their rounds' host work is priced 0. Only the heterogeneous probes
    of ``hetspec calibrate`` measure them, on the CPU workers (:mod:`real.validation.calibration.dovetail_probe`): a
    host calibrated without them (``hetspec demo``'s calibration) has none."""
    lacking = sorted({r["drafter"] for r in rows
                      if "dovetail_step" not in platform.loop_costs_us(platform_device(platform, r["drafter"]))})
    if not lacking:
        return ""
    return (f"platform {platform.name} has no dovetail loop costs for {', '.join(lacking)} (only the heterogeneous "
            "probes of `hetspec calibrate` measure them, on the CPU workers): the host work of those drafters' rounds "
            "is priced 0")
