"""Time a step graph on one device: the roofline model (:mod:`hwmodels.roofline`), or the device's measured
profile where its platform file selects one (:mod:`sim.op_timing`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from hwmodels.platform import Device
from hwmodels.roofline import OpTiming, roofline_time
from sim.op_timing import forward_device, is_profiled, op_time, priced_ops
from sim.step_graph import Op, StepGraph, weight_working_set


@dataclass(frozen=True)
class OpPrice:
    op: Op
    timing: OpTiming      # one instance
    source: str = "roofline"   # or "profile", "fallback: <why>" on a profiled device (sim.op_timing)

    @property
    def time_s(self) -> float:
        """All ``count`` instances of the operator in the step."""
        return self.timing.time_s * self.op.count

    def to_dict(self) -> dict:
        op, t, n = self.op, self.timing, self.op.count
        return {
            "name": op.name, "kind": op.kind, "section": op.section, "count": n, "tokens": op.tokens,
            "flops": op.flops * n, "bytes": op.bytes * n, "weight_bytes": op.weight_bytes * n,
            "weight_type": op.weight_type,
            "act_bytes": op.act_bytes * n, "kv_bytes": op.kv_bytes * n,
            "intensity": round(op.intensity, 4), "density": op.density,
            "time_s": self.time_s, "compute_s": t.compute_s * n, "memory_s": t.memory_s * n,
            "overhead_s": t.overhead_s * n, "bound": "measured" if self.source.startswith("profile") else t.bound,
            "source": self.source,
        }


@dataclass(frozen=True)
class StepPrice:
    graph: StepGraph
    device: Device
    ops: tuple[OpPrice, ...]

    @property
    def total_s(self) -> float:
        return sum(p.time_s for p in self.ops)

    def time_of(self, *names: str) -> float:
        return sum(p.time_s for p in self.ops if p.op.name in names)

    def to_dict(self) -> dict:
        g = self.graph
        return {
            "model": g.model.name, "device": self.device.name, "tokens": g.tokens, "context": g.context,
            "batch": g.batch, "dtype": g.dtype, "total_s": self.total_s,
            "total_flops": g.total_flops, "total_bytes": g.total_bytes,
            "ops": [p.to_dict() for p in self.ops],
        }


def price_op(op: Op, device: Device, dtype: str, bw_bytes_per_s: float | None = None,
             resident: bool = False) -> OpPrice:
    if is_profiled(device):
        return OpPrice(op, *op_time(op, device, dtype, bw_bytes_per_s, resident))
    return OpPrice(op, roofline_time(device, op.flops, op.bytes, dtype, tokens=op.tokens or None,
                                     density=op.density, launches=op.launches, bw_bytes_per_s=bw_bytes_per_s,
                                     resident=resident, rows=op.weight_rows, batched=op.batched,
                                     masked_pass=op.masked_pass))


def price_step(graph: StepGraph, device: Device, bw_bytes_per_s: float | None = None) -> StepPrice:
    """Every operator of ``graph`` timed on ``device`` (bandwidth: the device alone by default;
    cache-resident when the model's weights fit in the device's last-level cache); a forward the device's
    profile does not price is priced by its calibrated roofline (:func:`sim.op_timing.forward_device`), every
    operator's source saying so."""
    resident = device.holds(weight_working_set(graph.model, graph.dtype))
    priced, why = forward_device(device, graph.model, graph.dtype)
    ops = tuple(price_op(op, priced, graph.dtype, bw_bytes_per_s, resident) for op in priced_ops(graph, priced))
    if why:
        ops = tuple(replace(p, source=f"fallback: {why}") for p in ops)
    return StepPrice(graph, device, ops)


#: What each kind of fallback says in :func:`fallback_note`, by a phrase of its ``fallback: <why>`` source.
_FALLBACK_KINDS = (("dtype", "at another dtype than the profile's"), ("share of the operator", "shares of an operator"),
                   ("outside the profiled", "outside the profiled token counts or keys"),
                   ("not profiled", "shapes not in the profile"), ("", "without a profile key"))
_NO_TABLE = "of kinds the profile has no row of"
_SHAPES = "shapes not in the profile"


def fallback_note(price: StepPrice, model: str) -> str | None:
    """One line on the operators of a step priced on a profiled device that its profile does not cover (their
    ``fallback: <why>`` source), grouped by why, and what would price them by measurement: for shapes not in
    the profile, ``hetspec calibrate --models <model>`` (``model`` as the user named it) on the device the
    profile measured; for another dtype, ``--dtype`` of the profile's. None when every operator was measured
    (or the device is priced by the roofline)."""
    import re

    from sim.op_timing import timing_of

    timing = timing_of(price.device)
    fell = [p for p in price.ops if p.source.startswith("fallback")]
    if timing is None or not fell:
        return None
    groups: dict[str, list[str]] = {}
    profile = timing.profile
    tables = {table for table, _ in profile.tables}
    for p in fell:
        kind = next(text for phrase, text in _FALLBACK_KINDS if phrase in p.source)
        if kind == _SHAPES and p.op.table not in tables:    # no shape of it measured: a larger profile has none
            kind = _NO_TABLE
        if p.op.name not in groups.setdefault(kind, []):
            groups[kind].append(p.op.name)
    parts = [f"{len(names)} {kind} ({', '.join(names)})" for kind, names in groups.items()]
    hints = []
    if _SHAPES in groups:
        # the torch device the profile measured, as `hetspec calibrate --device` writes it: "<name> (cpu)"
        found = re.search(r"\((cpu\d*|cuda(?::\d+)?)\)\s*$", profile.device or "")
        device = found.group(1) if found else ""
        flag = "" if device == "cpu" else f" --device {device or 'D'}"
        hints.append(f"`hetspec calibrate{flag} --models {model}` would profile them"
                     + ("" if device else " on the device the profile measured"))
    if "at another dtype than the profile's" in groups:
        hints.append(f"--dtype {profile.dtype} prices them by the profile")
    names = {p.op.name for p in fell}
    if len(fell) == len(price.ops) and timing.calibrated_roofline:
        how = "the calibrated roofline, the whole forward"
    else:
        how = "the roofline" + ("; forward_rest by the profile's nearest rest" if "forward_rest" in names else "")
    return (f"fallback: {len(names)} of {len(price.ops)} operators priced without a measured row of "
            f"{Path(profile.path).name} ({how}): " + "; ".join(parts) + ("; " + "; ".join(hints) if hints else ""))
