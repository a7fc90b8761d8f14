"""ALSpec's attention-level speculation: hit rate, agreement with exact decoding and speed against lambda
and S, predicted from calibration prompts and measured on evaluation prompts.

1. **Calibration** prompts: every (S, lambda) of the grid decodes them once; its per-layer hit rates and
   its agreement with exact greedy decoding of the same prompts are what the prediction knows.
2. **Prediction**: the simulator's ``alspec`` strategy with ``loop="hetspec"`` (Alg. 1 as the real path
   runs it, :mod:`sim.strategies.alspec_loop`) on the platform's two workers (sender, receiver), window
   S, the per-layer hit rates of step 1 (an :class:`~sim.acceptance.AcceptanceModel` hit-rate profile).
   The optimizer's best (S, lambda) is the one of highest predicted tokens/s among those whose
   calibration agreement is at least the floor (:attr:`HeteroSettings.alspec_agreement`).
3. **Measurement** on held-out **evaluation** prompts: interleaved repeats (medians) of every (S, lambda),
   with their hit rates and agreement; the measured best is the fastest whose evaluation agreement
   meets the floor, and the regret compares the measured tokens/s of the two.
"""

from __future__ import annotations

from real.run.repeats import finite_median, median_index
from real.validation.gpu_target import platform_device
from real.validation.hetero.setup import (
    HeteroSettings,
    default_cpu_pair,
    fresh_processes,
    progress_bar,
    split_prompts,
    timed_sweep,
)


def _hit_profile(label: str, by_layer, source: str):
    from sim.acceptance import AcceptanceModel

    return AcceptanceModel(name=label, source=source, alspec_hit_rate_by_layer=tuple(float(r) for r in by_layer))


def alspec_table(models, settings: HeteroSettings, pair: tuple[str, str], progress: bool = True, platform=None,
                 ctx=None, guard=None) -> dict:
    """Hit rates, agreement, predicted and measured speed for every (lambda, S); the best under the agreement
    floor. ``guard``: :mod:`real.run.contention`."""
    from real.decode.ar import ArConfig
    from real.hetero.alspec import AlspecConfig, prepare
    from real.hetero.runner import agreement, run_runtime
    from real.run.session import run_prompts
    from real.validation.metrics import relative_error

    if pair[0].startswith("cuda"):
        pair = default_cpu_pair()
    grid = [(window, lam) for window in settings.alspec_windows for lam in settings.alspec_lambdas]
    configs = [AlspecConfig(lam=lam, window=window, workers=pair) for window, lam in grid]
    n = len(configs)
    new = settings.max_new_tokens

    def exact_ids(prompts):
        return [r.ids for r in run_prompts(models, "ar", ArConfig(), prompts, new, warmup=False).results]

    # 1. calibration prompts: hit rates and agreement (what the prediction knows)
    calib = split_prompts(models, "calibration", settings.alspec_calib_prompts, settings.prompt_tokens)
    exact_cal = exact_ids(calib)
    cal = []
    with progress_bar(n, "alspec on calibration prompts", progress) as bar:
        for config in configs:
            with prepare(models, config) as rt:
                res = run_runtime(rt, "alspec", config, calib, new, pair[0], warmup=False)
                cal.append({"hit_rate": rt.hit_rate, "hit_rate_by_layer": rt.hit_rates_by_layer(),
                            **agreement([r.ids for r in res.results], exact_cal)})
            bar.update(1)

    # 2. evaluation prompts: interleaved timed runs
    prompts = split_prompts(models, "evaluation", settings.alspec_prompts, settings.prompt_tokens)
    exact = exact_ids(prompts)

    samples, contention = timed_sweep(settings, pair, n, settings.alspec_repeats, _measure_setting,
                                      (models, configs, prompts, new, pair[0], exact), "alspec lambda x S", guard,
                                      progress)

    # 3. prediction from the calibration hit rates
    p_dev = s_dev = None
    missing = "no platform" if platform is None or ctx is None else ""
    if not missing:
        p_dev, s_dev = platform_device(platform, pair[0]), platform_device(platform, pair[1])
        if not (p_dev and s_dev):
            missing = f"platform {platform.name} has no device for worker {pair[0] if not p_dev else pair[1]}"
    rows = []
    for i, ((window, lam), c, row) in enumerate(zip(grid, cal, samples)):
        m = row[median_index([s["step_s"] for s in row])]
        out = {"lambda": lam, "window": window, "hit_rate": m["hit_rate"], "hit_rate_by_layer": m["hit_rate_by_layer"],
               "median_relative_error": m["median_relative_error"],
               "meas_step_ms": 1e3 * finite_median(s["step_s"] for s in row),
               "meas_tokens_per_s": finite_median(s["tokens_per_s"] for s in row),
               "meas_step_ms_samples": [1e3 * s["step_s"] for s in row],
               "calibration_hit_rate": c["hit_rate"], "calibration_hit_rate_by_layer": c["hit_rate_by_layer"],
               "calibration_agreement": c["positionwise"],
               **{f"agreement_{k}": v for k, v in m.items() if k in ("positionwise", "prefix_fraction",
                                                                      "identical_prompts", "prompts")}}
        if not missing:
            out.update(_predict(platform, ctx, p_dev, s_dev, window, lam, c["hit_rate_by_layer"]))
            out["step_error"] = relative_error(out["pred_step_ms"], out["meas_step_ms"])
            out["tokens_per_s_error"] = relative_error(out["pred_tokens_per_s"], out["meas_tokens_per_s"])
        rows.append(out)
    doc = {"workers": list(pair), "prompts": len(prompts), "calibration_prompts": len(calib), "max_new_tokens": new,
           "fresh_processes": fresh_processes(settings, pair),
           "repeats": settings.alspec_repeats, "agreement_floor": settings.alspec_agreement, "rows": rows,
           "missing": missing, "context_priced": ctx.context if ctx is not None else None,
           "contention": contention}
    doc.update(best_under_floor(rows, settings.alspec_agreement))
    return doc


def _measure_setting(payload, i: int, _rep: int, _first: bool) -> dict:
    """One (S, lambda)'s timed run on the evaluation prompts (after its warm-up, whose checks do not count)."""
    from real.hetero.alspec import prepare
    from real.hetero.runner import agreement, run_runtime

    models, configs, prompts, new, sender, exact = payload
    with prepare(models, configs[i]) as rt:
        res = run_runtime(rt, "alspec", configs[i], prompts, new, sender, warmup=True,
                          on_clock=lambda _clock: rt.reset_stats())
        return {"step_s": res.decode_s / res.steps, "tokens_per_s": res.tokens_per_s, "hit_rate": rt.hit_rate,
                "hit_rate_by_layer": rt.hit_rates_by_layer(), "median_relative_error": finite_median(rt.rel_errors),
                **agreement([r.ids for r in res.results], exact)}


def _predict(platform, ctx, sender: str, receiver: str, window: int, lam: float, by_layer) -> dict:
    from sim.strategies import get_strategy
    from sim.strategies.base import Problem, StrategyConfig

    rates = [r if r == r else 0.0 for r in by_layer]          # a layer never checked (NaN) never hits
    problem = Problem(model=ctx.target, platform=platform, context=ctx.context,
                      acceptance=_hit_profile(f"alspec S={window} lambda={lam}", rates,
                                              "measured on calibration prompts by hetspec validate --hetero"))
    strategy = get_strategy("alspec")
    cfg = strategy.resolve(problem, StrategyConfig(method="alspec", device=sender, draft_device=receiver,
                                                   options={"loop": "hetspec", "window": int(window), "sp": 1, "tp": 1,
                                                            "lam": float(lam)}))
    est = strategy.estimate(problem, cfg)
    return {"pred_step_ms": 1e3 * est.step_s, "pred_tokens_per_s": est.tokens_per_s,
            "pred_parts_ms": {k: 1e3 * v for k, v in est.breakdown.items() if k != "hit_layers"}}


def best_under_floor(rows: list[dict], floor: float) -> dict:
    """The optimizer's best (highest predicted tokens/s among the rows whose calibration agreement is at least
    ``floor``), the measured best (highest measured tokens/s among those whose evaluation agreement is), regret."""
    def label(r):
        return f"S={r['window']}, lambda={r['lambda']}"

    out = {"predicted_best": None, "measured_best": None, "regret": None}
    measured = [r for r in rows if r["agreement_positionwise"] >= floor]
    if measured:
        m_best = max(measured, key=lambda r: r["meas_tokens_per_s"])
        out["measured_best"] = label(m_best)
    predicted = [r for r in rows if r.get("pred_tokens_per_s") is not None and r["calibration_agreement"] >= floor]
    if predicted:
        p_best = max(predicted, key=lambda r: r["pred_tokens_per_s"])
        out["predicted_best"] = label(p_best)
        out["predicted_best_meets_floor"] = p_best["agreement_positionwise"] >= floor
        if measured:
            out["regret"] = 1.0 - p_best["meas_tokens_per_s"] / m_best["meas_tokens_per_s"]
    return out
