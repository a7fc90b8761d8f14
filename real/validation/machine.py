"""The machine under test: its calibrated platform, and how far its state has moved since
``hetspec calibrate`` measured it."""

from __future__ import annotations

from hwmodels.errors import HetSpecError

#: Relative change of the fixed cost per operator since calibration above which the report warns.
DRIFT_WARNING = 0.15


def machine_drift(dev, threads: int) -> dict:
    """The overhead probe of the calibration re-timed now: how far the machine's state (load, clock)
    has moved since ``hetspec calibrate`` measured it (a few seconds)."""
    from real.validation.microbench import layer_overhead

    now = layer_overhead(threads, 3, 2).per_op_s * 1e6
    then = dev.cache_op_overhead_us if dev.cache_op_overhead_us is not None else dev.op_overhead_us
    return {"now_us": now, "calibrated_us": then, "change": (now - then) / then if then > 0 else float("nan"),
            "warning": DRIFT_WARNING}


def load_host(platform: str):
    from hwmodels.loader import get_platform

    try:
        return get_platform(platform)
    except HetSpecError as exc:
        if platform == "host":
            raise HetSpecError("no host platform yet: run `hetspec calibrate` first (or pass --platform FILE)") from None
        raise exc


def shown_path(path) -> str:
    """How a report shows a file of this machine: ``~/...`` under the home folder, relative under the
    working folder, else its name (a report never carries the absolute paths of the machine it ran on)."""
    from pathlib import Path

    if path is None:
        return ""
    p = Path(path).expanduser().resolve()
    for base, prefix in ((Path.cwd().resolve(), ""), (Path.home().resolve(), "~/")):
        try:
            return prefix + str(p.relative_to(base))
        except ValueError:
            continue
    return p.name

