"""Ghidorah's hcmp on two workers: the partition ratio swept from 0 to 1, measured and predicted."""

from __future__ import annotations

from hwmodels.errors import HetSpecError
from real.run.repeats import finite_median
from real.validation.gpu_target import platform_device
from real.validation.hetero.setup import (
    HeteroSettings,
    split_prompts,
    timed_sweep,
    with_sync_latency,
)


def hcmp_sweep(models, platform, ctx, settings: HeteroSettings, pair: tuple[str, str], progress: bool = True,
               guard=None) -> dict:
    """Measured and predicted hcmp step latency and tokens/s at every ratio of ``settings.ratios``; ``guard``:
    :mod:`real.run.contention`."""
    import numpy as np

    from real.hetero.hcmp import HcmpConfig
    from real.hetero.workers import barrier_round_trip_s, parse_workers
    from real.validation.metrics import regret
    from sim.strategies import get_strategy
    from sim.strategies.base import Problem, StrategyConfig
    from sim.strategies.hcmp_threads import split_costs
    from sim.tree import TokenTree

    profile = ctx.profile
    if profile.medusa_accuracy is None:
        raise HetSpecError("the hcmp sweep needs measured Medusa head accuracies in the acceptance profile")
    tree = TokenTree.greedy(profile.medusa_accuracy, settings.hcmp_width)
    workers = parse_workers(pair, 2)
    sync_s = barrier_round_trip_s(workers)
    ratios = list(settings.ratios)
    configs = [HcmpConfig(tree=tree, partition_ratio=r, workers=pair) for r in ratios]
    prompts = split_prompts(models, "evaluation", settings.eval_prompts, settings.prompt_tokens)
    samples, contention = timed_sweep(settings, pair, len(ratios), settings.repeats, _measure_ratio,
                                      (models, configs, pair, prompts, settings.max_new_tokens), "hcmp ratio sweep",
                                      guard, progress)
    tokens_seen = [row[-1][3] for row in samples]
    meas_step = [finite_median(s[0] for s in row) for row in samples]
    meas_tps = [finite_median(s[1] for s in row) for row in samples]
    meas_tokens = [samples[i][0][2] for i in range(len(ratios))]

    # prediction
    p_dev, s_dev = platform_device(platform, pair[0]), platform_device(platform, pair[1])
    missing = "" if p_dev and s_dev else (f"platform {platform.name} has no device for worker "
                                          f"{pair[0] if not p_dev else pair[1]}")
    pred_step = pred_tps = fine = parts = None
    pred_tokens = float("nan")
    costs = split_costs(platform, p_dev) if not missing else {}
    if not missing:
        # a host calibrated with the split probe prices the barriers, the hand-offs, the split layers and the
        # two threads' Python (sim.strategies.hcmp); an older calibration: the barrier timed here, as before
        plat = platform if "hcmp_sync" in costs else with_sync_latency(platform, p_dev, s_dev, sync_s)
        problem = Problem(model=ctx.target, platform=plat, acceptance=ctx.acceptance(), context=ctx.context)
        strategy = get_strategy("hcmp")
        cfg = strategy.resolve(problem, StrategyConfig(method="hcmp").with_knobs(
            device=p_dev, secondary=s_dev, tree=tree, tree_width=tree.size, partition_ratio=0.5,
            medusa_heads=ctx.medusa_heads, medusa_heads_impl="hetspec", attention_split="static"))
        pred_step = [float(x) for x in strategy.estimate_ratios(problem, cfg, np.array(ratios))]
        est = strategy.estimate(problem, cfg)
        pred_tokens = float(est.tokens_per_step)
        parts = {k: 1e3 * v for k, v in est.breakdown.items()}
        pred_tps = [pred_tokens / s for s in pred_step]
        grid = np.linspace(0.0, 1.0, 101)
        fine = {"ratio": [float(r) for r in grid],
                "step_ms": [1e3 * float(x) for x in strategy.estimate_ratios(problem, cfg, grid)]}
    r_value = p_best = m_best = None
    if pred_tps is not None:
        r_value, p_best, m_best = regret(pred_tps, meas_tps)
    else:
        m_best = max(range(len(ratios)), key=lambda i: meas_tps[i])
    link = platform.link(p_dev, s_dev, "unified") if not missing and platform.has_link(p_dev, s_dev, "unified") else None
    return {
        "workers": list(pair), "tree_width": tree.size, "tree_depth": tree.depth, "heads": ctx.medusa_heads,
        "ratios": ratios, "meas_step_ms": [1e3 * s for s in meas_step], "meas_tokens_per_s": meas_tps,
        "meas_step_ms_samples": [[1e3 * s[0] for s in row] for row in samples],
        "meas_tokens_per_step": meas_tokens, "same_tokens_at_every_ratio": all(t == tokens_seen[0] for t in tokens_seen),
        "pred_step_ms": [1e3 * s for s in pred_step] if pred_step else None, "pred_tokens_per_s": pred_tps,
        "pred_tokens_per_step": pred_tokens, "pred_fine": fine,
        "predicted_best_ratio": ratios[p_best] if p_best is not None else None,
        "measured_best_ratio": ratios[m_best], "regret": r_value, "missing": missing,
        "sync_s_barrier": sync_s, "sync_s_calibrated": link.latency_s if link else None,
        "context_priced": ctx.context, "split_costs_us": {k: 1e6 * v for k, v in costs.items()},
        "pred_parts_ms_at_half": parts, "tokens_per_step_check": tokens_check(models, profile, tree, prompts, settings),
        "contention": contention,
    }


def _measure_ratio(payload, i: int, _rep: int, first: bool):
    """One ratio's run: step seconds, tokens/s, tokens per step and the tokens decoded."""
    from real.hetero.hcmp import prepare
    from real.hetero.runner import main_worker, run_runtime
    from real.hetero.split_model import SplitTarget
    from real.hetero.workers import WorkerSession, parse_workers

    models, configs, pair, prompts, max_new_tokens = payload
    workers = parse_workers(pair, 2)
    split = SplitTarget(models.target, models.heads, configs[i].partition_ratio, (workers[0].device, workers[1].device))
    # at ratio 0 the secondary runs the whole step on the calling thread (its own session order)
    with WorkerSession(split.session_order(workers)) as session:
        runtime = prepare(models, configs[i], session, split)
        res = run_runtime(runtime, "hcmp", configs[i], prompts, max_new_tokens, main_worker("hcmp", configs[i]),
                          warmup=first)
    return res.decode_s / res.steps, res.tokens_per_s, res.mean_accepted_per_step, [list(r.ids) for r in res.results]


def tokens_check(models, profile, tree, eval_prompts, settings: HeteroSettings) -> dict:
    """Where a tokens-per-step error comes from: the acceptance model (greedy Medusa replayed from the heads'
    hits, exact for the decoder) applied to the *evaluation* prompts -- a diagnostic, never used by the
    prediction -- next to the calibration prompts' value and the spread of both prompt samples."""
    import statistics

    from real.run.acceptance import _score_prompt, replay_medusa

    def per_prompt(prompts):
        out = []
        for p in prompts:
            hits = _score_prompt(models, list(p), settings.max_new_tokens)["head_hits"]
            out.append((settings.max_new_tokens - 1) / replay_medusa(tree, hits, settings.max_new_tokens))
        return out

    ev = per_prompt(eval_prompts)
    steps_ev = sum((settings.max_new_tokens - 1) / t for t in ev)
    out = {"evaluation_replay": (settings.max_new_tokens - 1) * len(ev) / steps_ev, "evaluation_prompts": len(ev),
           "evaluation_per_prompt_sd": statistics.pstdev(ev) if len(ev) > 1 else 0.0,
           "calibration_replay": float(profile.acceptance_length.get(tree.size, float("nan")))
           if profile.acceptance_length else float("nan"),
           "calibration_prompts": int(profile.meta.get("prompts", 0))}
    return out
