"""The discrete-event engine (SimPy): plays step plans on a platform and writes the trace.

Semantics (what a strategy can rely on):

1. Steps run one after another: step k+1's tasks are released when every task of step k has
   finished.
2. A task is ready when all its dependencies have finished. Each device and each link runs one
   task at a time, without preemption.
3. Order at ties is explicit, never an accident of SimPy's FIFO: a resource picks among its
   ready tasks only at the *end* of the current instant (an event scheduled after every
   normal event of that instant, :data:`_END_OF_INSTANT`), taking the lowest
   ``(task.priority, position in the plan)``. So two tasks made ready by simultaneous
   completions start in the same order whichever completion SimPy processed first.
4. A ``compute`` task first spends ``fixed_s`` (launch / dispatch overhead, no bandwidth), then
   its body: ``compute_s`` of compute and ``nbytes`` of DRAM traffic, progressing as a fluid.
   Its bandwidth *demand* is ``min(standalone bw, nbytes / compute_s)`` (a compute-bound
   operator needs only what keeps its compute units fed). Whenever the set of running bodies of
   a memory domain changes, every body's share is recomputed: if two or more devices of the
   domain stream and their demands exceed ``domain bw * contention_efficiency``, that ceiling is
   shared max-min fairly (:func:`domain_shares`); otherwise each gets its
   demand. A body progresses at rate ``min(1 / compute_s, share / nbytes)`` and its completion is
   rescheduled (a SimPy interrupt) when its share changes. Alone, a task therefore takes exactly
   its roofline time; with contention never less (shares never exceed demands).
5. A ``transfer`` takes its link's latency (``fixed_s``) plus ``nbytes`` over the link's
   achievable bandwidth; a ``delay`` takes ``fixed_s`` and holds nothing.

The run emits one :class:`~sim.trace.TraceRecord` per task (``op`` set) and, per step, phase
records (``op`` empty): one per (phase, device) and maximal stretch of touching tasks; the step's
token counts sit on the last record of the plan's ``count_phase`` (on its ``count_device``), the
counting rule of :mod:`sim.trace`. When a plan
gives an expected (fractional) token count, the engine emits integers whose running total is
``floor`` of the running expected total, so the mean over a run equals the expectation.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import simpy
from simpy.events import Event

from hwmodels.contention import share_bandwidth, standalone_bw
from hwmodels.errors import HetSpecError
from hwmodels.platform import Platform
from sim.plan import StepPlan, Task, link_by_name
from sim.trace import TraceRecord

#: SimPy schedules an event with (time, priority, id); URGENT = 0 and NORMAL = 1. Dispatch
#: decisions use 2 so they run after every normal event of the same instant.
_END_OF_INSTANT = 2
#: Remaining work below this fraction counts as done (float round-off of rescheduling).
_DONE_EPS = 1e-12
#: Two tasks of one phase on one device closer than this (seconds) share one phase record.
_TOUCH_S = 1e-12


def domain_shares(ceiling: float | None, demands: Mapping) -> dict:
    """What each of ``demands`` (bytes/s) streaming at once in one memory domain gets: its demand alone, without a
    ceiling (None) or when their sum fits under it; else the max-min fair shares of ``ceiling``
    (:func:`hwmodels.contention.share_bandwidth`)."""
    fits = ceiling is None or len(demands) <= 1 or sum(demands.values()) <= ceiling
    return dict(demands) if fits else share_bandwidth(ceiling, demands)


class _EndOfInstant(Event):
    """An event that fires after every normal event of the current simulated instant."""

    def __init__(self, env: simpy.Environment, action: Callable[[], None]):
        super().__init__(env)
        self._ok = True       # triggered successfully, as simpy's own Timeout / Initialize do
        self._value = None
        self.callbacks.append(lambda _event: action())
        env.schedule(self, priority=_END_OF_INSTANT)


@dataclass(frozen=True)
class TaskRun:
    step: int
    task: Task
    start_s: float
    end_s: float


@dataclass(frozen=True)
class EngineRun:
    """What a run produced: the trace, per-step times and tokens, and every task's interval."""

    records: tuple[TraceRecord, ...]
    step_start_s: tuple[float, ...]
    step_end_s: tuple[float, ...]
    tokens: tuple[int, ...]
    proposed: tuple[int, ...]
    task_runs: tuple[TaskRun, ...]

    @property
    def step_s(self) -> np.ndarray:
        return np.asarray(self.step_end_s) - np.asarray(self.step_start_s)

    @property
    def total_s(self) -> float:
        return self.step_end_s[-1] - self.step_start_s[0] if self.step_end_s else 0.0

    @property
    def tokens_per_s(self) -> float:
        return sum(self.tokens) / self.total_s if self.total_s > 0 else 0.0

    def runs_of(self, step: int) -> list[TaskRun]:
        return [r for r in self.task_runs if r.step == step]


@dataclass
class _Body:
    """The streaming phase of a running compute task (mutable state of one run)."""

    task: Task
    domain: str
    demand: float
    left: float = 1.0
    rate: float = 0.0
    since: float = 0.0
    process: simpy.Process | None = None


@dataclass
class _Resource:
    busy: bool = False
    ready: list = field(default_factory=list)   # heap of (priority, index, task)
    dispatch_pending: bool = False


class _Run:
    """One engine run (its state lives only for the duration of :func:`run_plans`)."""

    def __init__(self, platform: Platform, op_records: bool):
        self.platform = platform
        self.env = simpy.Environment()
        self.op_records = op_records
        self.resources: dict[str, _Resource] = {}
        self.bodies: dict[str, list[_Body]] = {}
        self.task_runs: list[TaskRun] = []
        self.standalone = {d: standalone_bw(platform, d) for d in platform.devices}
        self.domain_key = {}
        for d in platform.devices:
            dom = platform.domain_of(d)
            self.domain_key[d] = dom.name if dom is not None else f"<own:{d}>"
        self.ceiling = {dom.name: dom.bw_bytes_per_s * dom.contention_efficiency for dom in platform.memory_domains}
        self.link_bw = {l.name: l.bw_bytes_per_s * l.efficiency for l in platform.links}

    # ------------------------------------------------------------------ steps
    def play(self, plans: Callable[[int], StepPlan], steps: int):
        starts, ends, plans_played = [], [], []
        for step in range(steps):
            plan = plans(step)
            self._check(plan)
            starts.append(float(self.env.now))
            done = yield from self._step(step, plan)
            ends.append(done)
            plans_played.append(plan)
        self.result = (starts, ends, plans_played)

    def _check(self, plan: StepPlan) -> None:
        for task in plan.tasks:
            if task.kind == "compute" and task.resource not in self.platform.devices:
                raise HetSpecError(f"task {task.name}: no device {task.resource!r} on {self.platform.name}")
            if task.kind == "transfer":
                link_by_name(self.platform, task.resource)

    def _step(self, step: int, plan: StepPlan):
        index = {t.name: i for i, t in enumerate(plan.tasks)}
        waiting = [len(t.deps) for t in plan.tasks]
        dependents: list[list[int]] = [[] for _ in plan.tasks]
        for i, t in enumerate(plan.tasks):
            for d in t.deps:
                dependents[index[d]].append(i)
        finished = [self.env.event() for _ in plan.tasks]

        def on_done(i: int) -> None:
            finished[i].succeed()
            for j in dependents[i]:
                waiting[j] -= 1
                if waiting[j] == 0:
                    self._ready(step, j, plan.tasks[j], on_done)

        for i, t in enumerate(plan.tasks):
            if waiting[i] == 0:
                self._ready(step, i, t, on_done)
        yield simpy.AllOf(self.env, finished)
        return float(self.env.now)

    # ------------------------------------------------------------------ dispatch
    def _ready(self, step: int, index: int, task: Task, on_done) -> None:
        if task.kind == "delay":
            self.env.process(self._execute(step, index, task, on_done))
            return
        res = self.resources.setdefault(task.resource, _Resource())
        heapq.heappush(res.ready, (task.priority, index, task, step, on_done))
        if not res.dispatch_pending:
            res.dispatch_pending = True
            _EndOfInstant(self.env, lambda: self._dispatch(task.resource))

    def _dispatch(self, name: str) -> None:
        res = self.resources[name]
        res.dispatch_pending = False
        if res.busy or not res.ready:
            return
        _prio, index, task, step, on_done = heapq.heappop(res.ready)
        res.busy = True
        self.env.process(self._execute(step, index, task, on_done))

    def _release(self, name: str) -> None:
        res = self.resources[name]
        res.busy = False
        if res.ready and not res.dispatch_pending:
            res.dispatch_pending = True
            _EndOfInstant(self.env, lambda: self._dispatch(name))

    # ------------------------------------------------------------------ execution
    def _execute(self, step: int, index: int, task: Task, on_done):
        start = self.env.now
        if task.fixed_s > 0:
            yield self.env.timeout(task.fixed_s)
        if task.kind == "transfer" and task.nbytes > 0:
            yield self.env.timeout(task.nbytes / self.link_bw[task.resource])
        elif task.kind == "compute" and (task.compute_s > 0 or task.nbytes > 0):
            yield from self._body(task)
        self.task_runs.append(TaskRun(step, task, float(start), float(self.env.now)))
        if task.kind != "delay":
            self._release(task.resource)
        on_done(index)

    def _body(self, task: Task):
        device = task.resource
        alone = self.standalone[device]
        if task.nbytes <= 0:
            demand = 0.0
        elif task.compute_s > 0:
            demand = min(alone, task.nbytes / task.compute_s)
        else:
            demand = alone
        body = _Body(task=task, domain=self.domain_key[device], demand=demand, since=self.env.now)
        body.process = self.env.active_process
        members = self.bodies.setdefault(body.domain, [])
        members.append(body)
        self._reshare(body.domain, starting=body)
        while body.left > _DONE_EPS:
            try:
                yield self.env.timeout(body.left / body.rate)
                body.left = 0.0
            except simpy.Interrupt:
                continue
        members.remove(body)
        self._reshare(body.domain, starting=None)

    def _reshare(self, domain: str, starting: _Body | None) -> None:
        """Bring every running body of ``domain`` up to now, recompute shares, reschedule changes."""
        now = self.env.now
        members = self.bodies.get(domain, [])
        for b in members:
            if b is not starting:
                b.left = max(b.left - b.rate * (now - b.since), 0.0)
            b.since = now
        shares = domain_shares(self.ceiling.get(domain), {id(b): b.demand for b in members if b.demand > 0})
        for b in members:
            share = shares.get(id(b), 0.0)
            rates = []
            if b.task.compute_s > 0:
                rates.append(1.0 / b.task.compute_s)
            if b.task.nbytes > 0:
                rates.append(share / b.task.nbytes)
            new_rate = min(rates)
            if new_rate <= 0:
                raise HetSpecError(f"task {b.task.name}: no bandwidth to make progress")
            changed = not math.isclose(new_rate, b.rate, rel_tol=1e-12)
            b.rate = new_rate
            if changed and b is not starting and b.left > _DONE_EPS and b.process is not None \
                    and b.process is not self.env.active_process:
                b.process.interrupt("bandwidth share changed")


# ---------------------------------------------------------------------- public API
def run_plans(platform: Platform, plans: Callable[[int], StepPlan] | Sequence[StepPlan], steps: int | None = None,
              op_records: bool = True) -> EngineRun:
    """Play ``steps`` step plans on ``platform`` and return the trace and timings.

    ``plans`` is a sequence of plans (played in order) or a function ``step -> StepPlan``
    (called once per step, so a strategy can draw each step's outcome). ``op_records=False``
    leaves the per-task records out of the trace (the per-step phase records stay).
    """
    if not callable(plans):
        plan_list = list(plans)
        steps = len(plan_list) if steps is None else steps
        if steps > len(plan_list):
            raise HetSpecError(f"asked for {steps} steps but got {len(plan_list)} plans")
        provider = plan_list.__getitem__
    else:
        provider = plans
    if steps is None or steps < 1:
        raise HetSpecError(f"steps must be >= 1 (got {steps})")
    run = _Run(platform, op_records)
    run.env.process(run.play(provider, steps))
    run.env.run()
    starts, ends, played = run.result
    tokens, proposed = _integer_tokens(played)
    records = _records(run.task_runs, played, tokens, proposed, op_records)
    return EngineRun(records=tuple(records), step_start_s=tuple(starts), step_end_s=tuple(ends),
                     tokens=tuple(tokens), proposed=tuple(proposed), task_runs=tuple(run.task_runs))


def _integer_tokens(plans: Sequence[StepPlan]) -> tuple[list[int], list[int]]:
    """Integer tokens per step: drawn counts as they are; an expectation so that the running total
    is floor(running expected total) (at least one token per step)."""
    tokens, proposed = [], []
    expected_total, emitted = 0.0, 0
    for plan in plans:
        value = float(plan.tokens_accepted)
        expected_total += value
        n = int(value) if value.is_integer() else max(int(math.floor(expected_total + 1e-9)) - emitted, 1)
        emitted += n
        tokens.append(n)
        proposed.append(int(plan.tokens_proposed))
    return tokens, proposed


def _phase_spans(runs: Sequence[TaskRun]) -> list[tuple[str, str, float, float]]:
    """Per (phase, device), the maximal intervals covered by its tasks (touching ones merged)."""
    spans: list[tuple[str, str, float, float]] = []
    by_key: dict[tuple[str, str], list[TaskRun]] = {}
    for r in runs:
        by_key.setdefault((r.task.phase, r.task.device), []).append(r)
    for (phase, device), rs in by_key.items():
        rs = sorted(rs, key=lambda r: (r.start_s, r.end_s))
        lo, hi = rs[0].start_s, rs[0].end_s
        for r in rs[1:]:
            if r.start_s <= hi + _TOUCH_S:
                hi = max(hi, r.end_s)
            else:
                spans.append((phase, device, lo, hi))
                lo, hi = r.start_s, r.end_s
        spans.append((phase, device, lo, hi))
    return sorted(spans, key=lambda sp: (sp[2], sp[3], sp[0], sp[1]))


def _records(runs: Sequence[TaskRun], plans: Sequence[StepPlan], tokens: Sequence[int], proposed: Sequence[int],
             op_records: bool) -> list[TraceRecord]:
    out: list[TraceRecord] = []
    by_step: dict[int, list[TaskRun]] = {}
    for r in runs:
        by_step.setdefault(r.step, []).append(r)
    for step, plan in enumerate(plans):
        step_runs = sorted(by_step.get(step, []), key=lambda r: (r.start_s, r.end_s))
        counted = [r for r in step_runs if r.task.phase == plan.count_phase]
        count_device = plan.count_device or max(counted, key=lambda r: r.end_s).task.device
        spans = _phase_spans(step_runs)
        carrier = [i for i, sp in enumerate(spans) if sp[:2] == (plan.count_phase, count_device)]
        if not carrier:
            raise HetSpecError(f"step plan: no {plan.count_phase} task on {count_device} to carry the token counts")
        for i, (phase, device, lo, hi) in enumerate(spans):
            carries = i == carrier[-1]   # the last such span: the one that decides the step
            out.append(TraceRecord(step=step, phase=phase, device=device, start_s=lo, end_s=hi,
                                   tokens_proposed=proposed[step] if carries else 0,
                                   tokens_accepted=tokens[step] if carries else 0))
        if op_records:
            out.extend(TraceRecord(step=step, phase=r.task.phase, device=r.task.device, start_s=r.start_s,
                                   end_s=r.end_s, op=r.task.op or r.task.name) for r in step_runs)
    return out


# ---------------------------------------------------------------------- strategies on the engine
@dataclass(frozen=True)
class Simulation:
    """An engine run of one method's configuration, next to its closed form."""

    method: str
    config: object          # the resolved StrategyConfig
    run: EngineRun
    estimate: object        # the closed-form Estimate

    @property
    def engine_step_s(self) -> float:
        return float(np.mean(self.run.step_s))

    @property
    def closed_form_step_s(self) -> float:
        return float(self.estimate.step_s)

    @property
    def step_diff_pct(self) -> float:
        """(engine - closed form) / closed form, in percent: what overlap and contention change."""
        return 100.0 * (self.engine_step_s - self.closed_form_step_s) / self.closed_form_step_s

    def summary(self) -> dict:
        return {
            "method": self.method, "steps": len(self.run.tokens), "tokens": int(sum(self.run.tokens)),
            "engine_step_s": self.engine_step_s, "closed_form_step_s": self.closed_form_step_s,
            "step_diff_pct": self.step_diff_pct, "engine_tokens_per_s": self.run.tokens_per_s,
            "closed_form_tokens_per_s": self.estimate.tokens_per_s,
            "expected_tokens_per_step": self.estimate.tokens_per_step,
            "mean_tokens_per_step": float(np.mean(self.run.tokens)),
        }


def simulate(problem, method: str, config=None, steps: int = 10, seed: int | None = None, per_layer: bool = False,
             op_records: bool = True) -> Simulation:
    """Run ``steps`` decode steps of ``method`` (``config``: a StrategyConfig, default the method's
    default) on the engine. ``seed`` draws each step's acceptance; None uses the expectation."""
    from sim.strategies import get_strategy

    strategy = get_strategy(method)
    config = strategy.resolve(problem, config if config is not None else strategy.default_config(problem))
    rng = None if seed is None else np.random.default_rng(seed)
    run = run_plans(problem.platform, lambda step: strategy.plan(problem, config, rng, per_layer), steps, op_records)
    return Simulation(method=method, config=config, run=run, estimate=strategy.estimate(problem, config))
