"""The second pricing of ``hetspec validate``: the grid priced by the measured operator profile of the CPU
(``hetspec calibrate --device cpu`` writes it, ``profiled-cpu`` in the user platform folder; for a
single-thread worker ``cpuN``, ``hetspec calibrate --device cpuN`` and ``profiled-cpuN``) beside the
calibrated roofline of the ``host`` platform, from the same run's measurements.

The profiled variant is the host platform with its device's operators timed by the profile
(:mod:`sim.op_timing`'s ``profiled`` backend, eager mode): the host's calibrated decode-loop costs,
cache and roofline stay, and the roofline prices what the profile does not cover (a forward it has no row
of wholly), so the two columns differ only in how the profiled operators are timed. Nothing
of it is fitted to the validation: the profile and the host come from their own calibration runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from hwmodels.errors import HetSpecError
from real.validation.gpu_target import profiled_platform_name

@dataclass(frozen=True)
class ProfiledVariant:
    platform: object | None       # the host with its device timed by the profile; None: not priced
    reason: str                   # why not (empty when priced)
    source: dict                  # where the profile came from (for the report)


def profiled_variant(host, device: str, folder: Path | None = None) -> ProfiledVariant:
    """``host`` with ``device`` timed by its CPU operator profile, when there is one for this run:
    ``profiled-cpu.toml`` (the all-thread ``cpu`` device) or ``profiled-cpuN.toml`` (the single-thread worker
    ``cpuN``) in ``folder`` (default: the user platform folder); the profile's source names the torch threads
    it was measured with."""
    from hwmodels.loader import load_platform_file, user_platform_dir
    from real.run.worker import CPU_RE
    from real.validation.trust import shown_path

    if device != "cpu" and not CPU_RE.fullmatch(device):
        return ProfiledVariant(None, f"the operator profiles time the host's CPU (cpu, cpuN), not {device}", {})
    path = (folder or user_platform_dir()) / f"{profiled_platform_name(device)}.toml"
    how = f"run `hetspec calibrate --device {device}` to add it (writes {shown_path(path)})"
    if not path.is_file():
        return ProfiledVariant(None, f"no CPU operator profile: {how}", {})
    try:
        prof = load_platform_file(path)
    except HetSpecError as exc:
        return ProfiledVariant(None, f"{shown_path(path)} does not load ({exc}): {how}", {})
    prof_dev = next(iter(prof.devices.values()))
    timing = prof_dev.timing
    if timing is None or not timing.profiled:
        return ProfiledVariant(None, f"{shown_path(path)} has no profiled device: {how}", {})
    variant = timed_by_profile(host, device, timing, path.stem)
    source = {"path": shown_path(path), "profile": shown_path(path.with_suffix(".csv")),
              "description": prof.description, "mode": timing.mode}
    older = older_than_host(path, getattr(host, "path", None), device)
    if older:
        source["older_than_host"] = older
    return ProfiledVariant(variant, "", source)


def timed_by_profile(host, device: str, timing, label: str):
    """``host`` with ``device`` timed by a CPU operator profile's ``timing`` (named ``<host>+<label>``): the
    host's calibrated roofline prices what the profile does not cover
    (:attr:`hwmodels.profile.DeviceTiming.calibrated_roofline`)."""
    dev = replace(host.device(device), timing=replace(timing, calibrated_roofline=True))
    return replace(host.with_device(dev), name=f"{host.name}+{label}")


def older_than_host(profile_path: Path, host_path, device: str) -> str:
    """Why a profile written before its host platform file comes from an earlier calibration run ("" when it
    does not). ``hetspec calibrate`` writes ``host.toml`` first and the profiles beside it after, so a profile
    older than the host is one a later calibration did not replace (its profile stopped; a ``--quick`` one does
    not profile the single-thread worker): the two columns of the report then rest on two calibration runs'
    measurements."""
    from datetime import datetime

    if not host_path or not Path(host_path).is_file():
        return ""
    written, host_written = Path(profile_path).stat().st_mtime, Path(host_path).stat().st_mtime
    if written >= host_written:
        return ""
    when = [datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M") for t in (written, host_written)]
    return (f"the profile (written {when[0]}) is older than the host platform (written {when[1]}), so the two come "
            f"from different calibration runs; `hetspec calibrate --device {device}` measures the profile again")
