"""The simulator's numeric options (``--option NAME=VALUE`` of ``hetspec predict`` / ``simulate`` / ``sweep``; the
strategies' ``knob_help`` says what each means) and the ranges they must fall in (:func:`check_option`). The
decode methods' knobs, one name each, are :mod:`sim.knobs`."""

from __future__ import annotations

from dataclasses import dataclass

from hwmodels.errors import HetSpecError


@dataclass(frozen=True)
class OptionRange:
    """What a numeric ``--option NAME=VALUE`` may be: an integer or any finite number, within [low, high];
    ``above``: strictly greater than it (a size or a budget)."""

    low: float | None = None
    high: float | None = None
    integer: bool = False
    above: float | None = None

    def text(self) -> str:
        kind = "an integer" if self.integer else "a number"
        if self.above is not None:
            return f"{kind} > {self.above:g}"
        if self.low is not None and self.high is not None:
            return f"{kind} in [{self.low:g}, {self.high:g}]"
        return f"{kind} >= {self.low:g}" if self.low is not None else f"{kind} <= {self.high:g}"


#: The simulator's numeric options (the strategies' ``knob_help`` says what each means); a value outside
#: its range is refused before anything is priced, never priced into a meaningless number.
OPTION_RANGES: dict[str, OptionRange] = {
    "lam": OptionRange(low=0.0),                        # ALSpec's norm-check threshold (0 = exact)
    "window": OptionRange(low=1, integer=True),          # ALSpec's sink and window size S
    "hit_rate": OptionRange(low=0.0, high=1.0),          # a probability
    "tp": OptionRange(low=1, integer=True),
    "sp": OptionRange(low=0, high=1, integer=True),      # a switch
    "fd_fixed_us": OptionRange(low=0.0),
    "medusa_heads": OptionRange(low=1, integer=True),
    "memory_budget_gb": OptionRange(above=0.0),
    "mem_budget_gb": OptionRange(above=0.0),
    "pipeline": OptionRange(low=0, high=1, integer=True),  # a switch
    "staging": OptionRange(low=1, integer=True),
    "drafter_blocks": OptionRange(low=1, integer=True),
    "top_k": OptionRange(low=1, integer=True),
    "temperature": OptionRange(low=0.0, high=1.0),      # Dovetail's tables: the tau column at 0 or 1
    "tau": OptionRange(above=0.0),                      # mean tokens per round
    "target_gpu_layers": OptionRange(low=0, integer=True),
    "resident_layers": OptionRange(low=0, integer=True),
    "overlap_beta": OptionRange(low=0.0, high=1.0),     # Dovetail eq. (4)
}


def check_option(name: str, value):
    """``--option name=value`` checked: a numeric option within :data:`OPTION_RANGES`, and no option
    given a non-finite number (``nan``, ``inf``); returns ``value``."""
    import math

    numbers = value if isinstance(value, tuple) else (value,)
    rule = OPTION_RANGES.get(name)
    for v in numbers:
        if isinstance(v, float) and not math.isfinite(v):
            raise HetSpecError(f"--option {name}={v}: not a finite number")
        if rule is None:
            continue
        ok = isinstance(v, int | float) and not isinstance(v, bool) and (not rule.integer or isinstance(v, int))
        if ok and rule.above is not None:
            ok = v > rule.above
        if ok and rule.low is not None:
            ok = v >= rule.low
        if ok and rule.high is not None:
            ok = v <= rule.high
        if not ok:
            raise HetSpecError(f"--option {name}={v}: must be {rule.text()}")
    return value
