"""The heterogeneous probes of ``hetspec calibrate``: the split step on two single-thread workers, the storage
read path and the streaming loop (:mod:`real.validation.calibration.host_hetero` turns them into the
platform's ``hcmp_*`` loop costs, ``storage`` link and ``stream_layer`` cost). The command runs them after
the core micro-benchmarks, inside the same budget; ``hetspec demo``, which validates single-worker methods
only, calibrates without them."""

from __future__ import annotations

from real.validation.calibration.host_hetero import SPLIT_KEY, STORAGE_KEY, STREAM_KEY


def hetero_probes(settings) -> dict:
    """The split step's probe (two single-thread workers on the first two cores; none on a one-core machine)
    and the storage probe, for the calibration's ``extra`` record."""
    from real.run.worker import allowed_cores
    from real.validation.calibration.split_probe import split_probe
    from real.validation.calibration.storage_probe import storage_probe
    from real.validation.calibration.stream_probe import stream_loop_probe

    out = {}
    cores = allowed_cores()
    if len(cores) >= 2:
        out[SPLIT_KEY] = split_probe((f"cpu{cores[0]}", f"cpu{cores[1]}"), settings.overhead_repeats,
                                     settings.warmup + 1)
    storage = storage_probe()
    if storage is not None:
        out[STORAGE_KEY] = storage
        stream = stream_loop_probe(f"cpu{cores[0]}", settings.overhead_repeats,
                                   settings.warmup + 1)
        if stream is not None:
            out[STREAM_KEY] = stream
    return out
