"""``chain``: a small draft model proposes gamma tokens one by one; the target verifies them in one pass.

One step (a verification round) = gamma draft forwards of one token each on ``draft_device``
(the draft's KV cache grows by one per pass), the gamma token ids moved to the target's device if
it is another one, one target forward over gamma + 1 tokens (the last accepted token and the
gamma drafts, causal mask), and the accepted ids moved back. Expected tokens per round:
Omega(gamma, alpha) = (1 - alpha^(gamma+1)) / (1 - alpha) (Dovetail §II eq. 1, after MagicDec),
so the closed form is Dovetail's T = (gamma * T_D + T_V(gamma)) / Omega(gamma, alpha) per token.

Departure, marked: the draft's catch-up on the target's correction token is folded into the
first of the gamma draft passes (one token per pass), as in Dovetail's gamma * T_D.

End of a generation: the real decoder never proposes past the tokens still to emit, so the last
rounds of a generation draft fewer than gamma tokens (none when one token is left). A profile that
replayed greedy chain rounds on its calibration generations (``meta["chain_rounds"]``, per gamma each
number of draft passes a round makes and its share of the rounds) is priced round kind by round
kind, as the generations of the profile's length make them; without one every round drafts gamma
(a step in the middle of a long generation).
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
from sim.strategies.loop_passes import full_share_chain, loop_verify_excess, measured_passes

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


#: Tokens the first draft pass of a round feeds after a round that accepted every draft: the last draft token,
#: which the draft has not seen, and the target's own token (``real.decode.chain``'s lag; ``draft-tree`` alike).
LAG_TOKENS_AFTER_FULL = 2


def draft_pass_seconds(problem: Problem, draft: ModelSpec, device: str, passes: int, method: str = "chain",
                       full: bool = False) -> np.ndarray:
    """Seconds of each of ``passes`` forwards of ``draft``, the cache growing from the context, each cold or
    cache-resident as :func:`draft_pass_resident` says (plus the re-warming, :func:`rewarm_seconds`). Each
    feeds one token, but after a round that accepted every draft (``full``) the first feeds
    :data:`LAG_TOKENS_AFTER_FULL`, under a mask. Where ``device``'s profile measured the draft's passes inside
    ``method``'s decode loop (:mod:`sim.strategies.loop_passes`), each pass is that measurement (of the rounds
    after a full one where ``full``), moved by the price of the context between the probe's and this one."""
    measured = measured_passes(problem, draft, device, method, full)
    out = np.zeros(max(passes, 0))
    for j in range(max(passes, 0)):
        resident = draft_pass_resident(problem, draft, device, j)

        def price(context: int, tokens: int = 1) -> float:
            return float(step_seconds(draft, problem.platform, device, tokens, context, problem.batch,
                                      resident=resident))
        if measured is None:
            tokens = LAG_TOKENS_AFTER_FULL if full and j == 0 else 1
            out[j] = price(problem.context + j, tokens) + rewarm_seconds(problem, draft, device, j)
        else:
            context, seconds = measured
            out[j] = seconds[min(j, len(seconds) - 1)] + price(problem.context + j) - price(context + j)
    return out


def draft_cumulative(problem: Problem, draft: ModelSpec, device: str, passes: int,
                     method: str = "chain") -> tuple[np.ndarray, np.ndarray]:
    """Seconds of the first k draft passes of a round, k = 0..``passes``: in a round after one that rejected a
    draft, and after one that accepted every draft (:func:`draft_pass_seconds`).
    A round whose share ``p`` follows full acceptance costs ``(1 - p) * first[k] + p * second[k]``."""
    after_rejection = np.concatenate([[0.0], np.cumsum(draft_pass_seconds(problem, draft, device, passes, method))])
    after_full = np.concatenate([[0.0], np.cumsum(draft_pass_seconds(problem, draft, device, passes, method, True))])
    return after_rejection, after_full


def draft_pass_tasks(problem: Problem, draft: ModelSpec, device: str, passes: int,
                     per_layer: bool = False, method: str = "chain", full_share: float = 0.0) -> list[Task]:
    """The plan of the same ``passes`` draft forwards as :func:`draft_pass_seconds`: ``draft<j>``
    tasks one after the other, each with its residency and, where the cache re-warms, a
    ``draft<j>/rewarm`` delay after it. Passes measured inside the decode loop are one ``draft<j>`` delay
    each, of the mix by ``full_share`` (:func:`draft_cumulative`)."""
    tasks: list[Task] = []
    if measured_passes(problem, draft, device, method) is not None:
        first, second = (np.diff(c) for c in draft_cumulative(problem, draft, device, passes, method))
        for j, seconds in enumerate((1.0 - full_share) * first + full_share * second):
            deps = (tasks[-1].name,) if tasks else ()
            tasks.append(delay_task(f"draft{j}", float(seconds), "draft", deps, device))
        return tasks
    for j in range(passes):
        graph = build_step_graph(draft, 1, problem.context + j, problem.batch)
        deps = (tasks[-1].name,) if tasks else ()
        tasks += graph_tasks(graph, problem.platform, device, f"draft{j}", "draft", deps, per_layer,
                             resident=draft_pass_resident(problem, draft, device, j))
        rewarm = rewarm_seconds(problem, draft, device, j)
        if rewarm > 0:
            tasks.append(delay_task(f"draft{j}/rewarm", rewarm, "draft", (tasks[-1].name,), device))
        if j == 0 and full_share > 0:     # the lag's second token in rounds after a full one, by their share
            one, lag = (draft_pass_seconds(problem, draft, device, 1, method, full) for full in (False, True))
            tasks.append(delay_task("draft0/lag", full_share * float(lag[0] - one[0]), "draft", (tasks[-1].name,),
                                    device))
    return tasks


def chain_rounds(meta: dict | None, gamma: int) -> tuple[tuple[int, float], ...] | None:
    """``(draft passes, share of rounds)`` of every kind of round greedy chain decoding with ``gamma``
    draft tokens made on the profile's calibration generations (``meta["chain_rounds"]["<gamma>"]``,
    :func:`real.run.acceptance.chain_rounds_table`), or None where the profile has none for it."""
    table = (meta or {}).get("chain_rounds", {}).get(str(gamma))
    if table is None:
        return None
    where = f"acceptance profile: chain_rounds[{gamma}]"
    try:
        kinds = tuple((int(k), float(w)) for k, w in table)
    except (TypeError, ValueError) as exc:
        raise HetSpecError(f"{where}: kinds must be [draft passes, share] rows ({exc})")
    for passes, weight in kinds:
        if not 0 <= passes <= gamma or weight < 0:
            raise HetSpecError(f"{where}: a round of {passes} draft passes with share {weight} is impossible "
                               f"(0 <= passes <= gamma = {gamma}, share >= 0)")
    if not kinds or not np.isclose(sum(w for _, w in kinds), 1.0, rtol=0.0, atol=1e-4):
        raise HetSpecError(f"{where}: the kinds' shares must sum to 1")
    return kinds


def round_kinds(problem: Problem, gamma: int) -> tuple[np.ndarray, np.ndarray]:
    """Draft passes of each kind of round at ``gamma`` and the kinds' shares: the profile's replayed
    rounds (:func:`chain_rounds`) where it has them, else every round drafting ``gamma``."""
    kinds = chain_rounds(problem.acceptance.meta, gamma)
    if kinds is None:
        return np.array([gamma]), np.array([1.0])
    return np.array([k for k, _ in kinds]), np.array([w for _, w in kinds])


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

    def _transfer_s(self, problem: Problem, config: StrategyConfig, passes: np.ndarray) -> np.ndarray:
        """Seconds of moving each round kind's draft ids to the target and the accepted ids back."""
        if config.draft_device == config.device:
            return np.zeros(len(passes))
        link, b = problem.platform.link(config.draft_device, config.device), problem.batch
        return np.array([link.transfer_s(TOKEN_ID_BYTES * g * b) + link.transfer_s(TOKEN_ID_BYTES * (g + 1) * b)
                         for g in passes])

    def _round_parts(self, problem: Problem, config: StrategyConfig, kinds: tuple[np.ndarray, np.ndarray],
                     draft_cum: tuple[np.ndarray, np.ndarray], verify: np.ndarray) -> tuple[dict[str, float], float]:
        """The mean seconds of each part of a round over the round ``kinds`` (:func:`round_kinds` at the
        config's gamma), and the mean draft passes; ``draft_cum`` (:func:`draft_cumulative`) / ``verify[k]``:
        k draft passes / a verification of k + 1 tokens."""
        passes, weight = kinds
        host = host_seconds(problem, self.name, config.device, passes=passes, nodes=passes + 1)
        full = full_share_chain(problem.acceptance, config.draft_depth)
        parts = {"draft": (1.0 - full) * draft_cum[0][passes] + full * draft_cum[1][passes],
                 "transfer": self._transfer_s(problem, config, passes),
                 "verify": verify[passes], "host": host}
        return {k: float(weight @ v) for k, v in parts.items()}, float(weight @ passes)

    def _verify_seconds(self, problem: Problem, config: StrategyConfig, g_max: int) -> np.ndarray:
        """Seconds of the target verifying 1..g_max + 1 tokens (index k: k + 1 tokens), with what a verification
        costs inside the decode loop beyond its pass where a profile measured it (:func:`loop_verify_excess`)."""
        resident = self._resident(problem, config)
        return np.atleast_1d(step_seconds(problem.model, problem.platform, config.device, np.arange(1, g_max + 2),
                                          problem.context, problem.batch, resident=resident)) \
            + loop_verify_excess(problem, config.device, self.name, resident)

    def _draft_cumulative(self, problem: Problem, config: StrategyConfig, g_max: int) -> tuple[np.ndarray, np.ndarray]:
        """Seconds of the first k draft passes of a round, k = 0..g_max (:func:`draft_cumulative`)."""
        return draft_cumulative(problem, self._draft(config), config.draft_device, g_max, self.name)

    def estimate(self, problem: Problem, config: StrategyConfig) -> Estimate:
        gamma = config.draft_depth
        parts, passes = self._round_parts(problem, config, round_kinds(problem, gamma),
                                          self._draft_cumulative(problem, config, gamma),
                                          self._verify_seconds(problem, config, gamma))
        tokens = float(problem.acceptance.chain_tokens(gamma))
        return Estimate(step_s=sum(parts.values()), tokens_per_step=tokens, proposed_per_step=passes,
                        draft_passes_per_step=passes, breakdown=parts)

    def estimate_many(self, problem: Problem, configs: Sequence[StrategyConfig]) -> EstimateArrays:
        """Vectorised: per (draft model, draft device) the draft passes' cumulative times, per target
        device the verify step over all gammas at once."""
        n = len(configs)
        gammas = np.array([c.draft_depth for c in configs])
        g_max = int(gammas.max())
        draft_cum: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
        verify: dict[tuple[str, str], np.ndarray] = {}
        kinds = {g: round_kinds(problem, g) for g in set(gammas.tolist())}
        step, proposed = np.zeros(n), np.zeros(n)
        for i, c in enumerate(configs):
            key = (c.draft_model, c.draft_device)
            if key not in draft_cum:
                draft_cum[key] = self._draft_cumulative(problem, c, g_max)
            if (c.device, c.draft_model) not in verify:
                verify[(c.device, c.draft_model)] = self._verify_seconds(problem, c, g_max)
            parts, proposed[i] = self._round_parts(problem, c, kinds[c.draft_depth], draft_cum[key],
                                                   verify[(c.device, c.draft_model)])
            step[i] = sum(parts.values())
        tokens = np.asarray(problem.acceptance.chain_tokens(gammas), dtype=float)
        return EstimateArrays(step_s=step, tokens_per_step=tokens, proposed_per_step=proposed)

    def plan(self, problem: Problem, config: StrategyConfig, rng: np.random.Generator | None = None,
             per_layer: bool = False) -> StepPlan:
        """One round. With ``rng`` its kind (draft passes, :func:`round_kinds`) is drawn by share and its
        accepted tokens from the chain's acceptance (no more than it verifies); without it the likeliest
        kind and the expected tokens."""
        platform, acc = problem.platform, problem.acceptance
        passes, weight = round_kinds(problem, config.draft_depth)
        gamma = int(passes[np.argmax(weight)] if rng is None else rng.choice(passes, p=weight / weight.sum()))
        tasks = draft_pass_tasks(problem, self._draft(config), config.draft_device, gamma, per_layer, self.name,
                                 full_share_chain(acc, config.draft_depth))

        def after() -> tuple[str, ...]:
            return (tasks[-1].name,) if tasks else ()
        if config.draft_device != config.device and gamma > 0:
            tasks.append(transfer_task(platform, config.draft_device, config.device,
                                       TOKEN_ID_BYTES * gamma * problem.batch, "to_target", deps=after()))
        graph = build_step_graph(problem.model, gamma + 1, problem.context, problem.batch)
        tasks += graph_tasks(graph, platform, config.device, "verify", "verify", after(), per_layer,
                             resident=self._resident(problem, config))
        excess = loop_verify_excess(problem, config.device, self.name, self._resident(problem, config))
        if excess > 0:
            tasks.append(delay_task("verify/loop", excess, "verify", after(), config.device))
        if config.draft_device != config.device:
            tasks.append(transfer_task(platform, config.device, config.draft_device,
                                       TOKEN_ID_BYTES * (gamma + 1) * problem.batch, "to_draft", deps=after()))
        host = float(host_seconds(problem, self.name, config.device, passes=gamma, nodes=gamma + 1))
        if host > 0:
            tasks.append(delay_task("host", host, "accept", after(), config.device))
        accepted = float(acc.chain_tokens(config.draft_depth)) if rng is None else \
            min(acc.sample_chain_tokens(config.draft_depth, rng), gamma + 1)
        return StepPlan(tasks=tuple(tasks), tokens_accepted=accepted, tokens_proposed=gamma, count_phase="verify",
                        count_device=config.device)


STRATEGY = ChainStrategy
