"""LLMCad's weight streaming: draft-tree with the target's layers read from disk under memory budgets."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from real.validation.hetero_setup import HeteroSettings, progress_bar, split_prompts


def streaming_table(models, settings: HeteroSettings, worker: str, progress: bool = True) -> dict:
    """draft-tree with all, half or none of the target's layers resident: load vs compute, tokens vs resident.

    The decode runs on ``worker`` (pinned, its threads); the loader thread is started before, unpinned.
    """
    from real.decode.draft_tree import DraftTreeConfig
    from real.hetero.runner import run_runtime, streaming_budget_parts
    from real.hetero.streaming import (
        StreamStats,
        close_streamed,
        streamed_target,
        tensor_locations,
    )
    from real.hetero.workers import get_worker, on_worker
    from real.model.checkpoint import check_shapes
    from real.run.request import RunRequest

    folder = Path(models.folder) / "target"
    spec = models.target.spec
    locs = tensor_locations(check_shapes(folder, spec))
    layer = max(sum(l.nbytes for n, l in locs.items() if n.startswith(f"model.layers.{i}.")) for i in range(spec.n_layers))
    fixed = sum(l.nbytes for n, l in locs.items() if not n.startswith("model.layers."))
    config = DraftTreeConfig()
    request = RunRequest("draft-tree", prompt_tokens=settings.prompt_tokens, max_new_tokens=settings.max_new_tokens)
    draft_bytes, kv_bytes = streaming_budget_parts(models, request, config)
    base = draft_bytes + kv_bytes + fixed
    prompts = split_prompts(models, "evaluation", settings.stream_prompts, settings.prompt_tokens)
    # resident layers: all (nothing streams), about half, none; a streaming budget adds one staging layer
    keeps = {"all": spec.n_layers, "half": spec.n_layers // 2, "none": 0}
    keeps = {k: v for k, v in keeps.items() if v == spec.n_layers or v + 1 < spec.n_layers}
    rows, reference = [], None
    with progress_bar(len(keeps), "weight streaming", progress) as bar:
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
