"""The command line's numbers and lists, checked in one place (torch-free, milliseconds).

Every command checks its counts, seeds, ratios and lists here after parsing, so that a bad value is one
line naming the flag and its range: an integer is an integer (``True`` is not one), a float is finite
(``nan`` and ``inf`` are refused), a list is not empty, and each value is within the flag's range.
"""

from __future__ import annotations

import math
import re
from numbers import Integral, Real

from hwmodels.errors import HetSpecError

#: Largest seed: numpy's and Python's generators take any non-negative integer, torch's ``manual_seed``
#: up to 2**64; one range for every command keeps a seed reusable across them.
SEED_MAX = 2**32 - 1
#: Values one list flag may expand to (``1-100000000`` would otherwise build a list of 10^8 ints).
MAX_LIST_VALUES = 100_000
#: ``LOW-HIGH`` inside a list.
RANGE = re.compile(r"(\d+)\s*-\s*(\d+)")


def _range_text(low, high) -> str:
    if low is not None and high is not None:
        return f"in [{low}, {high}]"
    return f">= {low}" if low is not None else f"<= {high}"


def check_int(value, flag: str, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an int within [``low``, ``high``] (None: unbounded), else one line naming ``flag``."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise HetSpecError(f"{flag} must be an integer (got {value!r})")
    if (low is not None and value < low) or (high is not None and value > high):
        raise HetSpecError(f"{flag} must be {_range_text(low, high)} (got {value})")
    return int(value)


def check_seed(value, flag: str = "--seed") -> int | None:
    """A seed (None: no seed) in [0, :data:`SEED_MAX`]."""
    return None if value is None else check_int(value, flag, 0, SEED_MAX)


def check_float(value, flag: str, low: float | None = None, high: float | None = None,
                above: float | None = None) -> float:
    """``value`` as a finite float within [``low``, ``high``] and, with ``above``, strictly greater than it."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise HetSpecError(f"{flag} must be a number (got {value!r})")
    value = float(value)
    if not math.isfinite(value):
        raise HetSpecError(f"{flag} must be a finite number (got {value})")
    if above is not None and not value > above:
        raise HetSpecError(f"{flag} must be > {above:g} (got {value:g})")
    if (low is not None and value < low) or (high is not None and value > high):
        raise HetSpecError(f"{flag} must be {_range_text(low, high)} (got {value:g})")
    return value


def check_text(value: str | None, flag: str) -> str | None:
    """A text flag given as an empty (or blank) string is one line, never the default."""
    if value is not None and not str(value).strip():
        raise HetSpecError(f"{flag} is empty; give a value or leave the flag out")
    return value


def name_list(text: str, flag: str) -> list[str]:
    """``"a,b"`` -> ["a", "b"]; an empty list is one line."""
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise HetSpecError(f"{flag} is empty; give names separated by commas")
    return items


def int_list(text: str, flag: str, low: int | None = None, high: int | None = None, what: str = "integers",
             example: str = "1-8,16") -> tuple[int, ...]:
    """``"1-8,16,32"`` -> (1, 2, ..., 8, 16, 32), duplicates dropped; each value within [``low``, ``high``].

    A malformed, empty or too long list (more than :data:`MAX_LIST_VALUES` values), or a value out of
    range, is one line naming ``flag``."""
    out: list[int] = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        span = RANGE.fullmatch(part)
        try:
            values = range(int(span[1]), int(span[2]) + 1) if span else (int(part),)
        except ValueError:
            values = ()
        if not values:                           # not an integer, or a range whose high is below its low
            raise HetSpecError(f"{flag} {text!r}: give {what} or ranges LOW-HIGH separated by commas, "
                               f"e.g. {example}")
        if len(out) + len(values) > MAX_LIST_VALUES:
            raise HetSpecError(f"{flag} {text!r}: more than {MAX_LIST_VALUES:,} values")
        out.extend(values)
    if not out:
        raise HetSpecError(f"{flag} is empty; give {what} separated by commas, e.g. {example}")
    if low is not None and min(out) < low:
        raise HetSpecError(f"{flag} {text!r}: {what} must be >= {low} (got {min(out)})")
    if high is not None and max(out) > high:
        raise HetSpecError(f"{flag} {text!r}: {what} must be <= {high} (got {max(out)})")
    return tuple(dict.fromkeys(out))


def ratio(text: str, flag: str = "--partition-ratio"):
    """``"0.3"`` -> 0.3 (fixed); ``"0.2:0.8"`` -> (0.2, 0.8) (a range the optimizer searches); in [0, 1]."""
    if not str(text).strip():
        raise HetSpecError(f"{flag} is empty; give a number in [0, 1] or LOW:HIGH")
    try:
        if ":" in text:
            lo, hi = (float(v) for v in text.split(":", 1))
            if not (0.0 <= lo <= hi <= 1.0):
                raise HetSpecError(f"partition ratio range must be within [0, 1] with low <= high (got {text})")
            return (lo, hi)
        value = float(text)
    except ValueError:
        raise HetSpecError(f"partition ratio: expected a number or LOW:HIGH (got {text!r})") from None
    if not 0.0 <= value <= 1.0:
        raise HetSpecError(f"partition ratio must be in [0, 1] (got {value})")
    return value
