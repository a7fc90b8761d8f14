"""The ``draft-tree`` strategy's memory plan: which of the target's weights stay resident under a memory
budget and which stream from the platform's storage link every forward (LLMCad §2.2, §3.4)."""

from __future__ import annotations

from dataclasses import dataclass

from hwmodels.errors import HetSpecError
from hwmodels.platform import GB, STORAGE, Link, Platform
from sim.model_spec import ModelSpec
from sim.strategies.base import Problem

#: Float round-off allowed when a budget is exactly what the draft, caches and staging need.
BUDGET_SLACK_BYTES = 1024.0


# ---------------------------------------------------------------------- memory and storage
@dataclass(frozen=True)
class MemoryPlan:
    """Where the target's weights live under a memory budget (bytes)."""

    budget: float
    target_weights: float
    draft_resident: float     # the draft's weights and KV cache
    kv: float                 # the target's KV cache
    staging: float            # one target layer streamed through (0 when nothing streams)
    resident: float           # target bytes that stay in memory across forwards
    streamed: float           # target bytes read from storage every forward

    @property
    def fits(self) -> bool:
        return self.streamed == 0.0


def memory_plan(problem: Problem, draft: ModelSpec | None, budget_bytes: float, tokens: int,
                keep_resident: bool = True) -> MemoryPlan:
    """Split the target's weights into resident and streamed bytes under ``budget_bytes``.

    The budget first holds the draft model (weights and a KV cache of ``context + tokens``), the
    target's KV cache and, if anything must stream, one target layer being loaded. With
    ``keep_resident`` the rest of the budget keeps the target's first bytes resident (LLMCad's
    loader fills memory up to its bound); without it a model that does not fit is re-read whole
    every forward (a swapping engine whose page cache, least-recently-used, never hits on a cyclic
    scan larger than itself: LLMCad §2.2 and Table 1). One line if the draft and caches do not fit.
    """
    model = problem.model
    W = model.weight_bytes()
    ctx = (problem.context + tokens) * problem.batch
    kv = model.kv_bytes_per_token() * ctx
    draft_res = 0.0 if draft is None else draft.weight_bytes() + draft.kv_bytes_per_token() * ctx
    if W + kv + draft_res <= budget_bytes:
        return MemoryPlan(budget_bytes, W, draft_res, kv, 0.0, W, 0.0)
    staging = model.params_per_layer * W / model.params
    free = budget_bytes - draft_res - kv - staging
    if free < -BUDGET_SLACK_BYTES:
        what = f"the draft model {draft.name} ({draft_res / GB:.2f} GB with its KV cache), " if draft else ""
        raise HetSpecError(f"memory budget {budget_bytes / GB:.2f} GB is too small: it must hold {what}the target's "
                           f"KV cache ({kv / GB:.2f} GB) and one streamed layer ({staging / GB:.2f} GB)")
    resident = min(max(free, 0.0), W) if keep_resident else 0.0
    return MemoryPlan(budget_bytes, W, draft_res, kv, staging, resident, W - resident)


def swap_all_budget_gb(problem: Problem, draft: ModelSpec | None = None, tokens: int = 1) -> float:
    """The smallest budget that runs: the draft, the KV caches and one streamed layer, no resident target
    weights (a swapping engine that re-reads every weight each forward, LLMCad §2.2)."""
    model = problem.model
    ctx = (problem.context + tokens) * problem.batch
    draft_res = 0.0 if draft is None else draft.weight_bytes() + draft.kv_bytes_per_token() * ctx
    staging = model.params_per_layer * model.weight_bytes() / model.params
    return (draft_res + model.kv_bytes_per_token() * ctx + staging) / GB


def storage_link(platform: Platform, device: str) -> Link:
    """The storage link feeding ``device``: one that ends at it, else one ending at a device that
    shares its memory (a unified-memory SoC loads into the one DRAM)."""
    link = platform.storage_link(device)
    if link is not None:
        return link
    for l in platform.links:
        if l.kind == "storage":
            other = l.dst if l.src == STORAGE else l.src
            if other == device or platform.shares_memory(other, device):
                return l
    raise HetSpecError(f"platform {platform.name} has no storage link to {device}: its weights cannot stream")


def load_seconds(platform: Platform, device: str, nbytes: float) -> float:
    return storage_link(platform, device).transfer_s(nbytes)
