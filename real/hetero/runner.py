"""``hetspec run`` for the heterogeneous methods and for ``draft-tree --memory-budget``.

:func:`run_runtime` decodes prompts with a prepared runtime (workers started and weights placed
once per run, an untimed warm-up first, as :func:`real.run.session.run_prompts` does for the single-worker
methods); :func:`run_hetero_demo` is the whole command on a demo preset, returning the same
:class:`real.run.session.RunResult` plus a ``hetero`` section for ``--json``: the workers and whether
they are pinned, and per method the ratio, the transfers, the hit rates and agreement with exact
decoding, or the memory plan and the measured loading vs compute time.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

import torch

from hwmodels.errors import HetSpecError
from real.decode import decoder
from real.decode.common import Clock
from real.run.request import RunRequest, check_trace_path
from sim.trace_files import write_trace


def uses_hetero_runner(request: RunRequest) -> bool:
    from real.hetero import HETERO_DECODER_MODULES

    return request.method in HETERO_DECODER_MODULES or request.memory_budget is not None


def run_runtime(runtime, method: str, config, prompts, max_new_tokens: int, worker: str, warmup: bool = True,
                on_clock=None):
    """Decode ``prompts`` with a prepared runtime (or plain models): warm-up, then one shared clock."""
    from real.run.session import WARMUP_TOKENS, RunResult, config_summary

    dec = decoder(method)
    prompts = [list(p) for p in prompts]
    if not prompts:
        raise HetSpecError("no prompts to decode")
    if warmup:
        dec.generate(runtime, prompts[0], min(WARMUP_TOKENS, max_new_tokens), config, Clock(worker))
    clock = Clock(worker)
    if on_clock is not None:
        on_clock(clock)
    results = tuple(dec.generate(runtime, p, max_new_tokens, config, clock) for p in prompts)
    return RunResult(method=method, config=config_summary(config), results=results, records=tuple(clock.records))


def main_worker(method: str, config) -> str:
    """The worker whose trace row carries each step's token counts (the verifier / primary / sender)."""
    if method == "dovetail":
        return config.workers[1]
    if method == "hcmp":   # at ratio 0 the secondary runs the whole step
        return config.workers[1] if config.partition_ratio <= 0.0 else config.workers[0]
    if method == "alspec":
        return config.workers[0]
    return "cpu"


def assign_load_steps(records) -> tuple:
    """Give each weight-load record the step of the first target pass (prefill or verify) it feeds."""
    passes = sorted((r for r in records if r.phase in ("prefill", "verify") and not r.op), key=lambda r: r.end_s)
    out = []
    for r in records:
        if r.phase == "load":
            feeds = next((p for p in passes if p.end_s >= r.end_s), None)
            r = replace(r, step=feeds.step if feeds is not None else r.step)
        out.append(r)
    return tuple(out)


def agreement(tokens, reference) -> dict:
    """How far ``tokens`` (per prompt) follow exact decoding ``reference``: position-wise agreement,
    the mean fraction decoded before the first difference, prompts decoded identically."""
    same = total = 0
    prefix = []
    for a, b in zip(tokens, reference):
        n = min(len(a), len(b))
        same += sum(x == y for x, y in zip(a, b))
        total += n
        first = next((i for i in range(n) if a[i] != b[i]), n)
        prefix.append(first / n if n else 1.0)
    identical = sum(list(a) == list(b) for a, b in zip(tokens, reference))
    return {"positionwise": same / total if total else float("nan"),
            "prefix_fraction": statistics.mean(prefix) if prefix else float("nan"),
            "identical_prompts": identical, "prompts": len(prefix)}


def run_hetero_demo(request: RunRequest, trace: str | None = None, progress: bool = True):
    """``hetspec run`` for hcmp / dovetail / alspec / draft-tree --memory-budget on a demo preset."""
    from real.run.checkpoint_models import load_run_models
    from real.run.session import (
        build_config,
        demo_profile,
        evaluation_prompts,
        models_label,
        torch_threads,
    )

    check_trace_path(trace)
    models = load_run_models(request.preset, progress, paths=request.model_paths)
    accuracy = None
    if request.method == "hcmp" and request.tree_file is None:
        accuracy = demo_profile(models, request.preset).medusa_accuracy
    config = build_config(request, accuracy, trace_ops=trace is not None)
    prompts = evaluation_prompts(models, request)
    worker = main_worker(request.method, config)
    hetero: dict = {}
    with torch_threads(request.threads):
        if request.method == "draft-tree":
            result, hetero = _run_streaming(models, request, config, prompts, worker)
        else:
            result, hetero = _run_workers(models, request, config, prompts, worker, progress)
    if trace is not None:
        write_trace(result.records, trace)
    info = {"preset": request.preset, "models": models_label(models), "prompts": request.prompts,
            "prompt_tokens": request.prompt_tokens,
            "max_new_tokens": request.max_new_tokens, "seed": request.seed, "temperature": request.temperature,
            "threads": request.threads or torch.get_num_threads(), "hetero": hetero,
            "texts": [models.tokenizer.decode(r.ids) for r in result.results],
            "summary_lines": summary_lines(request.method, hetero)}
    return result, info


def _run_workers(models, request, config, prompts, worker, progress):
    from real.decode.ar import ArConfig
    from real.run.session import run_prompts

    module = __import__(f"real.hetero.{request.method}", fromlist=["prepare"])
    if request.method == "dovetail" and config.drafter == "dgf":
        from real.hetero.dgf_drafter import ensure_dgf

        drafter, _ = ensure_dgf(models, progress=progress)
        runtime = module.prepare(models, config, dgf=drafter)
    else:
        runtime = module.prepare(models, config)
    try:
        result = run_runtime(runtime, request.method, config, prompts, request.max_new_tokens, worker,
                             on_clock=(lambda c: runtime.reset_stats()) if request.method == "alspec" else None)
        hetero = {"workers": list(config.workers), "pinned": runtime.session.pinned(),
                  "team_bound": runtime.session.bound}
        if request.method == "hcmp":
            hetero["partition_ratio"] = config.partition_ratio
        elif request.method == "dovetail":
            transfers = [r for r in result.records if r.phase == "transfer"]
            hetero.update({"drafter": config.drafter, "top_k": config.top_k, "bytes_moved": runtime.bytes_moved,
                           "transfer_s": sum(r.duration_s for r in transfers), "transfers": len(transfers)})
        else:
            hetero.update({"lambda": config.lam, "window": config.window, "hit_rate": runtime.hit_rate,
                           "hit_rate_by_layer": runtime.hit_rates_by_layer(),
                           "median_relative_error": statistics.median(runtime.rel_errors) if runtime.rel_errors
                           else float("nan")})
    finally:
        runtime.close()
    if request.method == "alspec":   # agreement with exact (greedy ar) decoding of the same prompts
        exact = run_prompts(models, "ar", ArConfig(), prompts, request.max_new_tokens, warmup=False)
        hetero["agreement_with_exact"] = agreement([r.ids for r in result.results], [r.ids for r in exact.results])
    return result, hetero


def streaming_budget_parts(models, request: RunRequest, config) -> tuple[int, int]:
    """(draft weight bytes, both KV caches' bytes) the budget must hold for this run."""
    from real.decode.common import CACHE_SLACK_TOKENS
    from real.model.checkpoint import model_bytes

    tokens = request.prompt_tokens + request.max_new_tokens + config.tree_width + 2 + CACHE_SLACK_TOKENS
    kv = (models.target.spec.kv_bytes_per_token() + models.draft.spec.kv_bytes_per_token()) * tokens
    return model_bytes(models.draft), int(kv)


def _run_streaming(models, request, config, prompts, worker):
    from real.hetero.request import parse_bytes
    from real.hetero.streaming import StreamStats, close_streamed, streamed_target

    draft_bytes, kv_bytes = streaming_budget_parts(models, request, config)
    folder = getattr(models, "stream_folder", None) or Path(models.folder) / "target"   # models by path, or a preset's
    target, plan = streamed_target(folder, parse_bytes(request.memory_budget),
                                   draft_bytes=draft_bytes, kv_bytes=kv_bytes)
    layers = target.model.layers
    streamed = replace(models, target=target)

    def bind(clock):
        layers.stats = StreamStats()     # measure the timed run only, not the warm-up
        layers.clock = clock
    try:
        result = run_runtime(streamed, "draft-tree", config, prompts, request.max_new_tokens, worker, on_clock=bind)
        layers.clock = None
        stats = layers.stats.summary()
    finally:
        close_streamed(target)
    result = replace(result, records=assign_load_steps(result.records))
    draft_s = sum(r.duration_s for r in result.records if r.phase == "draft")
    verify_s = sum(r.duration_s for r in result.records if r.phase in ("verify", "prefill") and not r.op)
    hetero = {"memory_plan": plan.to_json(), "streaming": {**stats, "draft_s": draft_s, "verify_s": verify_s},
              "drop_page_cache": layers.drop_page_cache}
    return result, hetero


def summary_lines(method: str, hetero: dict) -> list[str]:
    """Extra lines of the human-readable ``hetspec run`` summary."""
    lines = []
    if "workers" in hetero:
        bound = hetero.get("team_bound")
        pinned = ", ".join(f"{w}{' (pinned)' if p else ''}{' (its team bound one thread a core)' if w == bound else ''}"
                           for w, p in hetero.get("pinned", {}).items())
        lines.append(f"  workers         {','.join(hetero['workers'])}  [{pinned}]")
    if method == "hcmp":
        lines.append(f"  partition_ratio {hetero['partition_ratio']:.3f} of every split operator on {hetero['workers'][0]}")
    elif method == "dovetail":
        lines.append(f"  transfers       {hetero['transfers']} in {1e3 * hetero['transfer_s']:.2f} ms "
                     f"({hetero['bytes_moved']} bytes), drafter {hetero['drafter']}")
    elif method == "alspec":
        a = hetero["agreement_with_exact"]
        lines.append(f"  hit rate        {hetero['hit_rate']:.3f} at lambda {hetero['lambda']}, S {hetero['window']} "
                     f"(per layer {', '.join(f'{h:.2f}' for h in hetero['hit_rate_by_layer'])})")
        lines.append(f"  vs exact        {a['positionwise']:.3f} of tokens equal, {a['identical_prompts']}/{a['prompts']} "
                     f"prompts identical")
    elif "memory_plan" in hetero:
        p, s = hetero["memory_plan"], hetero["streaming"]
        lines.append(f"  memory plan     {p['resident_layers']} resident layers, {len(p['streamed_layers'])} streamed "
                     f"through {p['staging_layers']} buffer(s); {p['used_bytes'] / 1e6:.1f} of "
                     f"{p['budget_bytes'] / 1e6:.1f} MB")
        lines.append(f"  load vs compute load {1e3 * s['load_s']:.1f} ms ({s['loaded_bytes'] / 1e6:.1f} MB), "
                     f"forward waited {1e3 * s['wait_s']:.1f} ms, computed {1e3 * s['compute_s']:.1f} ms, "
                     f"drafted {1e3 * s['draft_s']:.1f} ms")
    return lines
