"""GGUF files into the real path: a :class:`~real.model.transformer.Transformer` and its tokenizer.

The shape and the tensor records come from :mod:`sim.model_gguf` (torch-free, shared with the
simulator). Each tensor is dequantized by the gguf package's reference code (``gguf.quants.dequantize``)
to fp32, then cast to the requested dtype; a type it cannot dequantize is refused in one line.

llama.cpp's converter (``convert_hf_to_gguf.py``, ``LlamaModel.permute``) reorders the rows of the
query and key projections, within each head, from Hugging Face's rotate-half RoPE layout (the first
half of a head's dimensions paired with the second half) to GGML's interleaved one (pairs of adjacent
dimensions). :func:`unpermute` reverses it, so the weights are Hugging Face's again and the model here,
which rotates halves as ``LlamaForCausalLM`` does, computes what the original did. Without it the
model still runs, on wrongly paired rotary dimensions.

The tokenizer is in the metadata: ``tokenizer.ggml.tokens`` (the vocabulary, by id),
``tokenizer.ggml.merges`` (``"a b"`` per merge, in rank order), ``tokenizer.ggml.token_type`` (3:
control tokens, kept whole) and the bos / eos ids; ``tokenizer.ggml.model`` ``gpt2`` is GPT-2's
byte-level BPE, built here with the ``tokenizers`` package.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from hwmodels.errors import PresetError
from real.model.checkpoint import model_from_state, torch_dtype
from real.model.tokenizer import BPETokenizer
from real.model.transformer import Transformer
from sim.model_gguf import IGNORED_TENSORS, GGUFFile, GGUFTensor, hf_name, read_gguf
from sim.model_spec import ModelSpec, spec_from_gguf

DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}

#: ``tokenizer.ggml.token_type`` of a control token (llama.cpp's LLAMA_TOKEN_TYPE_CONTROL).
CONTROL_TOKEN = 3

#: Pre-tokenizers by ``tokenizer.ggml.pre`` (llama.cpp's llama-vocab.cpp, its regexes per pre type):
#: GPT-2's byte-level split, and SmolLM's, which first cuts every digit apart (``\p{N}``).
PRE_TOKENIZERS = ("default", "gpt2", "smollm")


def unpermute(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Hugging Face's row order of a query or key projection ``[n_heads * head_dim, d_in]`` from GGML's:
    the inverse of ``LlamaModel.permute`` in llama.cpp's converter."""
    rows, cols = weight.shape
    return weight.reshape(n_heads, rows // n_heads // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def permute(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """GGML's row order from Hugging Face's (``LlamaModel.permute``): what a converter writes."""
    rows, cols = weight.shape
    return weight.reshape(n_heads, 2, rows // n_heads // 2, cols).transpose(1, 2).reshape(rows, cols)


def dequantize(gf: GGUFFile, tensor: GGUFTensor) -> np.ndarray:
    """A tensor's weights as fp32 ``[outer..., inner]`` (HF's shape), by the gguf package's reference code."""
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize as reference

    raw = np.memmap(gf.path, dtype=np.uint8, mode="r", offset=tensor.offset, shape=(tensor.n_bytes,))
    rows = tensor.shape[:-1] or (1,)
    try:
        out = reference(raw.reshape(*rows, -1), GGMLQuantizationType[tensor.type])
    except NotImplementedError:
        raise PresetError(str(gf.path), f"tensor {tensor.name}", f"type {tensor.type} cannot be dequantized by "
                                                                 f"the gguf package") from None
    out = np.asarray(out, dtype=np.float32).reshape(tensor.shape)
    return out if out.flags.writeable else out.copy()     # F32 is a view of the read-only map


def gguf_state(gf: GGUFFile, spec: ModelSpec, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Every weight of ``spec`` under its Hugging Face name, dequantized, Q and K rows in HF's order."""
    for name in IGNORED_TENSORS:
        if name in gf.tensors:
            raise PresetError(str(gf.path), f"tensor {name}", "RoPE frequency factors are not supported by the "
                                                              "real model")
    state = {}
    for name, tensor in gf.tensors.items():
        weight = torch.from_numpy(dequantize(gf, tensor))
        if ".attn_q." in name:
            weight = unpermute(weight, spec.n_heads)
        elif ".attn_k." in name:
            weight = unpermute(weight, spec.n_kv_heads)
        state[hf_name(name)] = weight.to(dtype)
    return state


def load_gguf(path: str | Path, dtype: str | torch.dtype = torch.float32, device: str | torch.device = "cpu",
              name: str | None = None) -> Transformer:
    """A :class:`Transformer` from a Llama GGUF file, its weights dequantized to ``dtype``; its spec is the
    file's with every weight at ``dtype`` (:meth:`sim.model_spec.ModelSpec.dequantized`)."""
    gf = read_gguf(path)
    dt = torch_dtype(dtype)
    spec = spec_from_gguf(gf, name).dequantized(DTYPE_NAMES[dt])
    state = {k: v.to(device) for k, v in gguf_state(gf, spec, dt).items()}
    return model_from_state(spec, state, device).requires_grad_(False)


def gguf_tokenizer(path: str | Path | GGUFFile) -> BPETokenizer:
    """The byte-level BPE tokenizer of a GGUF file's metadata (one line naming the field it cannot honour)."""
    gf = path if isinstance(path, GGUFFile) else read_gguf(path)
    where = str(gf.path)
    kind = gf.value("tokenizer.ggml.model", str)
    if kind != "gpt2":
        raise PresetError(where, "tokenizer.ggml.model", f"{kind!r} is not supported (gpt2: byte-level BPE)")
    pre = gf.value("tokenizer.ggml.pre", str, default="default")
    if pre not in PRE_TOKENIZERS:
        raise PresetError(where, "tokenizer.ggml.pre", f"{pre!r} is not supported; valid: {', '.join(PRE_TOKENIZERS)}")
    tokens = gf.value("tokenizer.ggml.tokens", list)
    merges = gf.value("tokenizer.ggml.merges", list)
    types = gf.value("tokenizer.ggml.token_type", list, default=[1] * len(tokens))
    if not all(isinstance(t, str) for t in tokens) or not all(isinstance(m, str) and " " in m for m in merges):
        raise PresetError(where, "tokenizer.ggml.merges", "expected strings: tokens, and merges as 'a b'")
    vocab = {tok: i for i, tok in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    missing = next((m for m, (a, b) in zip(merges, pairs) if a not in vocab or b not in vocab or a + b not in vocab),
                   None)
    if missing is not None:
        raise PresetError(where, "tokenizer.ggml.merges", f"merge {missing!r} joins tokens not in the vocabulary")
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
                         if pre == "smollm" else byte_level)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, kind in zip(tokens, types) if kind == CONTROL_TOKEN])
    eos = gf.value("tokenizer.ggml.eos_token_id", required=False)
    if eos is not None and not 0 <= eos < len(tokens):
        raise PresetError(where, "tokenizer.ggml.eos_token_id", f"{eos} is outside the {len(tokens)}-token vocabulary")
    return BPETokenizer(tok, eos_id=eos if eos is not None else 0)
