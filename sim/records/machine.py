"""``machine.json``: what a run ran on, when, and by which command (torch-free).

Every measuring command (``hetspec calibrate``, ``validate``, ``demo``, the GPU script) writes one into its run
folder beside ``results.json``. The CPU facts come from ``/proc/cpuinfo`` and ``/proc/meminfo`` where they exist
(Linux) and from :mod:`platform` elsewhere; package versions from the installed distributions' metadata, so
that reading them imports nothing. The real path adds what only torch knows (the GPU) through ``extra``.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from hwmodels import atomic_files
from hwmodels.errors import HetSpecError

MACHINE_FILE = "machine.json"
RESULTS_FILE = "results.json"
FORMAT = "hetspec-machine/1"
#: The instruction-set flags that decide a CPU's kernels for this project's work (vector width, bf16 and
#: matrix units); the full flag list of a modern x86 CPU is a few hundred names and says no more.
CPU_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "asimd",
             "sve", "neon")
PACKAGES = ("hetspec", "torch", "numpy")


def _cpuinfo(text: str) -> tuple[str, list[str], list[str]]:
    """The first CPU's model name, its x86 ``flags`` and its Arm ``Features`` from ``/proc/cpuinfo``'s text."""
    model, flags, features = "", [], []
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and not model:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = value.split()
        elif key == "features" and not features:
            features = value.split()
    return model, flags, features


def _memory_bytes(text: str) -> int | None:
    match = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, flags=re.M)
    return int(match.group(1)) * 1024 if match else None


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else :func:`platform.processor`)."""
    return _cpuinfo(_read("/proc/cpuinfo"))[0] or platform.processor() or platform.machine() or "unknown CPU"


def x86_cpu_flags() -> frozenset[str]:
    """The first x86 CPU's flags from ``/proc/cpuinfo``; empty where there is none (another OS or
    architecture: an Arm CPU lists ``Features``, not ``flags``)."""
    return frozenset(_cpuinfo(_read("/proc/cpuinfo"))[1])


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:           # not on Linux
        return os.cpu_count() or 1


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine_facts() -> dict:
    """The machine this process runs on: CPU model and flags, cores, memory, OS, Python and package versions."""
    _, flags, features = _cpuinfo(_read("/proc/cpuinfo"))
    return {
        "cpu": cpu_model(),
        "cpu_flags": [f for f in CPU_FLAGS if f in set(flags) | set(features)],
        "architecture": platform.machine(),
        "cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "memory_bytes": _memory_bytes(_read("/proc/meminfo")),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "packages": {name: _version(name) for name in PACKAGES},
        "gpu": None,
    }


def machine_slug(facts: dict) -> str:
    """A short folder-name label of a machine: its GPU's name where it ran on one, else its CPU vendor and family
    (``amd-epyc``, ``intel-xeon``, ``nvidia-h200``)."""
    name = (facts.get("gpu") or {}).get("name") if isinstance(facts.get("gpu"), dict) else None
    text = name or facts.get("cpu") or "unknown"
    text = re.sub(r"\((R|TM)\)|\bCPU\b|\bProcessor\b|@.*$|\d+-Core", " ", text, flags=re.I)
    words = [w for w in re.split(r"[^A-Za-z0-9]+", text.lower()) if w]
    return "-".join(words[:2]) or "unknown"


def write_machine_json(folder: str | Path, *, command: str, started: datetime, ended: datetime | None = None,
                       calibration: dict | None = None, extra: dict | None = None) -> Path:
    """Write ``folder/machine.json`` for a run of ``command`` that began at ``started`` (UTC); ``calibration``
    names the calibration the run used (its file and when it was made), ``extra`` adds or overrides facts (the
    real path's GPU). Returns the path."""
    ended = ended or datetime.now(timezone.utc)
    if ended < started:
        raise HetSpecError(f"run record: the end {ended.isoformat()} precedes the start {started.isoformat()}")
    record = {"format": FORMAT, "command": command, "argv": sys.argv[1:],
              "started": started.astimezone(timezone.utc).isoformat(timespec="seconds"),
              "ended": ended.astimezone(timezone.utc).isoformat(timespec="seconds"),
              "machine": machine_facts() | (extra or {}), "calibration": calibration}
    path = Path(folder) / MACHINE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_files.write_text(path, json.dumps(record, indent=2) + "\n")
