"""The heterogeneous parts of the calibrated ``host`` platform: what the split step costs on two worker
threads (the single-thread workers' ``hcmp_*`` loop costs), the host work of Dovetail's loop (the
``dovetail_*`` loop costs), the disk the streamed weights come from (the ``storage`` link) and what streaming
costs the compute beside it (the link's ``host_share``, the workers' ``stream_layer``).
:func:`add_hetero` adds them, when ``hetspec calibrate`` ran its heterogeneous probes
(:mod:`real.validation.calibration.hetero_probes`), from the probes of :mod:`real.validation.calibration.split_probe`,
:mod:`real.validation.calibration.dovetail_probe`, :mod:`real.validation.calibration.storage_probe` and
:mod:`real.validation.calibration.stream_probe`."""

from __future__ import annotations

from hwmodels.platform import STORAGE, Link

#: Keys of the calibration's ``extra`` record that hold the probes.
SPLIT_KEY = "split_probe"
STORAGE_KEY = "storage_probe"
STREAM_KEY = "stream_probe"
DOVETAIL_KEY = "dovetail_loops"


def split_loop_costs(probe, by: str, on: str) -> tuple[dict[str, float], dict[str, str]]:
    """The ``hcmp_*`` loop costs (microseconds) of the primary of a split step, and their sources."""
    us = 1e6
    layer = max(probe.side_layer_s - probe.merge_s, 0.0)
    where = (f"{by} (split probe, real.validation.calibration.split_probe: the real split step of a {probe.layers[0]}- and a "
             f"{probe.layers[1]}-layer decoder at hidden {probe.hidden}, compute negligible, {probe.tokens} tree tokens "
             f"over {probe.context} cached, {probe.heads} Medusa heads, ratio 0.5 on workers "
             f"{probe.workers[0]} + {probe.workers[1]}; per layer = slope between the depths; medians over "
             f"interleaved rounds) {on}")
    per_layer = (f"per layer: unsplit {probe.unsplit_layer_s * us:.1f} us, one side alone {probe.side_layer_s * us:.1f}, "
                 f"both sides at once without barriers {probe.pair_layer_s * us:.1f}, the split step "
                 f"{probe.full_layer_s * us:.1f}")
    costs = {
        "hcmp_step": round(2 * probe.handoff_s * us, 3),
        "hcmp_sync": round(probe.sync_s * us, 3),
        "hcmp_bare_sync": round(min(probe.barrier_s, probe.sync_s) * us, 3),
        "hcmp_layer": round(layer * us, 3),
        "hcmp_merge_layer": round(probe.merge_s * us, 3),
        "hcmp_pair_layer": round(probe.pair_layer_s * us, 3),
    }
    sources = {
        "hcmp_step": (f"measured: 2 x {probe.handoff_s * us:.1f} us, the split forward and the split heads each handed "
                      f"to the secondary worker and back (an empty call through WorkerThread submit/result, median) "
                      f"{where}"),
        "hcmp_sync": (f"measured: {probe.sync_s * us:.1f} us per PairBarrier as the split step meets it: the step's "
                      f"{probe.full_layer_s * us:.1f} us per layer with its {probe.syncs_per_layer} barriers minus "
                      f"{probe.pair_layer_s * us:.1f} us without them, per barrier {where}"),
        "hcmp_bare_sync": (f"measured: {probe.barrier_s * us:.1f} us, one bare PairBarrier round between the two "
                         f"workers doing nothing else (real.hetero.workers.barrier_round_trip_s, median; at most "
                         f"hcmp_sync): the part of a barrier paid however little Python the other side runs {where}"),
        "hcmp_layer": (f"measured: {layer * us:.1f} us, one side of a split layer alone ({probe.side_layer_s * us:.1f} us: "
                       f"norms and RoPE whole, partial attention, column slices) minus its merge "
                       f"({probe.merge_s * us:.1f} us); {per_layer} {where}"),
        "hcmp_merge_layer": (f"measured: {probe.merge_s * us:.1f} us, one side's partial attention copied into the "
                             f"shared buffers and merged with the other's (real.hetero.layer_ops.merge_partials), "
                             f"timed alone {where}"),
        "hcmp_pair_layer": (f"measured: {probe.pair_layer_s * us:.1f} us per layer with both sides running at once and "
                            f"no barriers, vs {probe.side_layer_s * us:.1f} us for one side alone: the two threads' "
                            f"Python takes turns on the interpreter lock; {per_layer} {where}"),
    }
    return costs, sources


def storage_link(probe, by: str, on: str, device: str = "cpu", stream=None) -> Link:
    """The ``storage`` link of the host: the cold safetensors reads of the real loader, fitted. With the
    streaming-loop probe (``stream``), the bandwidth is that of the loader's whole-layer reads (their time
    less one latency per tensor), and ``host_share`` what a read takes from the compute beside it."""
    sizes = ", ".join(f"{s // 1024} KiB {c * 1e6:.0f} us" for s, c in zip(probe.sizes, probe.cold_s))
    warm = ", ".join(f"{w * 1e6:.0f}" for w in probe.warm_s)
    evict = ("the drop evicts: the same reads from the page cache took " + warm + " us"
             if probe.evicts else
             "WARNING: the drop did not make the reads slower than from the page cache (" + warm + " us): the pages "
             "may not have been evicted")
    how = (f"{by} (storage probe, real.validation.calibration.storage_probe: tensors read as the real loader reads them, "
           f"os.preadv into the buffer after posix_fadvise(DONTNEED) of their range, from a synced safetensors file "
           f"in {probe.folder}; median of {probe.reads} cold reads per size: {sizes}; {evict}) {on}")
    bw = probe.bw_bytes_per_s
    bw_source = (f"measured: {bw / 1e9:.3f} GB/s, the slope of latency + bytes / bandwidth through the smallest "
                 f"and the largest cold read {how}")
    sources = {"latency_us": f"measured: {probe.latency_s * 1e6:.1f} us per read request, the intercept of the "
                             f"same line {how}",
               "efficiency": "1: bw_gbps is the measured bandwidth of these reads"}
    share = 0.0
    if stream is not None:
        data_s = stream.layer_load_s - stream.reads_per_layer * probe.latency_s
        if data_s > 0:
            bw = stream.layer_bytes / data_s
            bw_source = (f"measured: {bw / 1e9:.3f} GB/s, the loader's whole-layer reads: {stream.layer_bytes / 1e6:.2f} "
                         f"MB in {stream.layer_load_s * 1e3:.2f} ms{_per_layer(stream)} less {stream.reads_per_layer} x the "
                         f"per-read latency (the single tensor reads alone gave {probe.bw_bytes_per_s / 1e9:.3f} GB/s) "
                         f"{_stream_where(stream, by, on)}")
        share = round(stream.host_share, 4)
        sources["host_share"] = (f"measured: {stream.host_share:.3f}, 1 - alone / beside for a one-token forward of "
                                 f"a model of the demo draft's shape (cache-resident, as LLMCad's drafter), "
                                 f"{stream.alone_s * 1e3:.2f} ms alone and {stream.beside_s * 1e3:.2f} ms while a thread "
                                 f"reads its layers as the loader does {_stream_where(stream, by, on)}")
    return Link(name="disk", kind="storage", src=STORAGE, dst=device,
                description="this machine's disk under the demo models, read with the page cache dropped",
                bw_gbps=round(bw / 1e9, 4), latency_us=round(probe.latency_s * 1e6, 3),
                efficiency=1.0, host_share=share, sources={"bw_gbps": bw_source, **sources})


def add_hetero(cal, devices: dict, loops: dict, links: tuple, workers) -> tuple[dict, tuple]:
    """``loops`` (device -> LoopCosts) with the split step's costs on every single-thread worker and Dovetail's
    loop costs on ``cpu`` and the workers (``devices``: name -> Device), and ``links`` with the storage link,
    from the calibration's probes (unchanged where it has none)."""
    by, on = f"by {cal.command}", f"on {cal.cpu}, {cal.date}"
    extra = cal.extra or {}
    if extra.get(SPLIT_KEY) is not None:
        loops = with_loop_costs(loops, workers, *split_loop_costs(extra[SPLIT_KEY], by, on))
    if extra.get(DOVETAIL_KEY) is not None:
        from real.validation.calibration.dovetail_probe import dovetail_loop_costs

        for name, (costs, sources) in dovetail_loop_costs(devices, extra[DOVETAIL_KEY], by, on).items():
            loops = with_loop_costs(loops, (name,), costs, sources)
    stream = extra.get(STREAM_KEY)
    if extra.get(STORAGE_KEY) is not None:
        links = tuple(links) + (storage_link(extra[STORAGE_KEY], by, on, stream=stream),)
    if stream is not None:
        loops = with_loop_costs(loops, workers, *stream_loop_costs(stream, by, on))
    return loops, links


def with_loop_costs(loops: dict, devices, costs: dict, sources: dict) -> dict:
    """``loops`` (device -> LoopCosts) with ``costs`` and their ``sources`` added to each of ``devices``' (a
    device without loop costs gets these alone)."""
    from dataclasses import replace

    from hwmodels.platform import LoopCosts

    out = dict(loops)
    for d in devices:
        old = out.get(d)
        out[d] = (LoopCosts(device=d, costs_us=costs, sources=sources) if old is None else
                  replace(old, costs_us={**old.costs_us, **costs}, sources={**old.sources, **sources}))
    return out


def _per_layer(stream) -> str:
    """The probe's per-layer medians behind its mean read, as a source says them."""
    reads = stream.layer_reads_s
    if not reads:
        return ""
    return " (the mean of each streamed layer's median read: " + ", ".join(f"{r * 1e3:.2f}" for r in reads) + " ms)"


def _stream_where(probe, by: str, on: str) -> str:
    return (f"{by} (streaming-loop probe, real.validation.calibration.stream_probe: the real loader on a random-weight checkpoint "
            f"of {probe.layers} layers of the demo target's shape ({probe.layer_bytes / 1e6:.2f} MB per layer, "
            f"{probe.reads_per_layer} tensors) next to the demo models, page cache dropped, on worker {probe.worker}; "
            f"medians of {probe.rounds} interleaved rounds) {on}")


def stream_loop_costs(probe, by: str, on: str) -> tuple[dict[str, float], dict[str, str]]:
    """The ``stream_layer`` loop cost (microseconds): a streamed layer's compute beyond a resident one's."""
    us = 1e6
    return ({"stream_layer": round(probe.resume_s * us, 3)},
            {"stream_layer": (f"measured: {probe.resume_s * us:.1f} us, a layer's compute in a {probe.tokens}-token "
                              f"forward with every layer streamed through one staging buffer "
                              f"({probe.streamed_layer_s * us:.1f} us per layer, the layer loop minus its waits: each "
                              f"layer computed right after the forward waited for its read) minus the same with every "
                              f"layer resident ({probe.resident_layer_s * us:.1f} us) {_stream_where(probe, by, on)}")})
