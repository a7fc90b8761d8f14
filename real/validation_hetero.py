"""The heterogeneous section of ``hetspec validate`` (issue 7): ratio sweep, placements, ALSpec, streaming.

1. **hcmp ratio sweep** -- the demo target's greedy Medusa tree (from the head accuracies measured on
   calibration prompts) verified by ``hcmp`` on two workers at r = 0, 0.1, ..., 1: measured on
   held-out evaluation prompts (interleaved repeats, medians) and predicted by the simulator's
   ``hcmp`` strategy on the calibrated ``host`` platform with ``device`` / ``secondary`` = the two
   workers (``cpu0`` / ``cpu1``), ``attention_split=static`` (the real split: dense part on the
   primary, sparse on the secondary), the heads the real path computes. The page syncs are priced
   at the round trip of the barrier the split step really uses (:func:`real.workers.barrier_round_trip_s`,
   measured at the start of this section; the platform's calibrated hand-off is kept for the record).
   Reported: predicted and measured step latency and tokens/s per ratio, both optima, and the
   **regret** of the predicted best ratio (:func:`real.validation_metrics.regret`).
2. **dovetail placements** -- drafter and verifier on each pair of workers (``cpu0``, ``cpu1`` and
   ``cpu`` = all cores; ``cuda:0`` where one exists): measured, and predicted by the ``dovetail``
   strategy with the demo draft model as drafter, tokens per round measured on calibration prompts.
   The host platform links its single-thread workers to one another only; links between ``cpu``
   and a ``cpuN`` (the same zero-copy hand-over between threads) are added with the calibrated
   hand-off latency (:func:`with_worker_links`).
3. **alspec** -- hit rate against lambda and S, and the agreement of the tokens with exact decoding.
4. **streaming** -- ``draft-tree`` with the target's layers streamed from disk under budgets that
   keep all, half or none of its layers resident: loading vs compute time, tokens vs resident.

Predictions that need a device the platform does not describe (``cuda:0`` on a host calibrated
without one) are reported as missing, with the reason; their measurements are still reported.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from hwmodels.errors import HetSpecError

#: Output files of the section (next to report.md).
JSON_FILE = "hetero.json"
MARKDOWN_FILE = "hetero.md"


@dataclass(frozen=True)
class HeteroSettings:
    eval_prompts: int
    prompt_tokens: int
    max_new_tokens: int
    repeats: int
    ratios: tuple[float, ...]
    hcmp_width: int                 # Medusa tree tokens verified per step (the real path's default)
    dovetail_width: int
    dovetail_depth: int
    dovetail_top_k: int
    tau_prompts: int                # calibration prompts the dovetail tokens per round are measured on
    alspec_lambdas: tuple[float, ...]
    alspec_windows: tuple[int, ...]
    alspec_prompts: int
    stream_prompts: int
    all_core_placements: bool = True   # dovetail placements with ``cpu`` (all cores) as drafter or verifier
    label: str = "quick"


#: 11 ratios (the issue's sweep), Dovetail's tree (top-k 10, depth 7, 16 tokens), ALSpec's lambda range
#: (Table 1: 0.05-0.25; 0 = exact) and windows from 4 to 32 tokens of the ~100-token demo contexts.
QUICK = HeteroSettings(eval_prompts=4, prompt_tokens=64, max_new_tokens=64, repeats=3,
                       ratios=tuple(round(0.1 * i, 1) for i in range(11)), hcmp_width=16,
                       dovetail_width=16, dovetail_depth=7, dovetail_top_k=10, tau_prompts=8,
                       alspec_lambdas=(0.0, 0.05, 0.1, 0.2, 0.3), alspec_windows=(4, 8, 16, 32), alspec_prompts=3,
                       stream_prompts=2, label="quick")
FULL = replace(QUICK, eval_prompts=8, max_new_tokens=96, repeats=5, tau_prompts=16, alspec_prompts=6,
               stream_prompts=4, label="full")


def settings_for(quick: bool) -> HeteroSettings:
    return QUICK if quick else FULL


# ---------------------------------------------------------------------------- workers and platforms
def default_pair() -> tuple[str, str]:
    """The two workers of the ratio sweep: ``cuda:0`` + ``cpu`` where CUDA exists, else the first two cores."""
    from real.workers import allowed_cores, cuda_devices

    if cuda_devices():
        return "cuda:0", "cpu"
    cores = allowed_cores()
    if len(cores) < 2:
        raise HetSpecError("the heterogeneous validation needs two workers: this process may use one core")
    return f"cpu{cores[0]}", f"cpu{cores[1]}"


def placements(pair: tuple[str, str], all_cores: bool = True) -> tuple[tuple[str, str], ...]:
    """(drafter, verifier) placements compared for dovetail (``all_cores``: also with ``cpu`` = every core)."""
    a, b = pair
    if a.startswith("cuda"):
        return ((a, b), (b, a), (a, a), (b, b))
    return ((a, b), (b, a), (a, a)) + ((("cpu", "cpu"), (a, "cpu"), ("cpu", a)) if all_cores else ())


def platform_device(platform, worker: str) -> str | None:
    """The platform's device for a worker name (``cuda:0`` may be called ``cuda:0``, ``cuda`` or ``gpu``)."""
    names = [worker] + (["cuda", "gpu"] if worker.startswith("cuda") else [])
    return next((n for n in names if n in platform.devices), None)


def with_worker_links(platform, latency_s: float | None = None):
    """``platform`` plus a unified link between every two devices of one memory domain that have none
    (latency: ``latency_s`` or that of the platform's first unified link; zero-copy bandwidth = the domain's)."""
    from hwmodels.platform import Link

    unified = [l for l in platform.links if l.kind == "unified"]
    base = unified[0] if unified else None
    lat_us = latency_s * 1e6 if latency_s is not None else (base.latency_us if base else 0.0)
    added = []
    for domain in platform.memory_domains:
        devs = list(domain.devices)
        for i, a in enumerate(devs):
            for b in devs[i + 1:]:
                if not platform.has_link(a, b, "unified"):
                    added.append(Link(name=f"{a}-{b}", kind="unified", src=a, dst=b,
                                      description="zero-copy hand-over between worker threads (added by validation)",
                                      bw_gbps=domain.bw_gbps, latency_us=lat_us, efficiency=1.0,
                                      sources={"latency_us": "the platform's calibrated hand-off between threads"}))
    return replace(platform, links=tuple(platform.links) + tuple(added))


def with_sync_latency(platform, a: str, b: str, latency_s: float):
    """``platform`` with the unified link between ``a`` and ``b`` at ``latency_s`` (the split step's barrier)."""
    links = tuple(replace(l, latency_us=latency_s * 1e6,
                          sources={**l.sources, "latency_us": "measured: PairBarrier round trip between the two "
                                                              "workers (real.workers.barrier_round_trip_s)"})
                  if l.kind == "unified" and l.connects(a, b) else l for l in platform.links)
    return replace(platform, links=links)


# ---------------------------------------------------------------------------- helpers
def _median(xs) -> float:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return statistics.median(xs) if xs else float("nan")


def _prompts(models, split: str, n: int, tokens: int) -> list[list[int]]:
    from real.corpus import prompts as corpus_prompts

    return [list(p) for p in corpus_prompts(models.tokenizer, split, n, tokens, seed=0)]


def _bar(total: int, desc: str, progress: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="run", disable=not progress, file=sys.stderr)


# ---------------------------------------------------------------------------- 1. hcmp ratio sweep
def hcmp_sweep(models, platform, ctx, settings: HeteroSettings, pair: tuple[str, str], progress: bool = True) -> dict:
    """Measured and predicted hcmp step latency and tokens/s at every ratio of ``settings.ratios``."""
    import numpy as np

    from real.hetero.hcmp import HcmpConfig, prepare
    from real.hetero.runner import main_worker, run_runtime
    from real.hetero.split_model import SplitTarget
    from real.validation_metrics import regret
    from real.workers import WorkerSession, barrier_round_trip_s, parse_workers
    from sim.strategies import get_strategy
    from sim.strategies.base import Problem, StrategyConfig
    from sim.tree import TokenTree

    profile = ctx.profile
    if profile.medusa_accuracy is None:
        raise HetSpecError("the hcmp sweep needs measured Medusa head accuracies in the acceptance profile")
    tree = TokenTree.greedy(profile.medusa_accuracy, settings.hcmp_width)
    workers = parse_workers(pair, 2)
    sync_s = barrier_round_trip_s(workers)
    ratios = list(settings.ratios)
    configs = [HcmpConfig(tree=tree, ratio=r, workers=pair) for r in ratios]
    prompts = _prompts(models, "evaluation", settings.eval_prompts, settings.prompt_tokens)
    samples: list[list] = [[] for _ in ratios]
    tokens_seen: list = [None] * len(ratios)
    splits = [SplitTarget(models.target, models.heads, r, (workers[0].device, workers[1].device)) for r in ratios]
    with _bar(len(ratios) * settings.repeats, "hcmp ratio sweep", progress) as bar:
        for rep in range(settings.repeats):
            for i in [(rep + j) % len(ratios) for j in range(len(ratios))]:
                # at ratio 0 the secondary runs the whole step on the calling thread (its own session order)
                with WorkerSession(splits[i].session_order(workers)) as session:
                    runtime = prepare(models, configs[i], session, splits[i])
                    res = run_runtime(runtime, "hcmp", configs[i], prompts, settings.max_new_tokens,
                                      main_worker("hcmp", configs[i]), warmup=rep == 0)
                samples[i].append((res.decode_s / res.steps, res.tokens_per_s, res.mean_accepted_per_step))
                tokens_seen[i] = [list(r.ids) for r in res.results]
                bar.update(1)
    meas_step = [_median(s[0] for s in row) for row in samples]
    meas_tps = [_median(s[1] for s in row) for row in samples]
    meas_tokens = [samples[i][0][2] for i in range(len(ratios))]

    # prediction
    p_dev, s_dev = platform_device(platform, pair[0]), platform_device(platform, pair[1])
    missing = "" if p_dev and s_dev else (f"platform {platform.name} has no device for worker "
                                          f"{pair[0] if not p_dev else pair[1]}")
    pred_step = pred_tps = fine = None
    pred_tokens = float("nan")
    if not missing:
        plat = with_sync_latency(platform, p_dev, s_dev, sync_s)
        problem = Problem(model=ctx.target, platform=plat, acceptance=ctx.acceptance(), context=ctx.context)
        strategy = get_strategy("hcmp")
        cfg = strategy.resolve(problem, StrategyConfig(method="hcmp").with_knobs(
            device=p_dev, secondary=s_dev, tree=tree, tree_width=tree.size, partition_ratio=0.5,
            medusa_heads=ctx.medusa_heads, medusa_heads_impl="hetspec", attention_split="static"))
        pred_step = [float(x) for x in strategy.estimate_ratios(problem, cfg, np.array(ratios))]
        pred_tokens = float(strategy.estimate(problem, cfg).tokens_per_step)
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
        "context_priced": ctx.context,
    }


# ---------------------------------------------------------------------------- 2. dovetail placements
def dovetail_placements(models, platform, ctx, settings: HeteroSettings, pair: tuple[str, str],
                        progress: bool = True) -> dict:
    """Measured and predicted dovetail round time and tokens/s for each (drafter, verifier) placement."""
    from real.hetero.dovetail import DovetailConfig, prepare
    from real.hetero.runner import run_runtime
    from real.validation_metrics import regret
    from sim.strategies import get_strategy
    from sim.strategies.base import Problem, StrategyConfig

    places = placements(pair, settings.all_core_placements)
    configs = [DovetailConfig(width=settings.dovetail_width, depth=settings.dovetail_depth,
                              top_k=settings.dovetail_top_k, workers=p) for p in places]
    # tokens per round, measured on calibration prompts (placement does not change them: greedy, lossless)
    calib = _prompts(models, "calibration", settings.tau_prompts, settings.prompt_tokens)
    with prepare(models, configs[0]) as rt:
        tau = run_runtime(rt, "dovetail", configs[0], calib, settings.max_new_tokens, places[0][1],
                          warmup=False).mean_accepted_per_step
    prompts = _prompts(models, "evaluation", settings.eval_prompts, settings.prompt_tokens)
    samples: list[list] = [[] for _ in places]
    with _bar(len(places) * settings.repeats, "dovetail placements", progress) as bar:
        for rep in range(settings.repeats):
            for i in [(rep + j) % len(places) for j in range(len(places))]:
                with prepare(models, configs[i]) as rt:
                    res = run_runtime(rt, "dovetail", configs[i], prompts, settings.max_new_tokens, places[i][1],
                                      warmup=True)
                phase = {}
                for r in res.records:
                    phase[r.phase] = phase.get(r.phase, 0.0) + r.duration_s
                samples[i].append((res.decode_s / res.steps, res.tokens_per_s, res.mean_accepted_per_step,
                                   {k: 1e3 * v / res.steps for k, v in phase.items() if k in ("draft", "verify",
                                                                                            "transfer")}))
                bar.update(1)
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
        median_row = sorted(row, key=lambda s: s[0])[len(row) // 2]
        rows.append({"drafter": d, "verifier": v, "label": f"{d} -> {v}", "missing": missing,
                     "meas_step_ms": 1e3 * _median(s[0] for s in row), "meas_tokens_per_s": _median(s[1] for s in row),
                     "meas_tokens_per_step": row[0][2], "meas_parts_ms": median_row[3],
                     "meas_step_ms_samples": [1e3 * s[0] for s in row], **pred})
    usable = [r for r in rows if not r["missing"]]
    out = {"tau_calibration": tau, "drafter": "demo draft model", "width": settings.dovetail_width,
           "depth": settings.dovetail_depth, "top_k": settings.dovetail_top_k, "placements": rows}
    if usable:
        reg, p_best, m_best = regret([r["pred_tokens_per_s"] for r in usable], [r["meas_tokens_per_s"] for r in usable])
        out.update({"regret": reg, "predicted_best": usable[p_best]["label"], "measured_best": usable[m_best]["label"]})
    return out


# ---------------------------------------------------------------------------- 3. alspec
def alspec_table(models, settings: HeteroSettings, pair: tuple[str, str], progress: bool = True) -> dict:
    """Hit rate and agreement with exact decoding for every (lambda, S)."""
    from real.decode.ar import ArConfig
    from real.hetero.alspec import AlspecConfig, prepare
    from real.hetero.runner import agreement, run_runtime
    from real.run import run_prompts

    if pair[0].startswith("cuda"):
        pair = default_cpu_pair()
    prompts = _prompts(models, "evaluation", settings.alspec_prompts, settings.prompt_tokens)
    exact = [r.ids for r in run_prompts(models, "ar", ArConfig(), prompts, settings.max_new_tokens,
                                        warmup=False).results]
    rows = []
    with _bar(len(settings.alspec_lambdas) * len(settings.alspec_windows), "alspec lambda x S", progress) as bar:
        for window in settings.alspec_windows:
            for lam in settings.alspec_lambdas:
                config = AlspecConfig(lam=lam, window=window, workers=pair)
                with prepare(models, config) as rt:
                    res = run_runtime(rt, "alspec", config, prompts, settings.max_new_tokens, pair[0], warmup=False)
                    rows.append({"lambda": lam, "window": window, "hit_rate": rt.hit_rate,
                                 "hit_rate_by_layer": rt.hit_rates_by_layer(),
                                 "median_relative_error": _median(rt.rel_errors),
                                 "tokens_per_s": res.tokens_per_s,
                                 **{f"agreement_{k}": v for k, v in agreement([r.ids for r in res.results], exact).items()}})
                bar.update(1)
    return {"workers": list(pair), "prompts": len(prompts), "max_new_tokens": settings.max_new_tokens, "rows": rows}


def default_cpu_pair() -> tuple[str, str]:
    from real.workers import allowed_cores

    cores = allowed_cores()
    return (f"cpu{cores[0]}", f"cpu{cores[-1]}") if len(cores) > 1 else ("cpu", f"cpu{cores[0]}")


# ---------------------------------------------------------------------------- 4. streaming
def streaming_table(models, settings: HeteroSettings, worker: str, progress: bool = True) -> dict:
    """draft-tree with all, half or none of the target's layers resident: load vs compute, tokens vs resident.

    The decode runs on ``worker`` (pinned, its threads); the loader thread is started before, unpinned.
    """
    from real.checkpoint import check_shapes
    from real.decode.draft_tree import DraftTreeConfig
    from real.hetero.runner import run_runtime, streaming_budget_parts
    from real.hetero.streaming import StreamStats, close_streamed, streamed_target, tensor_locations
    from real.run_request import RunRequest
    from real.workers import get_worker, on_worker

    folder = Path(models.folder) / "target"
    spec = models.target.spec
    locs = tensor_locations(check_shapes(folder, spec))
    layer = max(sum(l.nbytes for n, l in locs.items() if n.startswith(f"model.layers.{i}.")) for i in range(spec.n_layers))
    fixed = sum(l.nbytes for n, l in locs.items() if not n.startswith("model.layers."))
    config = DraftTreeConfig()
    request = RunRequest("draft-tree", prompt_tokens=settings.prompt_tokens, max_new_tokens=settings.max_new_tokens)
    draft_bytes, kv_bytes = streaming_budget_parts(models, request, config)
    base = draft_bytes + kv_bytes + fixed
    prompts = _prompts(models, "evaluation", settings.stream_prompts, settings.prompt_tokens)
    # resident layers: all (nothing streams), about half, none; a streaming budget adds one staging layer
    keeps = {"all": spec.n_layers, "half": spec.n_layers // 2, "none": 0}
    keeps = {k: v for k, v in keeps.items() if v == spec.n_layers or v + 1 < spec.n_layers}
    rows, reference = [], None
    with _bar(len(keeps), "weight streaming", progress) as bar:
        for label, keep in keeps.items():
            budget = base + (keep if keep == spec.n_layers else keep + 1) * layer + 16
            target, plan = streamed_target(folder, budget, draft_bytes=draft_bytes, kv_bytes=kv_bytes)
            layers = target.model.layers
            try:
                def bind(clock, layers=layers):
                    layers.stats = StreamStats()
                with on_worker(get_worker(worker)):
                    res = run_runtime(replace(models, target=target), "draft-tree", config, prompts,
                                      settings.max_new_tokens, worker, on_clock=bind)
                stats = layers.stats.summary()
            finally:
                close_streamed(target)
            ids = [r.ids for r in res.results]
            reference = ids if reference is None else reference
            draft_s = sum(r.duration_s for r in res.records if r.phase == "draft")
            rows.append({"resident": label, "budget_mb": budget / 1e6, "resident_layers": plan.resident_layers,
                         "streamed_layers": len(plan.streamed_layers), "tokens_per_s": res.tokens_per_s,
                         "load_ms": 1e3 * stats["load_s"], "wait_ms": 1e3 * stats["wait_s"],
                         "compute_ms": 1e3 * stats["compute_s"], "draft_ms": 1e3 * draft_s,
                         "loaded_mb": stats["loaded_bytes"] / 1e6, "load_gb_per_s": stats["load_gb_per_s"],
                         "same_tokens_as_resident": ids == reference})
            bar.update(1)
    return {"prompts": len(prompts), "max_new_tokens": settings.max_new_tokens, "layer_mb": layer / 1e6,
            "worker": worker, "rows": rows}


# ---------------------------------------------------------------------------- the section
def validate_hetero(models, platform, ctx, out: str | Path, settings: HeteroSettings, progress: bool = True,
                    pair: tuple[str, str] | None = None) -> dict:
    """Run the four parts, write the plots and ``hetero.md`` / ``hetero.json`` into ``out``; return the document."""
    import json

    from real.hetero.validation_report import markdown, write_plots

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    pair = pair or default_pair()
    t0 = time.perf_counter()
    doc = {"settings": asdict(settings), "pair": list(pair)}

    def announce(text: str) -> None:
        if progress:
            print(f"\n== heterogeneous: {text}", file=sys.stderr, flush=True)

    announce(f"hcmp ratio sweep on {pair[0]} + {pair[1]}")
    doc["hcmp"] = hcmp_sweep(models, platform, ctx, settings, pair, progress)
    announce("dovetail placements")
    doc["dovetail"] = dovetail_placements(models, platform, ctx, settings, pair, progress)
    announce("alspec hit rate vs lambda and S")
    doc["alspec"] = alspec_table(models, settings, pair, progress)
    announce("LLMCad weight streaming")
    doc["streaming"] = streaming_table(models, settings, default_cpu_pair()[0], progress)
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    doc["plots"] = write_plots(doc, out)
    (out / JSON_FILE).write_text(json.dumps(doc, indent=1, default=float) + "\n")
    (out / MARKDOWN_FILE).write_text("\n".join(markdown(doc, standalone=True)) + "\n")
    return doc


def validate_hetero_only(out: str | Path, preset: str | None = None, quick: bool = False, platform: str = "host",
                         progress: bool = True, command: str = "hetspec validate --hetero-only") -> dict:
    """The section on its own (``hetspec validate --hetero-only``): models, host, acceptance on calibration
    prompts, then :func:`validate_hetero`."""
    import torch

    from real.acceptance import measure_profile
    from real.run import load_models
    from real.validate import choose_preset, load_host
    from real.validation_predict import PredictionContext

    settings = settings_for(quick)
    host = load_host(platform)
    preset, why = choose_preset(preset)
    if progress:
        print(f"== demo models: preset {preset} ({why}); platform {host.name}", file=sys.stderr, flush=True)
    models = load_models(preset, progress)
    calib = _prompts(models, "calibration", 16 if quick else 32, settings.prompt_tokens)
    with torch.inference_mode():
        profile = measure_profile(models, calib, settings.max_new_tokens, name=f"demo-{preset}-hetero",
                                  source=f"measured by {command} on {len(calib)} calibration prompts",
                                  meta={"preset": preset, "prompt_tokens": settings.prompt_tokens})
    ctx = PredictionContext(target=models.target.spec, draft_config=str(Path(models.folder) / "draft" / "config.json"),
                            medusa_heads=models.heads.n_heads, platform=host, device="cpu",
                            context=settings.prompt_tokens + settings.max_new_tokens // 2, profile=profile)
    doc = validate_hetero(models, host, ctx, out, settings, progress)
    doc.update({"command": command, "preset": preset, "platform": host.name, "date": time.strftime("%Y-%m-%d %H:%M")})
    from real.hetero.validation_report import markdown

    (Path(out) / MARKDOWN_FILE).write_text("\n".join(markdown(doc, standalone=True)) + "\n")
    import json

    (Path(out) / JSON_FILE).write_text(json.dumps(doc, indent=1, default=float) + "\n")
    return doc
