"""ALSpec's attention-level speculation: hit rate and agreement with exact decoding against lambda and S."""

from __future__ import annotations

from real.validation.hetero_setup import (
    HeteroSettings,
    default_cpu_pair,
    finite_median,
    progress_bar,
    split_prompts,
)


def alspec_table(models, settings: HeteroSettings, pair: tuple[str, str], progress: bool = True) -> dict:
    """Hit rate and agreement with exact decoding for every (lambda, S)."""
    from real.decode.ar import ArConfig
    from real.hetero.alspec import AlspecConfig, prepare
    from real.hetero.runner import agreement, run_runtime
    from real.run.session import run_prompts

    if pair[0].startswith("cuda"):
        pair = default_cpu_pair()
    prompts = split_prompts(models, "evaluation", settings.alspec_prompts, settings.prompt_tokens)
    exact = [r.ids for r in run_prompts(models, "ar", ArConfig(), prompts, settings.max_new_tokens,
                                        warmup=False).results]
    rows = []
    with progress_bar(len(settings.alspec_lambdas) * len(settings.alspec_windows), "alspec lambda x S", progress) as bar:
        for window in settings.alspec_windows:
            for lam in settings.alspec_lambdas:
                config = AlspecConfig(lam=lam, window=window, workers=pair)
                with prepare(models, config) as rt:
                    res = run_runtime(rt, "alspec", config, prompts, settings.max_new_tokens, pair[0], warmup=False)
                    rows.append({"lambda": lam, "window": window, "hit_rate": rt.hit_rate,
                                 "hit_rate_by_layer": rt.hit_rates_by_layer(),
                                 "median_relative_error": finite_median(rt.rel_errors),
                                 "tokens_per_s": res.tokens_per_s,
                                 **{f"agreement_{k}": v for k, v in agreement([r.ids for r in res.results], exact).items()}})
                bar.update(1)
    return {"workers": list(pair), "prompts": len(prompts), "max_new_tokens": settings.max_new_tokens, "rows": rows}
