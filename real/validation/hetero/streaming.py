"""LLMCad's weight streaming: draft-tree with the target's layers read from disk under memory budgets,
predicted by the ``draft-tree`` strategy's staged pipeline and measured.

Budgets keep a share of the target's layers resident (:attr:`HeteroSettings.stream_fractions`: all, 3/4,
half, 1/4, none); the rest stream through one staging buffer. Measured (interleaved repeats, medians):
tokens/s and, per verification forward, the loader's reading time, the time the forward waited for a
layer and the layers' compute. Predicted: the ``draft-tree`` strategy with option ``staging=1`` (the real
loader's layer-by-layer pipeline, :mod:`sim.strategies.streaming_pipeline`) on the platform's storage link
(``hetspec calibrate`` measures it: the loader's whole-layer reads, and the share of the compute a read in
flight takes away), the worker's ``stream_layer`` (a streamed layer's compute after the forward waited for it,
beyond a resident one's), the same tree budget and acceptance profile as the single-device validation.

The disk this reads from drifts: the streaming-loop probe read the same 6.29 MB layers at 0.94 to 1.8 GB/s
within one day of the 2-core development machine, minutes apart, so a link measured by ``hetspec calibrate``
half an hour before the section prices reads the disk no longer delivers. The section re-runs the
calibration's storage and streaming-loop probes (the same code, on files of their own: never the decode it
predicts) right before it measures, and predicts with that link and ``stream_layer``; the prediction with
the calibration's link is reported beside it.

The streamed target is read from a private copy of its checkpoint next to the demo models (same disk),
not from the file the resident models were loaded from: that file stays mapped in this process, and the
kernel does not drop mapped pages from the page cache, so its reads would come from memory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from real.run.repeats import finite_median, interleaved, median_index
from real.validation.gpu_target import platform_device
from real.validation.hetero.setup import HeteroSettings, progress_bar, split_prompts


def private_checkpoint(folder: Path, model) -> Path:
    """A copy of the checkpoint in ``folder`` (config and safetensors files) beside it, synced to disk (clean
    pages, which the loader's page-cache drop evicts). A target kept as a reference to a GGUF file (no
    safetensors in ``folder``) is written from ``model``, the target as loaded (dequantized). The caller
    removes it."""
    from real.model.checkpoint import save_model

    dest = Path(tempfile.mkdtemp(prefix="hetspec-stream-", dir=folder.parent))
    if not any(f.suffix == ".safetensors" for f in folder.iterdir()):
        save_model(model, dest)
    else:
        for f in folder.iterdir():
            if f.suffix in (".json", ".safetensors"):
                shutil.copyfile(f, dest / f.name)
    for f in dest.iterdir():
        with open(f, "rb+") as fh:
            os.fsync(fh.fileno())
    return dest


def resident_counts(n_layers: int, fractions) -> dict[str, int]:
    """Resident layers per share of the target's layers; a streaming budget needs one staging layer, so at
    most ``n_layers - 2`` stay resident when any streams (``n_layers - 1`` would fit the whole target)."""
    out: dict[str, int] = {}
    for f in fractions:
        keep = n_layers if f >= 1.0 else min(int(round(f * n_layers)), n_layers - 2)
        label = "all" if keep == n_layers else "none" if keep == 0 else f"{keep}/{n_layers}"
        if keep >= 0 and keep not in out.values():
            out[label] = keep
    return out


def streaming_table(models, settings: HeteroSettings, worker: str, progress: bool = True, platform=None,
                    ctx=None) -> dict:
    """draft-tree with a share of the target's layers resident, the rest streamed: predicted and measured.

    The decode runs on ``worker`` (pinned, its threads); the loader thread is started before, unpinned.
    """
    from real.decode.draft_tree import DraftTreeConfig
    from real.hetero.runner import run_runtime, streaming_budget_parts
    from real.hetero.streaming import StreamStats, close_streamed, streamed_target, tensor_locations
    from real.run.worker import get_worker, on_worker
    from real.model.checkpoint import check_shapes
    from real.run.request import RunRequest

    spec = models.target.spec
    config = DraftTreeConfig()
    request = RunRequest("draft-tree", prompt_tokens=settings.prompt_tokens, max_new_tokens=settings.max_new_tokens)
    draft_bytes, kv_bytes = streaming_budget_parts(models, request, config)
    prompts = split_prompts(models, "evaluation", settings.stream_prompts, settings.prompt_tokens)
    dev = platform_device(platform, worker) if platform is not None else None
    missing = ("no platform" if platform is None or ctx is None else
               f"platform {platform.name} has no device for worker {worker}" if dev is None else
               f"platform {platform.name} has no storage link (run hetspec calibrate)"
               if not any(l.kind == "storage" for l in platform.links) else "")
    fresh = None if missing else reprobed_platform(platform, dev, worker, settings.stream_probe_rounds)
    folder = private_checkpoint(Path(models.folder) / "target", models.target)
    try:
        locs = tensor_locations(check_shapes(folder, spec))
        layer = max(sum(l.nbytes for n, l in locs.items() if n.startswith(f"model.layers.{i}."))
                    for i in range(spec.n_layers))
        fixed = sum(l.nbytes for n, l in locs.items() if not n.startswith("model.layers."))
        base = draft_bytes + kv_bytes + fixed
        keeps = resident_counts(spec.n_layers, settings.stream_fractions)
        # half a layer of slack: the simulator's memory plan, priced from the shapes, keeps the same layers
        budgets = [base + (keep if keep == spec.n_layers else keep + 1) * layer + layer // 2 for keep in keeps.values()]
        reference: list = [None]

        def measure(i: int, _rep: int, _round: int):
            target, plan = streamed_target(folder, budgets[i], draft_bytes=draft_bytes, kv_bytes=kv_bytes)
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
            if i == 0 and reference[0] is None:
                reference[0] = ids
            forwards = max(stats["forwards"], 1)
            return {"step_s": res.decode_s / res.steps, "tokens_per_s": res.tokens_per_s,
                    "tokens_per_step": res.mean_accepted_per_step, "resident_layers": plan.resident_layers,
                    "streamed_layers": len(plan.streamed_layers), "forwards": stats["forwards"],
                    "load_ms": 1e3 * stats["load_s"] / forwards, "wait_ms": 1e3 * stats["wait_s"] / forwards,
                    "compute_ms": 1e3 * stats["compute_s"] / forwards,
                    "draft_ms": 1e3 * sum(r.duration_s for r in res.records if r.phase == "draft") / res.steps,
                    "loaded_mb": stats["loaded_bytes"] / 1e6, "load_gb_per_s": stats["load_gb_per_s"], "ids": ids}

        with progress_bar(len(budgets) * settings.repeats, "weight streaming", progress) as bar:
            samples = [[r[0] for r in row] for row in interleaved(len(budgets), settings.repeats, measure,
                                                                  tick=bar.update)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rows = []
    for (label, keep), budget, row in zip(keeps.items(), budgets, samples):
        m = row[median_index([s["step_s"] for s in row])]
        out = {"resident": label, "budget_mb": budget / 1e6, "resident_layers": m["resident_layers"],
               "streamed_layers": m["streamed_layers"],
               "meas_step_ms": 1e3 * finite_median(s["step_s"] for s in row),
               "meas_tokens_per_s": finite_median(s["tokens_per_s"] for s in row),
               "meas_tokens_per_step": m["tokens_per_step"], "meas_step_ms_samples": [1e3 * s["step_s"] for s in row],
               **{k: m[k] for k in ("load_ms", "wait_ms", "compute_ms", "draft_ms", "loaded_mb", "load_gb_per_s")},
               "same_tokens_as_resident": all(s["ids"] == reference[0] for s in row)}
        if not missing:
            out.update(_predict(fresh or platform, ctx, dev, models, config, request, budget))
            if fresh is not None:
                cal = _predict(platform, ctx, dev, models, config, request, budget)
                out.update({"cal_pred_step_ms": cal["pred_step_ms"], "cal_pred_tokens_per_s": cal["pred_tokens_per_s"],
                            "cal_pred_load_ms": cal["pred_load_ms"]})
        rows.append(out)
    doc = {"prompts": len(prompts), "max_new_tokens": settings.max_new_tokens, "layer_mb": layer / 1e6,
           "worker": worker, "repeats": settings.repeats, "rows": rows, "missing": missing}
    if not missing:
        doc["storage_link"] = _link_doc(fresh or platform, dev)
        if fresh is not None:
            doc["storage_link"]["reprobed"] = True
            doc["calibration_link"] = _link_doc(platform, dev)
    return doc


def _link_doc(platform, dev: str) -> dict:
    link = next(l for l in platform.links if l.kind == "storage")
    return {"name": link.name, "bw_gbps": link.bw_gbps, "latency_us": link.latency_us, "host_share": link.host_share,
            "source": link.sources.get("bw_gbps", ""),
            "stream_layer_us": platform.loop_costs_us(dev).get("stream_layer", 0.0)}


def reprobed_platform(platform, dev: str, worker: str, rounds: int):
    """``platform`` with its storage link and ``dev``'s ``stream_layer`` measured again now, by the calibration's
    storage and streaming-loop probes on ``worker`` (None where this machine cannot drop pages from its cache)."""
    from datetime import datetime, timezone

    from real.validation.calibration.host_hetero import storage_link, stream_loop_costs, with_loop_costs
    from real.validation.calibration.storage_probe import storage_probe
    from real.validation.calibration.stream_probe import stream_loop_probe

    storage = storage_probe()
    stream = stream_loop_probe(worker, rounds) if storage is not None else None
    if stream is None:
        return None
    old = next(l for l in platform.links if l.kind == "storage")
    by, on = "by hetspec validate before its streaming section", datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    link = replace(storage_link(storage, by, on, device=old.dst, stream=stream), name=old.name, src=old.src)
    loops = with_loop_costs(platform.loop_costs, (dev,), *stream_loop_costs(stream, by, on))
    return replace(platform, links=tuple(link if l is old else l for l in platform.links), loop_costs=loops)


def _predict(platform, ctx, device: str, models, config, request, budget: int) -> dict:
    from real.decode.common import CACHE_SLACK_TOKENS
    from sim.strategies import get_strategy
    from sim.strategies.base import Problem, StrategyConfig

    problem = Problem(model=ctx.target, platform=platform, acceptance=ctx.acceptance(), context=ctx.context)
    strategy = get_strategy("draft-tree")
    tokens = request.prompt_tokens + request.max_new_tokens + config.tree_width + 2 + CACHE_SLACK_TOKENS
    cfg = strategy.resolve(problem, StrategyConfig(method="draft-tree").with_knobs(
        device=device, draft_device=device, draft_model=ctx.draft_config, tree_width=config.tree_width,
        draft_depth=config.draft_depth, memory_budget_gb=budget / 1e9, staging=1, cache_tokens=tokens))
    est = strategy.estimate(problem, cfg)
    b = est.breakdown
    return {"pred_step_ms": 1e3 * est.step_s, "pred_tokens_per_s": est.tokens_per_s,
            "pred_tokens_per_step": est.tokens_per_step, "pred_load_ms": 1e3 * b.get("load", 0.0),
            "pred_wait_ms": 1e3 * b.get("wait", 0.0), "pred_compute_ms": 1e3 * b.get("compute", 0.0),
            "pred_draft_ms": 1e3 * b.get("draft", 0.0), "pred_resident_layers": int(b.get("resident_layers", 0)),
            "pred_streamed_layers": int(b.get("streamed_layers", 0))}
