"""Random-weight Llama-shaped models for timing: large enough to be memory-bound on a CPU host.

The demo models trained here are small (a few MB to ~110 MB of fp32 weights), so their steps are
dominated by fixed costs or fit in the last-level cache. To check the roofline where decoding is
limited by streaming weights from DRAM, validation times one decode/verify step of models with
the shapes of real Llama-architecture checkpoints and **random weights** (timing does not depend
on the values; every output that uses them is labelled "random-weight timing run"). Nothing is
downloaded: only the shapes are taken from the published configurations.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from hwmodels.errors import UnknownNameError
from sim.model_spec import ModelSpec
from sim.tree import TokenTree

#: Shapes (Llama architecture) of public checkpoints, from their Hugging Face ``config.json``:
#: HuggingFaceTB/SmolLM-135M (hidden 576, intermediate 1536, 30 layers, 9 heads, 3 KV heads, vocab
#: 49152, tied embeddings) and HuggingFaceTB/SmolLM-360M (hidden 960, intermediate 2560, 32 layers,
#: 15 heads, 5 KV heads, vocab 49152, tied embeddings), fp32 for a CPU; meta-llama/Llama-2-7b-hf
#: (hidden 4096, intermediate 11008, 32 layers, 32 heads, 32 KV heads, vocab 32000, 4096 positions)
#: and TinyLlama/TinyLlama-1.1B-Chat-v1.0 (hidden 2048, intermediate 5632, 22 layers, 32 heads,
#: 4 KV heads, vocab 32000, 2048 positions), fp16 for a GPU.
RANDOM_SHAPES: dict[str, ModelSpec] = {
    "random-smollm-135m": ModelSpec(
        name="random-smollm-135m", n_layers=30, hidden=576, intermediate=1536, n_heads=9, n_kv_heads=3,
        vocab=49152, dtype="fp32", max_position=2048, tie_embeddings=True,
        source="shape of HuggingFaceTB/SmolLM-135M config.json; random weights (timing only)"),
    "random-smollm-360m": ModelSpec(
        name="random-smollm-360m", n_layers=32, hidden=960, intermediate=2560, n_heads=15, n_kv_heads=5,
        vocab=49152, dtype="fp32", max_position=2048, tie_embeddings=True,
        source="shape of HuggingFaceTB/SmolLM-360M config.json; random weights (timing only)"),
    "random-llama2-7b": ModelSpec(
        name="random-llama2-7b", n_layers=32, hidden=4096, intermediate=11008, n_heads=32, n_kv_heads=32,
        vocab=32000, dtype="fp16", max_position=4096, tie_embeddings=False,
        source="shape of meta-llama/Llama-2-7b-hf config.json; random weights (timing only)"),
    "random-tinyllama-1.1b": ModelSpec(
        name="random-tinyllama-1.1b", n_layers=22, hidden=2048, intermediate=5632, n_heads=32, n_kv_heads=4,
        vocab=32000, dtype="fp16", max_position=2048, tie_embeddings=False,
        source="shape of TinyLlama/TinyLlama-1.1B-Chat-v1.0 config.json; random weights (timing only)"),
}
#: Standard deviation of the random weights: small enough that activations stay finite through
#: 30+ layers (the values are never read as a language model).
WEIGHT_STD = 0.02


def random_spec(name: str) -> ModelSpec:
    if name not in RANDOM_SHAPES:
        raise UnknownNameError("random-weight model", name, RANDOM_SHAPES)
    return RANDOM_SHAPES[name]


def random_transformer(spec: ModelSpec, seed: int = 0, device: str | torch.device = "cpu",
                       dtype: torch.dtype = torch.float32):
    """A :class:`real.model.transformer.Transformer` of ``spec`` with normal(0, WEIGHT_STD) weights, eval
    mode, allocated directly on ``device`` in ``dtype`` (a 7B model never exists in fp32 on the host)."""
    from real.model.transformer import Transformer, rope_tables

    device = torch.device(device)
    with torch.device("meta"):
        model = Transformer(spec)
    model = model.to(dtype).to_empty(device=device)
    if spec.tie_embeddings:                          # to_empty made the tied weight two tensors
        model.lm_head.weight = model.model.embed_tokens.weight
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, WEIGHT_STD, generator=gen)
        cos, sin = rope_tables(spec, spec.max_position)        # buffers are not parameters: computed again
        model.rope_cos, model.rope_sin = cos.to(device, dtype), sin.to(device, dtype)
    return model.eval().requires_grad_(False)


def streamed_bytes(spec: ModelSpec, element_size: int) -> int:
    """Bytes of weight one forward streams: every parameter but an untied embedding table (a step reads
    only its q rows; a tied one is streamed as the LM head)."""
    return (spec.params - (0 if spec.tie_embeddings else spec.embedding_params)) * element_size


@dataclass(frozen=True)
class StepTiming:
    model: str
    tokens: int          # q: tokens in the step (a causal chain: the verification of q-1 drafts)
    context: int         # tokens in the KV cache before the step
    seconds: float       # median over repeats
    repeats: int


def time_steps(model, token_counts: Sequence[int], context: int, repeats: int, warmup: int = 1,
               tick: Callable[[], None] | None = None) -> tuple[StepTiming, ...]:
    """Median seconds of one forward of q new tokens (chain mask, explicit positions, as a
    verification pass) over a cache of ``context`` tokens, for each q; the counts are interleaved
    across repeats so slow drifts of the machine hit every q alike."""
    spec = model.spec
    samples: dict[int, list[float]] = {q: [] for q in token_counts}
    with torch.inference_mode():
        cache = model.new_cache(context + max(token_counts) + 1)
        prompt = torch.randint(0, spec.vocab, (1, context), generator=torch.Generator().manual_seed(1))
        model(prompt.to(cache.k.device), cache)
        cache.keep(range(context))
        steps = {}
        for q in token_counts:
            tree = TokenTree.chain(q - 1)
            block = torch.randint(0, spec.vocab, (1, q), generator=torch.Generator().manual_seed(q)).to(cache.k.device)
            mask = torch.from_numpy(tree.attention_mask()).to(cache.k.device)
            positions = cache.length + torch.tensor(tree.depths, device=cache.k.device)

            def step(block=block, mask=mask, positions=positions, bound=cache.length + q):
                model(block, cache, positions=positions, tree_mask=mask, position_bound=bound)
                cache.discard()
            steps[q] = step
        for q in token_counts:
            for _ in range(warmup):
                steps[q]()
        device = cache.k.device
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda _device: None)
        for _ in range(repeats):
            for q in token_counts:
                sync(device)
                t = time.perf_counter()
                steps[q]()
                sync(device)          # a GPU step's kernels have run when it is timed
                samples[q].append(time.perf_counter() - t)
                if tick:
                    tick()
    return tuple(StepTiming(spec.name, q, context, statistics.median(samples[q]), repeats) for q in token_counts)
