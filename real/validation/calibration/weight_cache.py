"""The cache a model's weights get: one-token GEMVs cycling over the weights of growing draft-shaped models,
each in a loop of its own, measured in the streaming probe's fresh process (:func:`streaming_probes`; the
largest set still read at cache speed is a calibrated host's ``cache_gb``)."""

from __future__ import annotations

from dataclasses import replace

import torch

from real.validation.calibration import stream_step_probe
from real.validation.calibration.microbench import PROBE_CONTEXT, median_time, torch_threads
from real.validation.calibration.stream_step_probe import REWARM_DRAFT

#: Layers of the draft-shaped model whose weight prefixes :func:`weight_cache_curve` cycles through.
WEIGHT_CURVE_LAYERS = 6
#: Tokens of the curve's second pass over every weight set: a tree pass (the default verified width of
#: Medusa and Dovetail trees; a Dovetail drafter's passes feed 10 tokens). Multi-token passes keep less of
#: the cache than one-token ones: a calibrated platform's ``cache_gb`` is the smaller of the two curves'
#: sets (:attr:`real.validation.calibration.stream_step_probe.StreamingProbe.weight_cache`), its ``gemv_cache_gb`` the
#: one-token curve's (:attr:`~real.validation.calibration.stream_step_probe.StreamingProbe.gemv_weight_cache`; what a chain's
#: or a draft tree's one-token draft passes keep); ``cache_gb``'s source lists both curves.
WEIGHT_CURVE_TOKENS = 16


def weight_cache_curve(repeats: int, warmup: int, tokens: int = 1) -> tuple[tuple[int, float], ...]:
    """(bytes, bytes/s) of ``tokens``-token linears (one-token: GEMVs) cycling over the weights of growing
    draft-shaped models (:data:`REWARM_DRAFT`'s layer and LM head; the first k layers' weights, a prefix
    ending after each layer's attention and after its MLP, up to :data:`WEIGHT_CURVE_LAYERS` layers, then
    the LM head, in the forward's order), each in a loop of its own. Up to some size a model's weights stay
    in the last-level cache from one pass to the next; that size, not the stream triad's, is what a model's
    weights get: measured here, the demo draft's 10 MB of weights stream from DRAM in a loop of their
    own on one thread while 7 MB stay resident, and a triad still runs at cache speed on 12 MiB."""
    from real.model.random_models import random_transformer
    from sim.model_spec import ModelSpec

    spec = ModelSpec(name="weight-curve", dtype="fp32", max_position=4 * PROBE_CONTEXT,
                     **{**REWARM_DRAFT, "n_layers": WEIGHT_CURVE_LAYERS})
    model = random_transformer(spec)
    blocks = stream_step_probe.linear_blocks(model)
    # each block's norm and the final one: read by the forward too, and counted in the working set the
    # prediction compares with the cache (sim.step_graph.weight_working_set), so a set of a model's shape
    # is measured at exactly that model's working set
    norms = [n.weight for layer in model.model.layers for n in (layer.input_layernorm, layer.post_attention_layernorm)]
    out = []
    with torch.inference_mode():
        for end in range(len(blocks) + 1):
            ws = [w for block in blocks[:end] for w in block] + [model.lm_head.weight]
            nbytes = sum(w.numel() * w.element_size() for w in ws + norms[:end] + [model.model.norm.weight])
            out.append((int(nbytes), nbytes / median_time(stream_step_probe.gemm_pass(ws, tokens), repeats, warmup, inner=3)))
    return tuple(out)


def streaming_probes(thread_counts, repeats: int, warmup: int, llc_bytes: int) -> dict:
    """By thread count, each of ``thread_counts`` in turn in this process: :func:`stream_step_probe.streaming_probe`,
    then with the same threads the :func:`weight_cache_curve` in one-token and :data:`WEIGHT_CURVE_TOKENS`-token
    passes (its ``weight_curve`` and ``weight_curve_multi``)."""
    out = {}
    for threads in thread_counts:
        probe = stream_step_probe.streaming_probe(threads, repeats, warmup, llc_bytes)
        with torch_threads(threads):
            out[threads] = replace(probe, weight_curve=weight_cache_curve(repeats, warmup),
                                   weight_curve_multi=weight_cache_curve(repeats, warmup, WEIGHT_CURVE_TOKENS),
                                   weight_curve_tokens=WEIGHT_CURVE_TOKENS)
    return out
