"""The dovetail decode-loop probe, one of the heterogeneous probes of ``hetspec calibrate``
(:mod:`real.validation.calibration.hetero_probes`), and the ``dovetail_*`` loop costs fitted from it.

Dovetail's real loop (:mod:`real.hetero.dovetail`) decodes on the calibration's probe models
(:func:`real.validation.calibration.microbench.probe_models`), drafter and verifier on the one worker the
calibrated device stands for (``cpu`` = all cores; one thread: ``cpuN`` on the first allowed core), at the
depths :data:`DOVETAIL_DEPTHS`. Its drafter grows and reranks its tree between its passes, outside its pass
records (:func:`real.hetero.dovetail.grow_tree`), so its host work is the loop's time outside its traced
forwards, as the single-device loops' (:mod:`real.validation.calibration.host_costs`): fitted as
``dovetail_step`` + ``dovetail_pass`` per drafter pass. A sample without that measure falls back to the loop's
time beyond the model's price of its forwards (the residual), which moves with every price of the probe's
passes: it came out 1.6-7.3 ms per step on single-thread workers from one calibration to the next (the host
part of the dovetail rows of two validations after two calibrations: 1.65 and 7.26 ms), the loops' time within
3 %. A calibration without the heterogeneous probes (``hetspec demo``'s) has no dovetail loop costs.
"""

from __future__ import annotations

import math

#: Drafter depths timed (two, so a per-pass cost can be fitted).
DOVETAIL_DEPTHS = (2, 7)
#: The host costs fitted from the probe: per step and per drafter pass.
DOVETAIL_TERMS = {"dovetail": ("step", "pass")}


def dovetail_probe_config(depth: int, threads: int):
    """The probe's dovetail round: Dovetail's tree (top-k 10, 16 verified tokens) from ``1 + depth``
    drafter passes, drafter and verifier on the one worker the calibrated device stands for (``cpu``
    = all cores; one thread: ``cpuN`` on the first allowed core)."""
    from real.hetero.dovetail import DEFAULT_TOP_K, DEFAULT_WIDTH, DovetailConfig
    from real.run.worker import allowed_cores

    cores = allowed_cores()
    worker = "cpu" if threads > 1 or len(cores) == 1 else f"cpu{cores[0]}"
    return DovetailConfig(tree_width=DEFAULT_WIDTH, draft_depth=depth, top_k=DEFAULT_TOP_K, workers=(worker, worker))


def dovetail_loop_samples(threads: int, repeats: int, new_tokens: int | None = None) -> tuple:
    """Dovetail's real loop timed on the probe models with ``threads`` torch threads, one
    :class:`~real.validation.calibration.microbench.LoopSample` per depth of :data:`DOVETAIL_DEPTHS`
    (``repeats`` interleaved repeats; ``new_tokens`` per run, default the probe's)."""
    from real.validation.calibration import microbench as mb

    jobs = [("dovetail", depth, dovetail_probe_config(depth, threads)) for depth in DOVETAIL_DEPTHS]
    return mb.time_decode_loops(mb.probe_models(), jobs, threads, repeats, new_tokens or mb.LOOP_NEW_TOKENS)


def dovetail_loops(settings) -> dict:
    """The probe on both thread counts the calibration measures (torch's and one thread), for its ``extra``
    record: ``{"all_threads": samples, "one_thread": samples}`` (one run where torch runs one thread)."""
    import torch

    repeats, new_tokens = settings.loop_repeats, settings.loop_new_tokens
    whole = dovetail_loop_samples(torch.get_num_threads(), repeats, new_tokens)
    single = whole if torch.get_num_threads() == 1 else dovetail_loop_samples(1, repeats, new_tokens)
    return {"all_threads": whole, "one_thread": single, "repeats": repeats}


def dovetail_price(device, sample, context: int, dtype: str | None = None) -> float:
    """What the model prices for the forwards of one probe round on ``device``: the target's verification of
    the round's tree, then the drafter's passes (the accepted tokens, then top-k per level), the probe models in
    ``dtype`` (None: the probe's own, fp32)."""
    from hwmodels.platform import Platform
    from real.hetero.dovetail import DEFAULT_TOP_K
    from real.validation.calibration.microbench import LOOP_SHAPE, probe_specs
    from sim.pricing import forward_seconds
    from sim.strategies.dovetail import tree_draft_passes

    spec, draft = probe_specs(LOOP_SHAPE)
    if dtype is not None:
        spec, draft = spec.with_dtype(dtype), draft.with_dtype(dtype)
    platform = Platform(name="probe", description="", devices={device.name: device})
    price = float(forward_seconds(spec, platform, device.name, max(int(round(sample.nodes)), 1), context))
    passes = tree_draft_passes(max(math.ceil(sample.tokens), 1), int(round(sample.passes)) - 1, DEFAULT_TOP_K,
                               context)
    return price + sum(float(forward_seconds(draft, platform, device.name, p.tokens, p.context)) for p in passes)


def dovetail_loop_costs(devices: dict, probe: dict, by: str, on: str) -> dict[str, tuple[dict, dict]]:
    """The ``dovetail_*`` loop costs (microseconds) and their sources fitted from the probe (``probe``: as
    :func:`dovetail_loops` records it), per device of ``devices`` (name -> :class:`hwmodels.platform.Device`):
    the all-thread samples on ``cpu``, the one-thread ones on every single-thread worker ``cpuN``."""
    from real.run.worker import CPU_RE
    from real.validation.calibration.host_costs import fit_host_costs

    statistic = f"median of {probe.get('repeats', 1)} interleaved repeats"
    out = {}
    for name, device in devices.items():
        key = "all_threads" if name == "cpu" else "one_thread" if CPU_RE.fullmatch(name) else None
        if key is not None and probe.get(key):
            out[name] = fit_host_costs(device, probe[key], statistic, by, on, terms=DOVETAIL_TERMS,
                                       price=dovetail_price)
    return out
