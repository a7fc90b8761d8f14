"""Whether a single-thread worker still runs at the speed ``hetspec calibrate`` measured, around the
heterogeneous section of ``hetspec validate``.

The validation's reference probe (:mod:`real.validation.trust`) re-times the fixed cost per operator and
the DRAM triad with all threads. On this kind of shared virtual machine a single thread's speed at streaming
weights can move on its own: the one-token step of the calibration's streaming decoder (a random-weight
decoder of four times the last-level cache, :func:`real.validation.calibration.stream_step_probe.streaming_spec`) took 19.9 ms
on one thread in a calibration, 23.4 ms in a ``hetspec calibrate --quick`` an hour later and 20.7 ms three
minutes after that, while the two-thread probe of the validation in between moved by 3-7 %. Every
prediction of the heterogeneous section prices single-thread workers, so the section re-times that step on
its primary worker before and after it and compares both with the calibration's own measurement (its raw
record beside the platform file). Beyond :data:`WORKER_DRIFT_WARNING` the section says so at its top: its
errors then include that much of the machine's change.
"""

from __future__ import annotations

import math

#: A single-thread worker's step that moved more than this from its calibration is reported at the top.
WORKER_DRIFT_WARNING = 0.15
#: Timed steps of the re-timing (median; two more warm it up).
WORKER_PROBE_REPEATS = 7


def calibrated_step_s(platform) -> float | None:
    """The one-thread step of the streaming decoder as the calibration of ``platform`` measured it (seconds),
    from the raw record next to its file; None without one."""
    from real.validation.calibration.host_facts import raw_record

    try:
        value = float((raw_record(platform) or {})["one_thread"]["streaming"]["unmasked_s"])
    except (KeyError, ValueError, TypeError):
        return None
    return value if math.isfinite(value) and value > 0 else None


def worker_step_s(worker: str, llc_bytes: int | None = None, repeats: int = WORKER_PROBE_REPEATS) -> float:
    """The same step re-timed now on ``worker`` (pinned, its threads): median seconds."""
    import torch

    from real.run.worker import get_worker, on_worker
    from real.model.random_models import random_transformer
    from real.validation.calibration.host_facts import llc_bytes as machine_llc
    from real.validation.calibration.microbench import _probe_step, median_time
    from real.validation.calibration.stream_step_probe import streaming_spec

    model = random_transformer(streaming_spec(llc_bytes or machine_llc()[0]))
    with on_worker(get_worker(worker)), torch.inference_mode():
        return median_time(_probe_step(model, False), repeats, 2)


def drift_record(worker: str, calibrated_s: float | None, before_s: float | None, after_s: float | None) -> dict:
    """The record of ``hetero.json``: the three times, their changes against the calibration, and whether
    either moved beyond :data:`WORKER_DRIFT_WARNING`."""
    def change(x):
        return x / calibrated_s - 1.0 if calibrated_s and x is not None else None

    changes = [c for c in (change(before_s), change(after_s)) if c is not None]
    return {"worker": worker, "calibrated_s": calibrated_s, "before_s": before_s, "after_s": after_s,
            "change_before": change(before_s), "change_after": change(after_s), "warning": WORKER_DRIFT_WARNING,
            "moved": any(abs(c) > WORKER_DRIFT_WARNING for c in changes)}


def drift_lines(d: dict | None) -> list[str]:
    """Markdown for the top of ``hetero.md`` (nothing when the section could not compare)."""
    if not d or d.get("calibrated_s") is None:
        return []
    ms = [f"{1e3 * d[k]:.2f} ms" if d.get(k) is not None else "n/a" for k in ("calibrated_s", "before_s", "after_s")]
    pct = [f"{100 * d[k]:+.0f} %" if d.get(k) is not None else "n/a" for k in ("change_before", "change_after")]
    line = (f"Single-thread worker `{d['worker']}`: the one-token step of the calibration's streaming decoder took "
            f"{ms[0]} at calibration, {ms[1]} before this section ({pct[0]}) and {ms[2]} after it ({pct[1]}).")
    if d.get("moved"):
        line = (f"**The single-thread workers moved since the calibration** (beyond {100 * d['warning']:.0f} %): the "
                f"errors below include that change of the machine; recalibrate and run again. " + line)
    return [line, ""]
