"""The predicted half of ``hetspec validate``: the simulator's closed form for every grid point.

Problem: the demo target's :class:`~sim.model_spec.ModelSpec`, the calibrated ``host`` platform,
the chosen device (``cpu`` = all threads, or a single-thread worker ``cpuN``), the KV context
at the middle of the decoded stretch (prompt tokens + half the new tokens), batch 1.

Acceptance (measured on **calibration** prompts only, :func:`real.run.acceptance.measure_profile`):
tokens per step come from the profile's replayed tables, the greedy chain length by gamma and the
greedy Medusa tree length by width, which are exact for the decoders that validation runs (the
same greedy trees, built from the same profile). The per-head accuracies alone (independent
depths) and Omega(gamma, alpha) (independent tokens) are reported next to them, because they are
what a user without a replayed profile gets; the report shows how far they are off.

Step time is the strategy's :meth:`~sim.strategies.base.Strategy.estimate` for the exact
configuration the real path runs: the draft model's own spec for ``chain`` / ``draft-tree``,
the Medusa heads the real path computes (all of the model's heads, from the last accepted
token's hidden state only: options ``medusa_heads`` and ``medusa_heads_impl="hetspec"``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from hwmodels.errors import HetSpecError
from hwmodels.platform import Platform
from real.validation.grid import GridPoint
from sim.acceptance import AcceptanceModel, from_profile, omega
from sim.acceptance_profile import AcceptanceProfile
from sim.model_spec import ModelSpec
from sim.tree import TokenTree


@dataclass(frozen=True)
class Prediction:
    point: GridPoint
    step_s: float
    tokens_per_step: float
    breakdown: dict = field(default_factory=dict)      # seconds per part of the step
    tokens_per_step_independent: float | None = None   # from accuracies / Omega (no replay)
    missing: str = ""                                  # why there is no prediction (e.g. no strategy yet)
    verified_per_step: float | None = None             # tokens the target verifies per step (root included)
    draft_passes_per_step: float | None = None         # draft-model forwards per step (None: not said)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s if self.step_s > 0 else 0.0

    @property
    def ok(self) -> bool:
        return not self.missing

    def to_json(self) -> dict:
        return {"label": self.point.label, "step_ms": self.step_s * 1e3, "tokens_per_step": self.tokens_per_step,
                "tokens_per_s": self.tokens_per_s, "breakdown_ms": {k: v * 1e3 for k, v in self.breakdown.items()},
                "tokens_per_step_independent": self.tokens_per_step_independent, "missing": self.missing,
                "verified_per_step": self.verified_per_step, "draft_passes_per_step": self.draft_passes_per_step}


@dataclass(frozen=True)
class PredictionContext:
    target: ModelSpec
    draft_config: str            # path of the draft's config.json (the strategies take a model by name/path)
    medusa_heads: int            # heads the real path computes every step
    platform: Platform
    device: str
    context: int
    profile: AcceptanceProfile

    def acceptance(self) -> AcceptanceModel:
        """The replayed tables (exact for the validated decoders): no per-head accuracies, so tree
        tokens come from the measured length by width."""
        model = from_profile(self.profile)
        return replace(model, medusa_accuracy=None) if model.length_table else model

    def problem(self):
        from sim.strategies.base import Problem

        return Problem(model=self.target, platform=self.platform, acceptance=self.acceptance(),
                       context=self.context)


def knobs_for(point: GridPoint, ctx: PredictionContext, tree: TokenTree | None) -> dict:
    """The point's knobs (the same names the real config takes) and where the real path runs them:
    the device, the demo draft model, the heads the real path computes, the very tree it verifies."""
    knobs = {"device": ctx.device, **point.knobs()}
    if point.method in ("chain", "draft-tree"):
        knobs.update(draft_device=ctx.device, draft_model=ctx.draft_config)
    if point.method == "draft-tree":
        from real.decode.draft_tree import DEFAULT_MAX_DEPTH

        knobs["draft_depth"] = DEFAULT_MAX_DEPTH   # the real config's depth cap
    if point.method == "medusa":
        knobs.update(tree=tree, tree_width=tree.size, medusa_heads=ctx.medusa_heads, medusa_heads_impl="hetspec")
    return knobs


def independent_tokens(point: GridPoint, ctx: PredictionContext, tree: TokenTree | None) -> float | None:
    """Tokens per step without replay: tree length from independent per-depth accuracies, or Omega."""
    if point.method == "medusa" and ctx.profile.medusa_accuracy is not None:
        return tree.expected_accepted_length(ctx.profile.medusa_accuracy)
    if point.method == "chain" and ctx.profile.draft_alpha is not None:
        return float(omega(point.value, ctx.profile.draft_alpha))
    return None


def predict_point(point: GridPoint, ctx: PredictionContext, tree: TokenTree | None = None) -> Prediction:
    """The simulator's closed-form step time and tokens per step of ``point``."""
    from sim.strategies import get_strategy
    from sim.strategies.base import StrategyConfig

    try:
        strategy = get_strategy(point.method)
    except HetSpecError as exc:
        return Prediction(point, float("nan"), float("nan"), missing=str(exc))
    problem = ctx.problem()
    config = strategy.resolve(problem, StrategyConfig(method=point.method).with_knobs(**knobs_for(point, ctx, tree)))
    est = strategy.estimate(problem, config)
    seconds = {k: float(v) for k, v in est.breakdown.items() if not k.endswith(("_gb", "_bytes"))}
    return Prediction(point, float(est.step_s), float(est.tokens_per_step), seconds,
                      independent_tokens(point, ctx, tree), verified_per_step=float(est.proposed_per_step) + 1.0,
                      draft_passes_per_step=est.draft_passes_per_step)


def predicted_best(preds) -> Prediction | None:
    """The grid point the model predicts fastest (highest tokens/s) among ``preds`` (None if none)."""
    usable = [p for p in preds if p.ok and np.isfinite(p.tokens_per_s)]
    return max(usable, key=lambda p: p.tokens_per_s) if usable else None
