"""The CPU's operator profiles a full ``hetspec calibrate`` writes beside ``host.toml``: the all-thread ``cpu``
(``profiled-cpu``, the second pricing of ``hetspec validate``) and the first core's single-thread worker
(``profiled-cpuN``, the second pricing of ``hetspec validate --device cpuN``), each measured as
:func:`real.validation.profiler.profile_device.profile_and_write` measures ``--device cpu`` / ``--device cpuN``, with the
host's cache for that device and, in the full calibration, the contention guard (:func:`cpu_profile_guard`,
which guards ``hetspec calibrate --device cpu|cpuN`` too)."""

from __future__ import annotations

from pathlib import Path

import torch

from real.validation.profiler.profile_device import profile_and_write


def profile_cpu_beside(host_path: str | Path, quick: bool, progress: bool = True,
                       one_thread: bool = False, force: bool = False, models=None, extra_models=None,
                       all_threads: bool = True) -> list[str]:
    """The CPU's operator profile written beside a freshly calibrated ``host.toml`` (``profiled-cpu``), with
    the calibration's threads and OpenMP settings: what ``hetspec validate`` prices the grid with next to
    the roofline (:mod:`real.validation.backends`). ``one_thread``, on a machine of several cores: also the
    single-thread worker on the first core this process may use (``profiled-cpuN``), what ``hetspec validate
    --device cpuN`` prices with. ``models``: the model names whose shapes it covers (default: both demo presets'
    :func:`~real.validation.profiler.profile_device.default_models`); ``extra_models``: names whose shapes it
    covers in addition (``hetspec calibrate --models``: presets, GGUF files, config.json paths). ``force``: its guard waits and retakes for as long as the cores stay slowed,
    where it would otherwise stop after :data:`~real.validation.trust.GUARD_GIVE_UP_S`. ``all_threads`` False
    (with ``one_thread``): the single-thread worker only."""
    from hwmodels.loader import load_platform_file
    from real.validation.gpu_target import profiled_platform_name

    host = load_platform_file(host_path)
    # the device profiled -> the host's device whose cache it takes
    devices = {"cpu": "cpu"} if all_threads or not one_thread else {}
    worker = first_worker(host)
    if one_thread and worker is not None:
        devices[worker] = worker if worker in host.devices else "cpu0"   # the host names its workers by index
    from real.validation.profiler.profile_device import default_models

    command = "hetspec calibrate" + (" --quick" if quick else "")
    if extra_models:
        models = list(models or default_models("cpu")) + [m for m in extra_models if m not in (models or ())]
        command += " --models " + ",".join(extra_models)
    lines = []
    for device_text, host_device in devices.items():
        out = Path(host_path).parent / f"{profiled_platform_name(device_text)}.toml"
        cache_gb = host.device(host_device).cache_gb
        cache = None if cache_gb is None else (
            cache_gb, f"{Path(host_path).name}'s cache_gb of {host_device} ({cache_gb * 1e3:.1f} MB, measured by the "
                      "same calibration)")
        guard = None if quick else cpu_profile_guard(device_text, force)
        lines += profile_and_write(device_text, models, None, quick, out, command, progress, cache, guard)
    return lines


def first_worker(host) -> str | None:
    """The single-thread worker on the first core this process may use (``cpuN``), on a machine of several
    cores whose torch runs several threads; None otherwise."""
    from real.run.worker import allowed_cores

    cores = allowed_cores()
    return f"cpu{cores[0]}" if torch.get_num_threads() > 1 and len(cores) > 1 else None


def cpu_profile_guard(device_text: str, force: bool = False):
    """The contention guard of a full CPU operator profile (``cpu``: all torch threads; ``cpuN``: one): its rows
    retaken while a compute-bound probe reads the cores slowed from outside, against a GEMM rate timed now. It
    stops the profile when the cores stay slowed (:data:`~real.validation.trust.GUARD_GIVE_UP_S`), unless
    ``force``."""
    from real.validation.trust import GUARD_GIVE_UP_S, contention_guard

    threads = torch.get_num_threads() if device_text == "cpu" else 1
    return contention_guard(threads, give_up_s=None if force else GUARD_GIVE_UP_S)
