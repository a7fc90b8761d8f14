"""What-if scalings of a problem: a platform with faster or slower memory, compute or links, and an
acceptance model whose drafts are accepted more or less often.

These are the questions people ask before they buy hardware or pick a method ("what if PCIe were
twice as fast?", "what if the draft accepted 10 % more?"). Each scaling is a plain function that
returns a new frozen object; the optimizer then prices it as it prices a preset.

- **memory bandwidth**: every device's ``mem_bw_gbps`` and every memory domain's ``bw_gbps`` (a
  shared DRAM caps what its devices draw together, so both move); a device's last-level cache
  (``cache_bw_gbps``) is on-chip and stays;
- **peak FLOP/s**: every peak of every device (derived peaks follow their source);
- **link bandwidth**: every link (PCIe, unified-memory sync, storage, Ethernet);
- **acceptance**: each probability that a drafted token is accepted is multiplied by the factor
  (capped below 1), and each mean length of an accepted run (tokens per step, tau) has its part
  beyond the one token a step always yields multiplied by it: ``1 + (L - 1) * factor``.

A device priced by a measured operator profile keeps its measured kernel times: only the roofline
numbers scale (the profile was measured on the hardware as it is).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hwmodels.errors import HetSpecError
from hwmodels.platform import Platform
from sim.acceptance import AcceptanceModel, LengthCurve

#: The range a scale factor may take: a tenth to ten times the preset's value. Beyond it a what-if
#: leaves the regime the presets' efficiencies were measured or quoted in.
SCALE_RANGE = (0.1, 10.0)
#: An acceptance probability scaled up stays below 1: a draft that is always accepted makes the
#: expected run length of a chain infinite (Omega's 1 / (1 - alpha)).
MAX_PROBABILITY = 0.999


@dataclass(frozen=True)
class WhatIf:
    """Scale factors (1 = the preset as it is)."""

    mem_bw: float = 1.0
    peak_flops: float = 1.0
    link_bw: float = 1.0
    acceptance: float = 1.0

    def __post_init__(self) -> None:
        lo, hi = SCALE_RANGE
        for name in ("mem_bw", "peak_flops", "link_bw", "acceptance"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not lo <= value <= hi:
                raise HetSpecError(f"what-if scale {name} must be a number in [{lo:g}, {hi:g}] (got {value!r})")

    @property
    def scales_platform(self) -> bool:
        return (self.mem_bw, self.peak_flops, self.link_bw) != (1.0, 1.0, 1.0)


def scale_platform(platform: Platform, whatif: WhatIf) -> Platform:
    """``platform`` with its memory bandwidth, peaks and links scaled (the same object when nothing scales)."""
    if not whatif.scales_platform:
        return platform
    devices = {name: replace(d, mem_bw_gbps=d.mem_bw_gbps * whatif.mem_bw,
                             peak_tflops={dt: v * whatif.peak_flops for dt, v in d.peak_tflops.items()},
                             sources=_noted(d.sources, {"mem_bw_gbps": whatif.mem_bw,
                                                        **{f"peak_tflops.{dt}": whatif.peak_flops
                                                           for dt in d.measured_peaks}}))
               for name, d in platform.devices.items()}
    links = tuple(replace(link, bw_gbps=link.bw_gbps * whatif.link_bw,
                          sources=_noted(link.sources, {"bw_gbps": whatif.link_bw})) for link in platform.links)
    domains = tuple(replace(m, bw_gbps=m.bw_gbps * whatif.mem_bw, sources=_noted(m.sources, {"bw_gbps": whatif.mem_bw}))
                    for m in platform.memory_domains)
    return replace(platform, name=f"{platform.name} {describe(whatif)}",
                   description=f"{platform.description} Scaled by a what-if {describe(whatif)}.".strip(),
                   devices=devices, links=links, memory_domains=domains)


def _noted(sources, factors: dict[str, float]) -> dict[str, str]:
    """``sources`` with each scaled number's source saying so (a platform file written from it stays honest)."""
    out = dict(sources)
    for key, factor in factors.items():
        if factor != 1.0:
            out[key] = f"{sources.get(key, 'unknown')} (x{factor:g} in a what-if)"
    return out


def _probability(p: float, factor: float) -> float:
    return min(float(p) * factor, MAX_PROBABILITY)


def _length(length: float, factor: float) -> float:
    return 1.0 + (float(length) - 1.0) * factor


def _accuracy_row(row: tuple[float, ...], factor: float) -> tuple[float, ...]:
    """One depth of Medusa accuracies scaled; the ranks are mutually exclusive, so the row's sum stays below 1."""
    scaled = [float(p) * factor for p in row]
    total = sum(scaled)
    if total > MAX_PROBABILITY:
        scaled = [p * MAX_PROBABILITY / total for p in scaled]
    return tuple(scaled)


def scale_acceptance(model: AcceptanceModel | None, factor: float) -> AcceptanceModel | None:
    """``model`` with every acceptance probability and run length scaled by ``factor`` (see the module)."""
    if model is None or factor == 1.0:
        return model
    changes: dict = {"name": f"{model.name} x{factor:g}"}
    if model.medusa_accuracy is not None:
        changes["medusa_accuracy"] = tuple(_accuracy_row(row, factor) for row in model.medusa_accuracy)
    if model.draft_alpha is not None:
        changes["draft_alpha"] = _probability(model.draft_alpha, factor)
    if model.confidence_bins is not None:
        changes["confidence_bins"] = tuple(replace(b, accept_rate=_probability(b.accept_rate, factor))
                                           for b in model.confidence_bins)
    for key in ("length_table", "chain_length_table"):
        table = getattr(model, key)
        if table is not None:
            changes[key] = tuple((w, _length(length, factor)) for w, length in table)
    if model.length_curve is not None:
        c = model.length_curve
        changes["length_curve"] = LengthCurve(intercept=_length(c.intercept, factor), slope=c.slope * factor,
                                              min_width=c.min_width, max_width=c.max_width)
    if model.alspec_hit_rate_by_layer is not None:
        changes["alspec_hit_rate_by_layer"] = tuple(_probability(p, factor) for p in model.alspec_hit_rate_by_layer)
    if model.alspec_hit_rates is not None:
        changes["alspec_hit_rates"] = {task: {lam: _probability(p, factor) for lam, p in row.items()}
                                       for task, row in model.alspec_hit_rates.items()}
    if model.tau_entries is not None:
        changes["tau_entries"] = tuple(replace(e, tau=_length(e.tau, factor)) for e in model.tau_entries)
    return replace(model, **changes)


def describe(whatif: WhatIf) -> str:
    """The scalings in a few words, e.g. ``(mem bw x2, links x0.5)``; empty when nothing scales."""
    parts = [f"{label} x{value:g}" for label, value in (("mem bw", whatif.mem_bw), ("FLOP/s", whatif.peak_flops),
                                                        ("links", whatif.link_bw), ("acceptance", whatif.acceptance))
             if value != 1.0]
    return f"({', '.join(parts)})" if parts else ""
