"""The heterogeneous knobs of ``hetspec run``, checked without torch (milliseconds, before any model loads).

``--partition-ratio`` (hcmp), ``--workers`` (hcmp, dovetail, alspec), ``--lambda`` and ``--window``
(alspec), ``--drafter`` (dovetail), ``--memory-budget`` (draft-tree: LLMCad weight streaming).
:func:`check_knobs` is called by :class:`real.run.request.RunRequest`; availability of a CUDA
worker is checked when the run starts (that needs torch).
"""

from __future__ import annotations

import re

from hwmodels.errors import HetSpecError

#: Worker names accepted on the command line (real.run.worker resolves them).
WORKER_NAME = re.compile(r"^(cpu|cpu\d+|cuda|cuda:\d+)$")
#: How many workers each method takes, and what they are (for messages).
WORKER_ROLES = {"hcmp": ("primary", "secondary"), "dovetail": ("drafter", "verifier"),
                "alspec": ("sender", "receiver")}
DOVETAIL_DRAFTERS = ("draft", "dgf")
#: Methods that decode greedily only on the real path.
GREEDY_ONLY = ("dovetail", "alspec")
#: Units of ``--memory-budget`` (a bare number is MB).
UNITS = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_bytes(text) -> int:
    """``"60MB"``, ``"0.5GB"``, ``"48MiB"`` or a bare number of MB -> bytes; one line if malformed."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), "mb"
    else:
        s = str(text).strip().lower().replace(" ", "")
        num = s.rstrip("abgikm")
        unit = s[len(num):] or "mb"
        try:
            value = float(num)
        except ValueError:
            value = float("nan")
        if unit not in UNITS or not value == value:
            raise HetSpecError(f"memory budget {text!r}: give a size like 60MB, 0.5GB or 48MiB (a bare number is MB)")
    if not value > 0 or value == float("inf"):
        raise HetSpecError(f"memory budget must be > 0, got {text!r}")
    return int(value * UNITS[unit])


def worker_names(text: str, method: str) -> tuple[str, ...]:
    """``"cpu0,cpu1"`` -> ("cpu0", "cpu1"), checked for the method's roles."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    roles = WORKER_ROLES[method]
    if len(names) != len(roles):
        raise HetSpecError(f"--workers for {method} takes {len(roles)} workers ({','.join(roles)}), got {text!r}")
    for n in names:
        if not WORKER_NAME.match(n):
            raise HetSpecError(f"--workers: unknown worker {n!r}; valid: cpu, cpu0, cpu1, ... and cuda, cuda:0, ... "
                               "where a CUDA device exists")
    if method != "dovetail" and names[0] == names[1]:
        raise HetSpecError(f"--workers for {method} needs two different workers, got {names[0]} twice")
    return names


def check_knobs(method: str, ratio=None, workers=None, lam=None, window=None, memory_budget=None, drafter=None,
                temperature: float = 0.0) -> None:
    """One line for a bad heterogeneous knob value (which knobs apply is RunRequest's table)."""
    if ratio is not None and (isinstance(ratio, bool) or not 0.0 <= float(ratio) <= 1.0):
        raise HetSpecError(f"--partition-ratio must be in [0, 1], got {ratio}")
    if workers is not None:
        worker_names(workers, method)
    if lam is not None and not float(lam) >= 0.0:
        raise HetSpecError(f"--lambda must be >= 0, got {lam}")
    if window is not None and int(window) < 1:
        raise HetSpecError(f"--window must be >= 1, got {window}")
    if drafter is not None and drafter not in DOVETAIL_DRAFTERS:
        raise HetSpecError(f"--drafter must be one of {', '.join(DOVETAIL_DRAFTERS)}, got {drafter!r}")
    if memory_budget is not None:
        parse_bytes(memory_budget)
    if method in GREEDY_ONLY and temperature > 0:
        raise HetSpecError(f"{method} decodes greedily on the real path; run it with --temperature 0")
