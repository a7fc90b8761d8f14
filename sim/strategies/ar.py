"""``ar``: autoregressive decoding, one target forward of one token per step (the baseline).

The worked example of the strategy contract (:mod:`sim.strategies.base`): the search space is
the placement (every device the model fits on), the closed form is one step of the target on
that device (:func:`sim.closed_form.step_seconds`), and the plan is that step's operators in
order (:func:`sim.plan.graph_tasks`), phase ``decode``, one token.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.closed_form import step_seconds
from sim.plan import StepPlan, delay_task, graph_tasks
from sim.step_graph import build_step_graph
from sim.strategies.base import (Estimate, EstimateArrays, Knob, Problem, Strategy, StrategyConfig,
                                 fitting_devices, host_seconds, require_fit)


class ArStrategy(Strategy):
    name = "ar"
    knob_help = {"device": "device the model runs on (default: the accelerator if the model fits there)"}

    def search_space(self, problem: Problem) -> tuple[Knob, ...]:
        devices = fitting_devices(problem, problem.model) or (problem.platform.accelerator.name,)
        return (Knob("device", devices),)

    def resolve(self, problem: Problem, config: StrategyConfig) -> StrategyConfig:
        config = super().resolve(problem, config)
        require_fit(problem, problem.model, config.device)
        # AR verifies nothing: width 1, no draft, no split.
        return StrategyConfig(method=self.name, device=config.device, tree_width=1, draft_depth=0,
                              partition_ratio=None, tree_shape="chain")

    def estimate(self, problem: Problem, config: StrategyConfig) -> Estimate:
        step = float(step_seconds(problem.model, problem.platform, config.device, 1, problem.context, problem.batch))
        host = float(host_seconds(problem, self.name, config.device, nodes=1))
        return Estimate(step_s=step + host, tokens_per_step=1.0, proposed_per_step=0.0, draft_passes_per_step=0.0,
                        breakdown={"decode": step, "host": host})

    def estimate_many(self, problem: Problem, configs: Sequence[StrategyConfig]) -> EstimateArrays:
        by_device = {d: float(step_seconds(problem.model, problem.platform, d, 1, problem.context, problem.batch)
                              + host_seconds(problem, self.name, d, nodes=1))
                     for d in {c.device for c in configs}}
        step = np.array([by_device[c.device] for c in configs])
        return EstimateArrays(step_s=step, tokens_per_step=np.ones(len(configs)), proposed_per_step=np.zeros(len(configs)))

    def plan(self, problem: Problem, config: StrategyConfig, rng: np.random.Generator | None = None,
             per_layer: bool = False) -> StepPlan:
        graph = build_step_graph(problem.model, 1, problem.context, problem.batch)
        tasks = graph_tasks(graph, problem.platform, config.device, "decode", "decode", per_layer=per_layer)
        host = float(host_seconds(problem, self.name, config.device, nodes=1))
        if host > 0:
            tasks.append(delay_task("host", host, "accept", (tasks[-1].name,), config.device))
        return StepPlan(tasks=tuple(tasks), tokens_accepted=1, tokens_proposed=0, count_phase="decode",
                        count_device=config.device)


STRATEGY = ArStrategy
