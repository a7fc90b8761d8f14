"""The heterogeneous probes of ``hetspec calibrate``: the split step on two single-thread workers, Dovetail's decode
loop on the workers the host's devices stand for, the storage read path and the streaming loop
(:func:`real.validation.calibration.host_hetero.add_hetero` turns them into the platform's ``hcmp_*`` and
``dovetail_*`` loop costs, ``storage`` link and ``stream_layer`` cost). The command runs them after the core
micro-benchmarks, inside the same budget (:data:`HETERO_PROBES`); ``hetspec demo``, which validates
single-worker methods only, calibrates without them."""

from __future__ import annotations

from real.validation.calibration.host_facts import CalibrationProbes
from real.validation.calibration.host_hetero import DOVETAIL_KEY, SPLIT_KEY, STORAGE_KEY, STREAM_KEY, add_hetero


def hetero_probes(settings) -> dict:
    """The split step's probe (two single-thread workers on the first two cores; none on a one-core machine),
    Dovetail's decode loop (all threads and one), the storage probe and the streaming loop, for the
    calibration's ``extra`` record."""
    from real.run.worker import allowed_cores
    from real.validation.calibration.dovetail_probe import dovetail_loops
    from real.validation.calibration.split_probe import split_probe
    from real.validation.calibration.storage_probe import storage_probe
    from real.validation.calibration.stream_probe import stream_loop_probe

    out = {}
    cores = allowed_cores()
    if len(cores) >= 2:
        out[SPLIT_KEY] = split_probe((f"cpu{cores[0]}", f"cpu{cores[1]}"), settings.overhead_repeats,
                                     settings.warmup + 1)
    out[DOVETAIL_KEY] = dovetail_loops(settings)
    storage = storage_probe()
    if storage is not None:
        out[STORAGE_KEY] = storage
        stream = stream_loop_probe(f"cpu{cores[0]}", settings.overhead_repeats,
                                   settings.warmup + 1)
        if stream is not None:
            out[STREAM_KEY] = stream
    return out


#: What ``hetspec calibrate`` passes :func:`real.validation.calibration.calibrate.calibrate`.
HETERO_PROBES = CalibrationProbes(measure=hetero_probes, extend=add_hetero)
