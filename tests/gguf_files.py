"""Tiny Llama GGUF files written by the tests themselves with the gguf package's writer (imported by the
tests; ``tests/`` is on ``sys.path`` through its conftest)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: The tiny model: every row length (hidden 64, FFN 96) a whole number of 32-weight quantization blocks.
TINY = {"n_layers": 2, "hidden": 64, "intermediate": 96, "n_heads": 4, "n_kv_heads": 2, "vocab": 300}

#: GGUF tensor role -> Hugging Face role, and (rows, cols) of the HF weight from the shape.
_LAYER = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
          "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
          "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def hf_weights(shape: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Random fp32 weights of a Llama of ``shape`` under Hugging Face names (tied embeddings)."""
    rng = np.random.default_rng(seed)
    h, i, v = shape["hidden"], shape["intermediate"], shape["vocab"]
    hd = h // shape["n_heads"]
    q, kv = shape["n_heads"] * hd, shape["n_kv_heads"] * hd
    out = {"model.embed_tokens.weight": rng.normal(0, 0.5, (v, h)), "model.norm.weight": 1 + rng.normal(0, 0.1, h)}
    for layer in range(shape["n_layers"]):
        p = f"model.layers.{layer}."
        for name, dims in (("input_layernorm", (h,)), ("self_attn.q_proj", (q, h)), ("self_attn.k_proj", (kv, h)),
                           ("self_attn.v_proj", (kv, h)), ("self_attn.o_proj", (h, q)),
                           ("post_attention_layernorm", (h,)), ("mlp.gate_proj", (i, h)), ("mlp.up_proj", (i, h)),
                           ("mlp.down_proj", (h, i))):
            scale = 0.1 if len(dims) == 1 else dims[1] ** -0.5
            out[p + name + ".weight"] = (1 if len(dims) == 1 else 0) + rng.normal(0, scale, dims)
    return {k: w.astype(np.float32) for k, w in out.items()}


def ggml_permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's converter's ``LlamaModel.permute`` (convert_hf_to_gguf.py), written out here."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_llama(path: Path, qtype: str = "F32", shape: dict | None = None, seed: int = 0,
                     arch: str = "llama", metadata: dict | None = None, drop: tuple[str, ...] = (),
                     tokens: list[str] | None = None, merges: list[str] | None = None) -> dict[str, np.ndarray]:
    """Write a Llama GGUF file: projections in ``qtype`` (F32, F16, Q8_0, Q4_1, ...), norms in F32, the
    embedding in ``qtype`` too; Q and K permuted as llama.cpp's converter does. ``metadata``: keys to
    override (value None: left out; a negative integer is written as int32, any other as uint32); ``drop``: GGUF tensors to leave out. Returns the HF weights."""
    import gguf
    from gguf.constants import GGMLQuantizationType

    shape = {**TINY, **(shape or {})}
    weights = hf_weights(shape, seed)
    w = gguf.GGUFWriter(str(path), arch)
    keys = {f"{arch}.block_count": shape["n_layers"], f"{arch}.embedding_length": shape["hidden"],
            f"{arch}.feed_forward_length": shape["intermediate"], f"{arch}.attention.head_count": shape["n_heads"],
            f"{arch}.attention.head_count_kv": shape["n_kv_heads"], f"{arch}.context_length": 256,
            f"{arch}.rope.freq_base": 10000.0, f"{arch}.attention.layer_norm_rms_epsilon": 1e-5,
            f"{arch}.vocab_size": shape["vocab"], "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 0}
    for key, value in {**keys, **(metadata or {})}.items():
        if value is None:
            continue
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            (w.add_int32 if value < 0 else w.add_uint32)(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        else:
            w.add_string(key, value)
    if tokens is not None:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_merges(merges or [])
        w.add_token_types([3 if t.startswith("<|") else 1 for t in tokens])
    hd = shape["hidden"] // shape["n_heads"]
    assert hd % 2 == 0
    for hf, value in weights.items():
        name = _gguf_name(hf)
        if name in drop:
            continue
        if ".attn_q." in name:
            value = ggml_permute(value, shape["n_heads"])
        elif ".attn_k." in name:
            value = ggml_permute(value, shape["n_kv_heads"])
        kind = GGMLQuantizationType.F32 if value.ndim == 1 else GGMLQuantizationType[qtype]
        data = value if kind == GGMLQuantizationType.F32 else gguf.quants.quantize(value, kind)
        w.add_tensor(name, data, raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return weights


def _gguf_name(hf: str) -> str:
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    parts = hf.split(".")
    role = ".".join(parts[3:-1])
    return f"blk.{parts[2]}.{next(g for g, h in _LAYER.items() if h == role)}.weight"


def patch_tensor_type(path: Path, tensor: str, type_id: int) -> None:
    """Overwrite the type id of ``tensor``'s record in the header (name, n_dims, dims, then the type)."""
    data = bytearray(path.read_bytes())
    name = tensor.encode()
    at = data.index(name) + len(name)
    n_dims = int.from_bytes(data[at:at + 4], "little")
    at += 4 + 8 * n_dims
    data[at:at + 4] = type_id.to_bytes(4, "little")
    path.write_bytes(bytes(data))
