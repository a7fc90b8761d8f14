"""What ``--device`` of ``hetspec validate`` and ``hetspec demo`` names, and the platform that prices it.

Two kinds of name, one flag:

- ``cpu`` (all threads) or ``cpuN`` (one pinned single-thread worker): a device of the calibrated
  ``host`` platform, the grid decoded on the CPU as before;
- ``cuda`` / ``cuda:N``: the grid decoded on that GPU (:mod:`real.model.placement`: ``--dtype``, else the
  dtype of the GPU's operator profile, else fp32; CUDA graphs unless ``--graphs off``), predicted on the
  platform's device for it
  (named ``cuda:N``, ``cuda`` or ``gpu``). The calibrated ``host`` describes only the CPU, so for a
  GPU the platform is the one ``hetspec calibrate --device cuda:N`` writes (``profiled-cudaN`` in
  the user platform folder), found by itself when ``--platform`` is left at ``host``.

Without a flag: ``cuda:0`` where CUDA exists, else ``cpu``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hwmodels.errors import HetSpecError


@dataclass(frozen=True)
class ValidationTarget:
    platform: object            # hwmodels.platform.Platform
    device: str                 # the platform's device name the predictions use
    placement: object | None    # real.model.placement.Placement for a GPU; None: the CPU as calibrated
    drift_device: object | None  # the host CPU device the reference probe is compared with (None: no probe)

    @property
    def label(self) -> str:
        """The device as the report names it."""
        return self.placement.device if self.placement is not None else self.device


def is_cuda_name(device: str | None) -> bool:
    return device is not None and (device == "cuda" or device.startswith("cuda:"))


def default_device_name(device: str | None) -> str:
    """``device``, or ``cuda:0`` where CUDA exists and ``cpu`` otherwise."""
    if device is not None:
        return device
    from real.model.placement import default_device

    return default_device()


def profiled_platform_name(device: str) -> str:
    """The platform `hetspec calibrate --device D` writes for device D (``profiled-cpu``, ``profiled-cuda0``)."""
    return "profiled-" + device.replace(":", "")


def check_placement(device: str | None, dtype: str | None = None, graphs: str = "auto"):
    """For a CUDA name: the placement, or one line if this machine has no such device (before any model
    loads). For a CPU name: None (``--dtype`` / ``--graphs`` then apply to nothing and are refused)."""
    from real.model.placement import check_device_name, resolve

    device = default_device_name(device)
    if is_cuda_name(device):
        check_device_name(device)
        return resolve(device, dtype, graphs)
    if dtype is not None or graphs != "auto":
        raise HetSpecError(f"--dtype and --graphs apply to a CUDA --device, not {device}")
    return None


def platform_device(platform, worker: str) -> str | None:
    """The platform's device for a worker name (``cuda:0`` may be called ``cuda:0``, ``cuda`` or ``gpu``)."""
    names = [worker] + (["cuda", "gpu"] if worker.startswith("cuda") else [])
    return next((n for n in names if n in platform.devices), None)


def validation_target(platform: str, device: str | None, dtype: str | None = None,
                      graphs: str = "auto") -> ValidationTarget:
    """The platform and device of a validation on ``device`` (see the module's description)."""
    from real.validation.trust import load_host

    device = default_device_name(device)
    placement = check_placement(device, dtype, graphs)
    if placement is None:
        host = load_host(platform)
        return ValidationTarget(host, device, None, host.device(device))
    name = placement.device
    host = load_host(platform) if platform != "host" else _host_or_none()
    found = platform_device(host, name) if host is not None else None
    if found is None and platform == "host":
        profiled = profiled_platform_name(name)
        try:
            host = load_host(profiled)
            found = platform_device(host, name)
        except HetSpecError:
            pass
    if found is None:
        raise HetSpecError(f"--device {name}: platform {platform} has no device for it ({name}, cuda or gpu); "
                           f"profile the GPU with `hetspec calibrate --device {name}` (writes "
                           f"{profiled_platform_name(name)}) or pass --platform FILE")
    if dtype is None:    # the dtype the GPU's operator profile was measured in (what the predictions can price)
        placement = check_placement(device, profile_dtype(host.device(found)), graphs)
    host = priced_as_run(host, found, placement.graphs)
    cpu = host.devices.get("cpu")
    return ValidationTarget(host, found, placement, cpu)


def priced_as_run(platform, device: str, graphs: bool):
    """``platform`` with its GPU ``device`` priced in the execution mode the real path runs it in: replayed CUDA
    graphs (``graphs``) or every operator launched from Python, where the device's operator profile measured
    that mode (``hetspec calibrate --device cuda:N`` measures both); otherwise as the platform declares it."""
    from hwmodels.profile import in_mode

    dev = platform.device(device)
    mode = "graph" if graphs else "eager"
    if dev.timing is not None and dev.timing.profiled and not dev.timing.profile.measured_in(mode):
        return platform       # an eager-only profile keeps its declared mode
    why = "the run replays CUDA graphs" if graphs else "the run launches every operator from Python (no CUDA graphs)"
    return platform.with_device(in_mode(dev, mode, why))


def profile_dtype(dev) -> str | None:
    """The dtype of ``dev``'s measured operator profile, or None for a roofline device."""
    timing = dev.timing
    return timing.profile.dtype if timing is not None and timing.profiled else None


def _host_or_none():
    from real.validation.trust import load_host

    try:
        return load_host("host")
    except HetSpecError:
        return None
