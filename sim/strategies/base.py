"""The strategy interface: how a decode method becomes work for the engine and a closed form.

A *strategy* is the simulator's model of one decode method (``ar``, ``chain``, ``medusa``,
``hcmp``, ...; names from :mod:`sim.methods`). It is a stateless object; everything it needs
comes in as arguments:

- a :class:`Problem`: what stays fixed while the optimizer searches (target model, platform,
  acceptance model, KV context length, batch);
- a :class:`StrategyConfig`: the knobs of one configuration (tree width, draft depth / gamma,
  partition ratio, placement, method-specific options).

Contract (what a strategy module implements; ``sim/strategies/ar.py`` is the worked example)
--------------------------------------------------------------------------------------------
Subclass :class:`Strategy`, set the class attribute ``name`` to a name of
:data:`sim.methods.METHODS` and ``knob_help`` to a description of what each knob means for this
method, and implement:

``search_space(problem) -> tuple[Knob, ...]``
    The knobs the optimizer searches and their candidate values: discrete ``values`` (searched
    exhaustively, as a Cartesian product with the other discrete knobs) or, for a continuous
    knob (``partition_ratio``), ``low``/``high`` (a coarse grid, then a bounded scalar
    refinement). Knob names are :class:`StrategyConfig` field names (``tree_width``,
    ``draft_depth``, ``partition_ratio``, ``device``, ``draft_device``, ``draft_model``,
    ``tree_shape``) or, for anything else, an option name (stored in ``config.options``).
    Offer only values that can work (e.g. devices the model fits on, widths the acceptance
    model covers): every combination is evaluated.

``resolve(problem, config) -> StrategyConfig``
    Check a configuration and fill its defaults; return the completed config (``method`` set,
    ``device`` set, ``tree`` built for tree methods, ``partition_ratio`` None if the method has
    none). Bad input raises :class:`~hwmodels.errors.HetSpecError` with ONE line (an unknown
    device -> :class:`~hwmodels.errors.UnknownNameError`; a ratio outside [0, 1]; a width < 1;
    an acceptance model that does not fit the tree). Call ``super().resolve`` first: it checks
    the common fields. It must be cheap: the optimizer resolves every configuration.

``estimate(problem, config) -> Estimate``
    The closed form: step latency in seconds and expected tokens per step, without the event
    loop, for a *resolved* config. Where the method's tasks run one after another it must equal
    the engine's step time (tests hold them to 1 %); where tasks overlap or share a memory
    domain, it may approximate and the engine is the reference. For parts that start together on
    different devices (a column split between two barriers),
    :func:`sim.concurrent_parts.concurrent_seconds` gives their end times under the engine's own fluid
    contention, vectorised, so such a closed form can equal the engine exactly.

``plan(problem, config, rng=None, per_layer=False) -> StepPlan``
    What the engine runs for ONE decode step of a *resolved* config: tasks on devices / links
    (:mod:`sim.plan` builds them from priced operators), with dependencies and priorities, and
    the step's token counts. With ``rng`` (a ``numpy.random.Generator``) draw the step's outcome
    from the acceptance model (``tokens_accepted`` an int; the plan may depend on the draw, e.g.
    a rollback); without it use the expectation (``tokens_accepted`` may be fractional).
    ``per_layer`` asks for layer-by-layer tasks (readable traces) instead of one task per
    operator; honour it where it is cheap. Name phases with :data:`sim.trace.PHASES`: ``draft``,
    ``verify`` (the record that carries the counts for speculative methods; ``decode`` for
    autoregressive steps), ``transfer``, ``load``, ``sync``, ...

Optional overrides:

``estimate_many(problem, configs) -> EstimateArrays``
    Closed form over many resolved configs at once (sweeps). The default loops
    :meth:`estimate`; override it to vectorise (see :mod:`sim.closed_form`).
``estimate_ratios(problem, config, ratios) -> numpy.ndarray``
    Step seconds for one config at many partition ratios. The default loops :meth:`estimate`.
``ratio_pricer(problem, config) -> callable``
    The same as a function of the ratios, for the optimizer's coarse grid and its refinement of one
    config: a strategy whose step is costly to build for any ratio builds it once there.
``acceptance_many(problem, configs) -> (tokens, proposed)``
    Expected accepted and proposed tokens per step, without the step times.

Rules the optimizer relies on for a method with a ``partition_ratio`` knob: a resolved config
stays valid when only its ``partition_ratio`` is replaced by another value of the knob's range
(the optimizer does not re-resolve during the grid and the refinement), and
``tokens_per_step`` does not depend on the ratio (a split moves work, not acceptance).

Then register the module name in :data:`sim.strategies.STRATEGY_MODULES` (one line).

Units: seconds, bytes, FLOPs (SI) everywhere. A strategy never imports torch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from hwmodels.errors import HetSpecError, UnknownNameError
from hwmodels.platform import Platform
from sim.acceptance import AcceptanceModel
from sim.methods import method_info
from sim.model_spec import ModelSpec, get_model
from sim.plan import StepPlan
from sim.tree import TokenTree

#: Tree shapes a config may ask for (how a tree of ``tree_width`` tokens is built).
TREE_SHAPES = ("greedy", "dp", "chain", "cartesian", "medusa-list")

#: Config fields that are knobs (anything else the optimizer searches is an option).
CONFIG_KNOBS = ("tree_width", "draft_depth", "partition_ratio", "device", "draft_device", "draft_model",
                "tree_shape")

#: Default draft model for draft-model methods: the Llama-68M drafter of the Medusa paper's
#: speculative-decoding baseline for Vicuna-7B (Medusa, App. D, Fig. 7).
DEFAULT_DRAFT_MODEL = "llama-68m"


@dataclass(frozen=True)
class Problem:
    """What stays fixed during a search: target model, platform, acceptance model, context, batch.

    ``context`` is the KV-cache length (tokens already decoded) the step is priced at; ``dtype``
    overrides the target model's compute dtype (e.g. ``fp32`` for a CPU target as in Dovetail).
    """

    model: ModelSpec
    platform: Platform
    acceptance: AcceptanceModel | None = None
    context: int = 256
    batch: int = 1
    dtype: str | None = None

    def __post_init__(self) -> None:
        for label, value, low in (("context", self.context, 0), ("batch", self.batch, 1)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
                raise HetSpecError(f"{label} must be an integer >= {low} (got {value!r})")
        object.__setattr__(self, "context", int(self.context))
        object.__setattr__(self, "batch", int(self.batch))
        if self.dtype is not None and self.dtype != self.model.dtype:
            object.__setattr__(self, "model", self.model.with_dtype(self.dtype))

    def need_acceptance(self, method: str) -> AcceptanceModel:
        if self.acceptance is None:
            from sim.acceptance import acceptance_names

            raise HetSpecError(f"method {method} needs an acceptance model: --acceptance NAME|FILE|alpha:A "
                               f"(names: {', '.join(acceptance_names())})")
        return self.acceptance


@dataclass(frozen=True)
class StrategyConfig:
    """One configuration of a method: the knobs the optimizer searches.

    - ``tree_width``: tokens verified per step, root included (``TokenTree.size``; 1 = no
      speculation). For ``chain`` it is gamma + 1.
    - ``draft_depth``: speculation depth: gamma draft tokens (``chain``), the tree depth / Medusa
      heads used (``medusa``), the drafter's depth (``dovetail``); 0 when unused.
    - ``partition_ratio``: share of the work on the primary device ``device`` in [0, 1], the
      rest on the secondary device (``hcmp``); None for methods without a split.
    - ``device``: where the target model runs (default: the platform's accelerator);
      ``draft_device`` / ``draft_model``: where and which draft model runs.
    - ``tree_shape`` / ``tree``: how the verified tree is built (:data:`TREE_SHAPES`) or the
      tree itself; ``resolve`` fills ``tree`` for tree methods.
    - ``options``: method-specific knobs by name (e.g. ``{"drafter_blocks": 5}``).
    """

    method: str = ""
    tree_width: int = 1
    draft_depth: int = 0
    partition_ratio: float | None = None
    device: str | None = None
    draft_device: str | None = None
    draft_model: str | None = None
    tree_shape: str = "greedy"
    tree: TokenTree | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def option(self, name: str, default: Any = None) -> Any:
        return self.options.get(name, default)

    def with_knobs(self, **knobs: Any) -> "StrategyConfig":
        """A copy with config fields and/or options set by knob name."""
        fields_ = {k: v for k, v in knobs.items() if k in CONFIG_KNOBS or k in ("method", "tree")}
        opts = {k: v for k, v in knobs.items() if k not in fields_}
        if opts:
            fields_["options"] = {**self.options, **opts}
        return replace(self, **fields_)

    def knob_values(self) -> dict[str, Any]:
        """The knobs as a flat dict (the columns of the optimizer's table)."""
        out = {"method": self.method, "tree_width": self.tree_width, "draft_depth": self.draft_depth,
               "partition_ratio": self.partition_ratio, "device": self.device, "draft_device": self.draft_device,
               "draft_model": self.draft_model, "tree_shape": self.tree_shape}
        out.update(self.options)
        return out


@dataclass(frozen=True)
class Knob:
    """One searched knob: discrete ``values``, or a continuous range [``low``, ``high``]."""

    name: str
    values: tuple = ()
    low: float | None = None
    high: float | None = None
    grid: int = 11    # coarse grid points of a continuous knob (ends included) before refinement

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(self.values))
        continuous = self.low is not None or self.high is not None
        if continuous == bool(self.values):
            raise HetSpecError(f"knob {self.name}: give either discrete values or a [low, high] range")
        if continuous and not (self.low is not None and self.high is not None and self.low <= self.high):
            raise HetSpecError(f"knob {self.name}: needs low <= high (got {self.low}, {self.high})")

    @property
    def continuous(self) -> bool:
        return not self.values


@dataclass(frozen=True)
class Estimate:
    """Closed-form result of one configuration.

    ``breakdown`` holds seconds per part of the step (``draft``, ``verify``, ``heads``,
    ``transfer``, ...); the parts need not add up to ``step_s`` where they overlap.
    ``draft_passes_per_step``: the draft-model forwards one step runs (None: the method does not say).
    """

    step_s: float
    tokens_per_step: float
    proposed_per_step: float = 0.0
    breakdown: Mapping[str, float] = field(default_factory=dict)
    draft_passes_per_step: float | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s if self.step_s > 0 else 0.0


@dataclass(frozen=True)
class EstimateArrays:
    """Closed-form results of many configurations (same order as the configs given)."""

    step_s: np.ndarray
    tokens_per_step: np.ndarray
    proposed_per_step: np.ndarray

    @property
    def tokens_per_s(self) -> np.ndarray:
        return self.tokens_per_step / self.step_s


class Strategy(ABC):
    """Base class of the simulator's decode methods; see the module docstring for the contract."""

    name: ClassVar[str] = ""
    #: knob -> what it means for this method (shown by ``hetspec predict --help`` and the docs)
    knob_help: ClassVar[Mapping[str, str]] = {}

    # ------------------------------------------------------------------ to implement
    @abstractmethod
    def search_space(self, problem: Problem) -> tuple[Knob, ...]:
        """Knobs and candidate values the optimizer searches for this problem."""

    @abstractmethod
    def estimate(self, problem: Problem, config: StrategyConfig) -> Estimate:
        """Closed-form step latency and expected tokens per step of a resolved config."""

    @abstractmethod
    def plan(self, problem: Problem, config: StrategyConfig, rng: np.random.Generator | None = None,
             per_layer: bool = False) -> StepPlan:
        """Tasks of one decode step of a resolved config (outcome drawn with ``rng``, else expected)."""

    # ------------------------------------------------------------------ provided
    def resolve(self, problem: Problem, config: StrategyConfig) -> StrategyConfig:
        """Check the common fields and fill the defaults (subclasses call this first)."""
        platform = problem.platform
        ratio = config.partition_ratio
        if ratio is not None:
            if isinstance(ratio, bool) or not isinstance(ratio, (int, float, np.floating)) or not 0.0 <= ratio <= 1.0:
                raise HetSpecError(f"partition ratio must be in [0, 1] (got {ratio})")
            ratio = float(ratio)
        if isinstance(config.tree_width, bool) or not isinstance(config.tree_width, (int, np.integer)) \
                or config.tree_width < 1:
            raise HetSpecError(f"tree width must be an integer >= 1 (got {config.tree_width!r})")
        if isinstance(config.draft_depth, bool) or not isinstance(config.draft_depth, (int, np.integer)) \
                or config.draft_depth < 0:
            raise HetSpecError(f"draft depth must be an integer >= 0 (got {config.draft_depth!r})")
        if config.tree_shape not in TREE_SHAPES:
            raise UnknownNameError("tree shape", config.tree_shape, TREE_SHAPES)
        device = config.device or default_device(problem, problem.model)
        platform.device(device)  # unknown device -> one line
        if config.draft_device is not None:
            platform.device(config.draft_device)
        if config.draft_model is not None:
            get_model(config.draft_model)
        return replace(config, method=self.name, device=device, partition_ratio=ratio,
                       tree_width=int(config.tree_width), draft_depth=int(config.draft_depth))

    def default_config(self, problem: Problem) -> StrategyConfig:
        """A reasonable single configuration (the first value of every knob, ratio mid-range)."""
        knobs = {}
        for knob in self.search_space(problem):
            knobs[knob.name] = knob.values[0] if knob.values else (knob.low + knob.high) / 2.0
        return StrategyConfig(method=self.name).with_knobs(**knobs)

    def estimate_many(self, problem: Problem, configs: Sequence[StrategyConfig]) -> EstimateArrays:
        """Closed form of many resolved configs; override to vectorise."""
        ests = [self.estimate(problem, c) for c in configs]
        return EstimateArrays(step_s=np.array([e.step_s for e in ests], dtype=float),
                              tokens_per_step=np.array([e.tokens_per_step for e in ests], dtype=float),
                              proposed_per_step=np.array([e.proposed_per_step for e in ests], dtype=float))

    def estimate_ratios(self, problem: Problem, config: StrategyConfig, ratios: np.ndarray) -> np.ndarray:
        """Step seconds of ``config`` at each partition ratio; override to vectorise."""
        return np.array([self.estimate(problem, replace(config, partition_ratio=float(r))).step_s for r in ratios])

    def ratio_pricer(self, problem: Problem, config: StrategyConfig) -> Callable[[np.ndarray], np.ndarray]:
        """Step seconds of ``config`` as a function of an array of partition ratios, for the optimizer's grid and
        its refinement of one configuration; a strategy whose step costs something to build for any ratio
        builds it once here."""
        return lambda ratios: self.estimate_ratios(problem, config, ratios)

    def acceptance_many(self, problem: Problem, configs: Sequence[StrategyConfig]) -> tuple[np.ndarray, np.ndarray]:
        """Expected accepted and proposed tokens per step of many resolved configs (independent of the ratio);
        override where the step times cost more than the acceptance."""
        est = self.estimate_many(problem, configs)
        return est.tokens_per_step, est.proposed_per_step

    @property
    def info(self):
        return method_info(self.name)


# ---------------------------------------------------------------------- shared helpers
def fits(problem: Problem, model: ModelSpec, device: str, extra_bytes: float = 0.0) -> bool:
    """Whether ``model``'s weights plus its KV cache at the problem's context fit in ``device``'s memory."""
    dev = problem.platform.device(device)
    need = model.weight_bytes() + model.kv_bytes_per_token() * (problem.context + 1) * problem.batch + extra_bytes
    return need <= dev.mem_capacity_bytes


def fitting_devices(problem: Problem, model: ModelSpec, extra_bytes: float = 0.0) -> tuple[str, ...]:
    """Devices of the platform that hold ``model`` (accelerators first, as the platform lists them)."""
    order = sorted(problem.platform.devices, key=lambda n: ("gpu", "npu", "cpu").index(problem.platform.devices[n].kind))
    return tuple(d for d in order if fits(problem, model, d, extra_bytes))


def default_device(problem: Problem, model: ModelSpec) -> str:
    """The accelerator if the model fits there, else the first device it fits on, else the accelerator."""
    found = fitting_devices(problem, model)
    accel = problem.platform.accelerator.name
    if accel in found or not found:
        return accel
    return found[0]


def require_fit(problem: Problem, model: ModelSpec, device: str, what: str = "model", extra_bytes: float = 0.0) -> None:
    """One line if ``model`` does not fit on ``device`` (weights + KV cache)."""
    if not fits(problem, model, device, extra_bytes):
        dev = problem.platform.device(device)
        need = model.weight_bytes() + model.kv_bytes_per_token() * (problem.context + 1) * problem.batch + extra_bytes
        raise HetSpecError(f"{what} {model.name} needs {need / 1e9:.1f} GB but device {device} of "
                           f"{problem.platform.name} has {dev.mem_capacity_gb:g} GB (try --method offload)")


def co_resident(problem: Problem, device: str, *models: ModelSpec, extra_bytes: float = 0.0,
                tokens: int | None = None) -> bool:
    """Whether ``models`` (and ``extra_bytes`` of other weights) stay in ``device``'s last-level cache
    together: a step that runs a draft and a target (or a target and Medusa heads) keeps either one
    resident only if all of them fit, since each evicts the other every round. ``tokens``: the tokens
    each of their passes feeds, where all feed the same (:meth:`hwmodels.platform.Device.holds`)."""
    from sim.step_graph import weight_working_set

    return problem.platform.device(device).holds(sum(weight_working_set(m) for m in models) + extra_bytes, tokens)


def host_seconds(problem: Problem, method: str, device: str, passes=0.0, nodes=0.0, forwards: bool = True):
    """Host-side work of one step of ``method``'s real decode loop on ``device``: the platform's
    calibrated loop costs of that device (:class:`hwmodels.platform.LoopCosts`: ``<method>_step`` +
    ``<method>_pass`` per draft pass + ``<method>_node`` per verified token), 0 on platforms that do
    not describe them (every preset); sized by the target's LM head (:meth:`hwmodels.platform.LoopCosts.costs_for`).
    A roofline device adds what the loop's forwards took beyond its price of them (``<method>_forward_<term>``)
    where the step is that loop's (``forwards``: not another strategy's loop borrowing its host costs); a
    profiled one measured its passes inside the loop. Vectorised over ``passes`` and ``nodes``."""
    from hwmodels.platform import FORWARD_COST
    from sim.op_timing import is_profiled

    costs = problem.platform.loop_costs_us(device, problem.model.lm_head_params)
    passes, nodes = np.asarray(passes, dtype=float), np.asarray(nodes, dtype=float)
    own = forwards and not is_profiled(problem.platform.device(device))
    prefixes = [f"{method}_"] + ([f"{method}{FORWARD_COST}"] if own else [])
    return 1e-6 * sum(costs.get(f"{p}step", 0.0) + costs.get(f"{p}pass", 0.0) * passes
                      + costs.get(f"{p}node", 0.0) * nodes for p in prefixes)
