"""``chain``: a small draft model proposes gamma tokens one by one; the target verifies them in one pass.

One step (a verification round) = gamma draft forwards of one token each on ``draft_device``
(the draft's KV cache grows by one per pass), the gamma token ids moved to the target's device if
it is another one, one target forward over gamma + 1 tokens (the last accepted token and the
gamma drafts, causal mask), and the accepted ids moved back. Expected tokens per round:
Omega(gamma, alpha) = (1 - alpha^(gamma+1)) / (1 - alpha) (Dovetail §II eq. 1, after MagicDec),
so the closed form is Dovetail's T = (gamma * T_D + T_V(gamma)) / Omega(gamma, alpha) per token.

Departure, marked: the draft's catch-up on the target's correction token is folded into the
first of the gamma draft passes (one token per pass), as in Dovetail's gamma * T_D.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from hwmodels.errors import HetSpecError
from sim.closed_form import step_seconds
from sim.model_spec import ModelSpec, get_model
from sim.plan import StepPlan, Task, delay_task, graph_tasks, transfer_task
from sim.step_graph import build_step_graph
from sim.strategies.base import (DEFAULT_DRAFT_MODEL, Estimate, EstimateArrays, Knob, Problem, Strategy, StrategyConfig,
                                 co_resident, fitting_devices, host_seconds, require_fit)

#: Draft lengths searched: 1..8. Medusa's Fig. 7 finds gamma 3-4 best with Llama-68M and "larger
#: gamma degrades throughput"; 8 leaves room for CPU-target platforms where verification is dear.
MAX_GAMMA = 8
#: Bytes of one token id moved between devices (int64, torch's index dtype).
TOKEN_ID_BYTES = 8


def draft_pass_resident(problem: Problem, draft: ModelSpec, device: str, j: int) -> bool:
    """Whether draft pass ``j`` (0-based) of a round finds the draft's weights in ``device``'s cache.

    Both models fit the cache together: every pass. The draft fits alone but not with the target:
    the target's verification streams its weights through the cache and evicts the draft, so the
    round's first pass reads the draft from DRAM and the following ones find it in the cache (LRU).
    Otherwise no pass. A draft pass feeds one token: the cache one-token passes keep decides
    (``gemv_cache_gb`` where the device has it).
    """
    if co_resident(problem, device, problem.model, draft):
        return True
    return j > 0 and co_resident(problem, device, draft, tokens=1)


def rewarm_seconds(problem: Problem, draft: ModelSpec, device: str, j: int) -> float:
    """Extra seconds of draft pass ``j`` while the cache re-warms: after the target evicted the draft, a
    pass priced resident (:func:`draft_pass_resident`) still pays the device's
    :meth:`~hwmodels.platform.Device.rewarm_gap_share` of the gap between its cold and its warm time
    (``cache_rewarm_keep ** j`` where the re-warming was measured pass by pass; none by default)."""
    dev = problem.platform.device(device)
    share = dev.rewarm_gap_share(j)
    if j == 0 or share <= 0.0 or co_resident(problem, device, problem.model, draft) \
            or not draft_pass_resident(problem, draft, device, j):
        return 0.0
    cold = float(step_seconds(draft, problem.platform, device, 1, problem.context + j, problem.batch, resident=False))
    warm = float(step_seconds(draft, problem.platform, device, 1, problem.context + j, problem.batch, resident=True))
    return share * max(cold - warm, 0.0)


def draft_pass_seconds(problem: Problem, draft: ModelSpec, device: str, passes: int) -> np.ndarray:
    """Seconds of each of ``passes`` one-token forwards of ``draft``, the cache growing from the
    context, each cold or cache-resident as :func:`draft_pass_resident` says (plus the re-warming,
    :func:`rewarm_seconds`)."""
    out = np.zeros(max(passes, 0))
    for j in range(max(passes, 0)):
        out[j] = float(step_seconds(draft, problem.platform, device, 1, problem.context + j, problem.batch,
                                    resident=draft_pass_resident(problem, draft, device, j)))
        out[j] += rewarm_seconds(problem, draft, device, j)
    return out


def draft_pass_tasks(problem: Problem, draft: ModelSpec, device: str, passes: int,
                     per_layer: bool = False) -> list[Task]:
    """The plan of the same ``passes`` draft forwards as :func:`draft_pass_seconds`: ``draft<j>``
    tasks one after the other, each with its residency and, where the cache re-warms, a
    ``draft<j>/rewarm`` delay after it."""
    tasks: list[Task] = []
    for j in range(passes):
        graph = build_step_graph(draft, 1, problem.context + j, problem.batch)
        deps = (tasks[-1].name,) if tasks else ()
        tasks += graph_tasks(graph, problem.platform, device, f"draft{j}", "draft", deps, per_layer,
                             resident=draft_pass_resident(problem, draft, device, j))
        rewarm = rewarm_seconds(problem, draft, device, j)
        if rewarm > 0:
            tasks.append(delay_task(f"draft{j}/rewarm", rewarm, "draft", (tasks[-1].name,), device))
    return tasks


def draft_seconds(problem: Problem, draft: ModelSpec, device: str, gamma: int) -> float:
    """Seconds of ``gamma`` one-token forwards of ``draft`` (see :func:`draft_pass_seconds`)."""
    return float(draft_pass_seconds(problem, draft, device, gamma).sum())


class ChainStrategy(Strategy):
    name = "chain"
    knob_help = {
        "draft_depth": "gamma: draft tokens per round (tree_width = gamma + 1)",
        "draft_model": f"draft model (default {DEFAULT_DRAFT_MODEL})",
        "draft_device": "device running the draft model",
        "device": "device running the target model",
    }

    def _draft(self, config: StrategyConfig) -> ModelSpec:
        return get_model(config.draft_model or DEFAULT_DRAFT_MODEL)

    def _resident(self, problem: Problem, config: StrategyConfig) -> bool | None:
        """The target's residency: with the draft on the same device, only if both fit the cache."""
        if config.draft_device != config.device:
            return None
        return co_resident(problem, config.device, problem.model, self._draft(config))

    def search_space(self, problem: Problem) -> tuple[Knob, ...]:
        problem.need_acceptance(self.name).need_alpha()
        draft = get_model(DEFAULT_DRAFT_MODEL)
        targets = fitting_devices(problem, problem.model) or (problem.platform.accelerator.name,)
        drafts = fitting_devices(problem, draft) or (problem.platform.accelerator.name,)
        return (Knob("device", targets), Knob("draft_device", drafts), Knob("draft_model", (DEFAULT_DRAFT_MODEL,)),
                Knob("draft_depth", tuple(range(1, MAX_GAMMA + 1))))

    def resolve(self, problem: Problem, config: StrategyConfig) -> StrategyConfig:
        config = super().resolve(problem, config)
        problem.need_acceptance(self.name).need_alpha()
        gamma = config.draft_depth or (config.tree_width - 1)
        if gamma < 1:
            raise HetSpecError("chain needs at least one draft token (draft_depth >= 1)")
        draft_name = config.draft_model or DEFAULT_DRAFT_MODEL
        draft = get_model(draft_name)
        draft_device = config.draft_device or config.device
        require_fit(problem, problem.model, config.device)
        require_fit(problem, draft, draft_device, what="draft model")
        if draft_device != config.device:
            problem.platform.link(draft_device, config.device)  # one line if the devices are not linked
        return replace(config, draft_depth=gamma, tree_width=gamma + 1, draft_model=draft_name,
                       draft_device=draft_device, partition_ratio=None, tree_shape="chain", tree=None)

    def _transfer_s(self, problem: Problem, config: StrategyConfig) -> tuple[float, float]:
        if config.draft_device == config.device:
            return 0.0, 0.0
        link = problem.platform.link(config.draft_device, config.device)
        b, g = problem.batch, config.draft_depth
        return link.transfer_s(TOKEN_ID_BYTES * g * b), link.transfer_s(TOKEN_ID_BYTES * (g + 1) * b)

    def estimate(self, problem: Problem, config: StrategyConfig) -> Estimate:
        gamma = config.draft_depth
        draft = draft_seconds(problem, self._draft(config), config.draft_device, gamma)
        verify = float(step_seconds(problem.model, problem.platform, config.device, gamma + 1, problem.context,
                                    problem.batch, resident=self._resident(problem, config)))
        to_target, to_draft = self._transfer_s(problem, config)
        tokens = float(problem.acceptance.chain_tokens(gamma))
        host = float(host_seconds(problem, self.name, config.device, passes=gamma, nodes=gamma + 1))
        return Estimate(step_s=draft + to_target + verify + to_draft + host, tokens_per_step=tokens,
                        proposed_per_step=gamma, draft_passes_per_step=float(gamma),
                        breakdown={"draft": draft, "transfer": to_target + to_draft, "verify": verify, "host": host})

    def estimate_many(self, problem: Problem, configs: Sequence[StrategyConfig]) -> EstimateArrays:
        """Vectorised: per (draft model, draft device) the draft passes' cumulative times, per target
        device the verify step over all gammas at once."""
        n = len(configs)
        gammas = np.array([c.draft_depth for c in configs])
        g_max = int(gammas.max())
        draft_cum: dict[tuple[str, str], np.ndarray] = {}
        verify: dict[str, np.ndarray] = {}
        step = np.zeros(n)
        for i, c in enumerate(configs):
            key = (c.draft_model, c.draft_device)
            if key not in draft_cum:
                per_pass = draft_pass_seconds(problem, self._draft(c), c.draft_device, g_max)
                draft_cum[key] = np.concatenate([[0.0], np.cumsum(per_pass)])
            if (c.device, c.draft_model) not in verify:
                verify[(c.device, c.draft_model)] = np.concatenate([[0.0], step_seconds(
                    problem.model, problem.platform, c.device, np.arange(2, g_max + 2), problem.context,
                    problem.batch, resident=self._resident(problem, c))])
            to_target, to_draft = self._transfer_s(problem, c)
            step[i] = (draft_cum[key][c.draft_depth] + verify[(c.device, c.draft_model)][c.draft_depth] + to_target
                       + to_draft
                       + host_seconds(problem, self.name, c.device, passes=c.draft_depth, nodes=c.draft_depth + 1))
        tokens = np.asarray(problem.acceptance.chain_tokens(gammas), dtype=float)
        return EstimateArrays(step_s=step, tokens_per_step=tokens, proposed_per_step=gammas.astype(float))

    def plan(self, problem: Problem, config: StrategyConfig, rng: np.random.Generator | None = None,
             per_layer: bool = False) -> StepPlan:
        gamma, platform = config.draft_depth, problem.platform
        tasks = draft_pass_tasks(problem, self._draft(config), config.draft_device, gamma, per_layer)
        if config.draft_device != config.device:
            tasks.append(transfer_task(platform, config.draft_device, config.device,
                                       TOKEN_ID_BYTES * gamma * problem.batch, "to_target", deps=(tasks[-1].name,)))
        graph = build_step_graph(problem.model, gamma + 1, problem.context, problem.batch)
        tasks += graph_tasks(graph, platform, config.device, "verify", "verify", (tasks[-1].name,), per_layer,
                             resident=self._resident(problem, config))
        if config.draft_device != config.device:
            tasks.append(transfer_task(platform, config.device, config.draft_device,
                                       TOKEN_ID_BYTES * (gamma + 1) * problem.batch, "to_draft", deps=(tasks[-1].name,)))
        host = float(host_seconds(problem, self.name, config.device, passes=gamma, nodes=gamma + 1))
        if host > 0:
            tasks.append(delay_task("host", host, "accept", (tasks[-1].name,), config.device))
        acc = problem.acceptance
        accepted = float(acc.chain_tokens(gamma)) if rng is None else acc.sample_chain_tokens(gamma, rng)
        return StepPlan(tasks=tuple(tasks), tokens_accepted=accepted, tokens_proposed=gamma, count_phase="verify",
                        count_device=config.device)


STRATEGY = ChainStrategy
