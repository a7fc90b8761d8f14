"""What a strategy hands the engine for one decode step: tasks on devices and links, and tokens.

A :class:`StepPlan` is a small DAG of :class:`Task` objects in topological order (every
dependency names an *earlier* task, so a plan is acyclic by construction and its order is the
tie-break order). Three kinds of task:

- ``compute``: work on a device (``resource`` = a device name of the platform). Alone on its
  memory domain it takes ``fixed_s + max(compute_s, nbytes / standalone_bw(device))`` (the
  roofline, :mod:`hwmodels.roofline`); ``fixed_s`` is launch / dispatch overhead, which needs no
  bandwidth. While other devices of the same memory domain stream at the same time the engine
  shares the domain's bandwidth between them (:mod:`sim.engine`).
- ``transfer``: bytes over a link (``resource`` = a link name): ``fixed_s`` (the link latency,
  filled in by :func:`transfer_task`) plus ``nbytes`` over the link's achievable bandwidth. A
  storage link carries weight loads (phase ``load``).
- ``delay``: a fixed time (``fixed_s``) that holds no resource: a page sync, a barrier, a
  host-side step the model does not price otherwise.

The helpers below build tasks from priced operators so that a strategy never re-derives a
roofline: :func:`op_task` (one operator, all its ``count`` instances, or one instance),
:func:`graph_tasks` (a whole step graph on one device, in order), :func:`transfer_task`,
:func:`delay_task`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hwmodels.contention import standalone_bw
from hwmodels.errors import HetSpecError
from hwmodels.platform import Platform
from hwmodels.roofline import roofline_time
from sim.op_timing import forward_device, is_profiled, op_time, priced_ops
from sim.step_graph import Op, StepGraph, weight_working_set
from sim.trace import PHASES

TASK_KINDS = ("compute", "transfer", "delay")


@dataclass(frozen=True)
class Task:
    """One unit of work the engine schedules.

    ``name`` is unique inside its plan; ``deps`` name earlier tasks of the same plan that must
    finish first. Among tasks ready at the same instant on the same resource, the lower
    ``priority`` starts first, then the one earlier in the plan. ``op`` is the operator name
    shown in the trace (defaults to ``name``); ``device`` is the trace row (defaults to
    ``resource``, or ``"host"`` for a delay). ``flops`` is informational (traces, reports).
    """

    name: str
    kind: str
    resource: str
    phase: str
    compute_s: float = 0.0
    nbytes: float = 0.0
    fixed_s: float = 0.0
    deps: tuple[str, ...] = ()
    priority: int = 0
    op: str = ""
    device: str = ""
    flops: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in TASK_KINDS:
            raise HetSpecError(f"task {self.name}: kind {self.kind!r} unknown; valid: {', '.join(TASK_KINDS)}")
        if self.phase not in PHASES:
            raise HetSpecError(f"task {self.name}: phase {self.phase!r} unknown; valid: {', '.join(PHASES)}")
        if min(self.compute_s, self.nbytes, self.fixed_s) < 0:
            raise HetSpecError(f"task {self.name}: compute_s, nbytes and fixed_s must be >= 0")
        if self.kind == "delay" and self.resource:
            raise HetSpecError(f"task {self.name}: a delay holds no resource (got {self.resource!r})")
        if self.kind != "delay" and not self.resource:
            raise HetSpecError(f"task {self.name}: a {self.kind} task needs a resource")
        object.__setattr__(self, "deps", tuple(self.deps))
        if not self.device:
            object.__setattr__(self, "device", self.resource or "host")

    def with_deps(self, *deps: str) -> "Task":
        return _replace(self, deps=tuple(dict.fromkeys(self.deps + tuple(deps))))

    def alone_s(self, platform: Platform) -> float:
        """Duration with nothing else running (the roofline / link time)."""
        if self.kind == "delay":
            return self.fixed_s
        if self.kind == "transfer":
            link = link_by_name(platform, self.resource)
            return self.fixed_s + self.nbytes / (link.bw_bytes_per_s * link.efficiency)
        bw = standalone_bw(platform, self.resource)
        return self.fixed_s + max(self.compute_s, self.nbytes / bw)


@dataclass(frozen=True)
class StepPlan:
    """The tasks of one decode step and its token counts.

    ``tokens_accepted`` is what the step adds to the output: an integer when the strategy drew
    the outcome from a random generator, the expectation (a float) when it did not; the engine
    turns expectations into integers that keep the running mean (see :mod:`sim.engine`).
    ``tokens_proposed`` is the number of speculative tokens offered for verification.
    The trace record of phase ``count_phase`` carries the counts (the trace counting rule,
    :mod:`sim.trace`); on the device ``count_device``, or, if empty, the device of the last task
    of that phase to finish.
    """

    tasks: tuple[Task, ...]
    tokens_accepted: float
    tokens_proposed: int = 0
    count_phase: str = "verify"
    count_device: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "tasks", tuple(self.tasks))
        if not self.tasks:
            raise HetSpecError("a step plan needs at least one task")
        seen: set[str] = set()
        for task in self.tasks:
            if task.name in seen:
                raise HetSpecError(f"step plan: task name {task.name!r} appears twice")
            for dep in task.deps:
                if dep not in seen:
                    raise HetSpecError(f"step plan: task {task.name!r} depends on {dep!r}, which is not an earlier task")
            seen.add(task.name)
        if self.count_phase not in {t.phase for t in self.tasks}:
            raise HetSpecError(f"step plan: count_phase {self.count_phase!r} has no task")
        if self.tokens_accepted < 1:
            raise HetSpecError(f"step plan: a step produces at least one token (got {self.tokens_accepted})")

    def task(self, name: str) -> Task:
        for t in self.tasks:
            if t.name == name:
                return t
        raise HetSpecError(f"step plan has no task {name!r}")

    @property
    def last(self) -> str:
        return self.tasks[-1].name

    def serial_s(self, platform: Platform) -> float:
        """Sum of the tasks' standalone durations: the step time if nothing overlapped."""
        return sum(t.alone_s(platform) for t in self.tasks)


def _replace(task: Task, **changes) -> Task:
    from dataclasses import replace

    return replace(task, **changes)


def link_by_name(platform: Platform, name: str):
    for link in platform.links:
        if link.name == name:
            return link
    raise HetSpecError(f"platform {platform.name} has no link {name!r}; links: "
                       f"{', '.join(l.name for l in platform.links) or '(none)'}")


# ---------------------------------------------------------------------- task builders
def op_task(op: Op, platform: Platform, device: str, dtype: str, name: str, phase: str,
            deps: Sequence[str] = (), instances: int | None = None, priority: int = 0,
            flops_scale: float = 1.0, bytes_scale: float = 1.0, resident: bool = False) -> Task:
    """A compute task for ``instances`` instances of ``op`` (default: all ``op.count``) on ``device``.

    The roofline of :func:`hwmodels.roofline.roofline_time` at the device's standalone
    bandwidth gives the compute time and the fixed overhead; the bytes are kept as work so the
    engine can share the memory domain. ``flops_scale`` / ``bytes_scale`` price a fraction of
    the operator (e.g. a column split) without building a new :class:`Op`. ``resident``: the
    weights sit in the device's last-level cache (:meth:`Device.holds`); the cache-bound time is
    then the task's compute time and it streams nothing from DRAM (no memory-domain contention).
    """
    dev = platform.device(device)
    n = op.count if instances is None else instances
    flops = op.flops * flops_scale
    nbytes = op.bytes * bytes_scale
    if is_profiled(dev):
        return _profiled_task(op, platform, device, dtype, name, phase, deps, n, priority, flops_scale, bytes_scale,
                              resident)
    timing = roofline_time(dev, flops, nbytes, dtype, tokens=op.tokens or None, density=op.density,
                           launches=op.launches, bw_bytes_per_s=standalone_bw(platform, device), resident=resident,
                           rows=op.weight_rows, batched=op.batched, masked_pass=op.masked_pass)
    if resident and dev.resident_bw_bytes_per_s() is not None:
        return Task(name=name, kind="compute", resource=device, phase=phase,
                    compute_s=max(timing.compute_s, timing.memory_s) * n, nbytes=0.0, fixed_s=timing.overhead_s * n,
                    deps=tuple(deps), priority=priority, op=op.name, flops=flops * n)
    return Task(name=name, kind="compute", resource=device, phase=phase, compute_s=timing.compute_s * n,
                nbytes=nbytes * n, fixed_s=timing.overhead_s * n, deps=tuple(deps), priority=priority,
                op=op.name, flops=flops * n)


def _profiled_task(op: Op, platform: Platform, device: str, dtype: str, name: str, phase: str, deps: Sequence[str],
                   n: int, priority: int, flops_scale: float, bytes_scale: float, resident: bool) -> Task:
    """:func:`op_task` on a profiled device (:mod:`sim.op_timing`): a measured call is its launch (fixed) and
    its kernel time (body), whose DRAM demand is its bytes over that time, at most the device's standalone
    bandwidth, so alone it takes exactly the measured time; a fallback operator is the roofline task."""
    bw = standalone_bw(platform, device)
    timing, source = op_time(op, platform.device(device), dtype, bw, resident, flops_scale, bytes_scale)
    flops, nbytes = op.flops * flops_scale, op.bytes * bytes_scale
    if source.startswith("profile"):
        nbytes = min(nbytes, timing.compute_s * bw)
    return Task(name=name, kind="compute", resource=device, phase=phase, compute_s=timing.compute_s * n,
                nbytes=nbytes * n, fixed_s=timing.overhead_s * n, deps=tuple(deps), priority=priority, op=op.name,
                flops=flops * n)


def graph_tasks(graph: StepGraph, platform: Platform, device: str, prefix: str, phase: str,
                deps: Sequence[str] = (), per_layer: bool = False, priority: int = 0,
                resident: bool | None = None) -> list[Task]:
    """The operators of ``graph`` on ``device`` as a chain of tasks (each after the previous).

    ``per_layer=False`` emits one task per operator covering all its instances (a compact plan
    whose total equals the priced step); ``per_layer=True`` emits the layer operators layer by
    layer (``<prefix>/L<i>/<op>``), the order a real forward runs in, for readable traces.
    The first task depends on ``deps``. ``resident`` overrides the cache residency of the model's
    weights (default: whether they fit the device's cache on their own).
    """
    out: list[Task] = []
    last: tuple[str, ...] = tuple(deps)
    dev, why = forward_device(platform.device(device), graph.model, graph.dtype)
    if why:                        # a forward the profile does not price: the calibrated roofline's tasks
        platform = platform.with_device(dev)
    if resident is None:
        resident = dev.holds(weight_working_set(graph.model, graph.dtype))

    def add(op: Op, name: str, instances: int | None) -> None:
        nonlocal last
        out.append(op_task(op, platform, device, graph.dtype, name, phase, last, instances, priority,
                           resident=resident))
        last = (name,)

    ops = priced_ops(graph, dev)   # + the eager model's extra operators on a profiled device in eager mode
    if not per_layer:
        for op in ops:
            add(op, f"{prefix}/{op.name}", None)
        return out
    for op in (o for o in ops if o.section == "pre"):
        add(op, f"{prefix}/{op.name}", None)
    layer_ops = [o for o in ops if o.section == "layer"]
    n_layers = max((op.count for op in layer_ops), default=0)
    for layer in range(n_layers):
        for op in layer_ops:
            add(op, f"{prefix}/L{layer}/{op.name}", 1)
    for op in (o for o in ops if o.section == "post"):
        add(op, f"{prefix}/{op.name}", None)
    return out


def ops_tasks(ops: Iterable[Op], platform: Platform, device: str, dtype: str, prefix: str, phase: str,
              deps: Sequence[str] = (), priority: int = 0, resident: bool = False) -> list[Task]:
    """A chain of tasks for arbitrary operators (e.g. Medusa heads) on one device."""
    out: list[Task] = []
    last: tuple[str, ...] = tuple(deps)
    for op in ops:
        name = f"{prefix}/{op.name}"
        out.append(op_task(op, platform, device, dtype, name, phase, last, None, priority, resident=resident))
        last = (name,)
    return out


def transfer_task(platform: Platform, src: str, dst: str, nbytes: float, name: str, phase: str = "transfer",
                  deps: Sequence[str] = (), kind: str | None = None, priority: int = 0) -> Task:
    """``nbytes`` from ``src`` to ``dst`` over the platform's link between them (latency included)."""
    link = platform.link(src, dst, kind)
    return Task(name=name, kind="transfer", resource=link.name, phase=phase, nbytes=float(nbytes),
                fixed_s=link.latency_s if nbytes > 0 else 0.0, deps=tuple(deps), priority=priority, op=name.split("/")[-1])


def delay_task(name: str, seconds: float, phase: str = "sync", deps: Sequence[str] = (), device: str = "host",
               priority: int = 0) -> Task:
    """A fixed wait that holds no resource (page sync, barrier); shown on trace row ``device``."""
    return Task(name=name, kind="delay", resource="", phase=phase, fixed_s=float(seconds), deps=tuple(deps),
                priority=priority, op=name.split("/")[-1], device=device)
