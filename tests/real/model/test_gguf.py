"""GGUF files in the real path, on tiny random Llamas the tests write with the gguf package's writer in F32,
F16, Q8_0 and Q4_1: weights dequantized exactly as the gguf reference does, llama.cpp's Q/K row permutation
reversed (and re-applied), the same logits as the weights they were written from and as transformers'
``LlamaForCausalLM`` on the saved Hugging Face folder; the tokenizer from the metadata round-trips text;
what the loader cannot honour is refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gguf_files import TINY, ggml_permute, write_tiny_llama

from hwmodels.errors import HetSpecError
from real.model.checkpoint import model_from_state, save_model
from real.model.gguf import dequantize, gguf_tokenizer, load_gguf, permute, unpermute
from real.model.tokenizer import train_tokenizer
from sim.model_gguf import read_gguf
from sim.model_spec import load_gguf_spec

QTYPES = ("F32", "F16", "Q8_0", "Q4_1")
TOKENS = torch.tensor([[3, 17, 5, 60, 2, 9, 33, 41, 7, 12, 250, 1]])
TEXT = ("def wrap(text, width=70):\n    \"\"\"Wrap a paragraph.\"\"\"\n    return [line for line in text.split()]\n"
        "class TextWrapper:\n    def __init__(self, width=70, tabsize=8):\n        self.width = width\n") * 3


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gguf-real")
    out = {}
    for qtype in QTYPES:
        path = folder / f"tiny-{qtype}.gguf"
        out[qtype] = (path, write_tiny_llama(path, qtype))
    return out


def _logits(model) -> torch.Tensor:
    with torch.inference_mode():
        return model(TOKENS).float()


def test_permute_and_unpermute_are_llama_cpps_pair():
    w = torch.randn(4 * 16, 8)
    assert torch.equal(permute(w, 4), torch.from_numpy(ggml_permute(w.numpy(), 4)))
    assert torch.equal(unpermute(permute(w, 4), 4), w)
    assert not torch.equal(permute(w, 4), w)


@pytest.mark.parametrize("qtype", QTYPES)
def test_weights_are_the_gguf_references_dequantization_with_the_permutation_reversed(files, qtype):
    import gguf

    path, original = files[qtype]
    model = load_gguf(path)
    state = model.state_dict()
    for tensor in gguf.GGUFReader(str(path)).tensors:
        reference = gguf.quants.dequantize(tensor.data, tensor.tensor_type)       # GGML's row order
        name = tensor.name
        hf = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}.get(name)
        if hf is None:
            layer, role = name.split(".")[1:3]
            hf = next(k for k in state if k.startswith(f"model.layers.{layer}.") and
                      k.split(".")[-2] == {"attn_norm": "input_layernorm", "attn_q": "q_proj", "attn_k": "k_proj",
                                           "attn_v": "v_proj", "attn_output": "o_proj",
                                           "ffn_norm": "post_attention_layernorm", "ffn_gate": "gate_proj",
                                           "ffn_up": "up_proj", "ffn_down": "down_proj"}[role])
        ours = state[hf].numpy()
        heads = TINY["n_heads"] if ".attn_q." in name else TINY["n_kv_heads"] if ".attn_k." in name else None
        if heads is not None:
            ours = ggml_permute(ours, heads)                    # re-applied: back to the file's order
        assert np.array_equal(ours, reference.reshape(ours.shape)), name
        if qtype == "F32":                                       # lossless: the very weights written
            assert np.array_equal(state[hf].numpy(), original[hf]), name
    assert model.lm_head.weight is model.model.embed_tokens.weight      # tied


@pytest.mark.parametrize("qtype", QTYPES)
def test_logits_follow_the_written_weights(files, qtype):
    """F32 gives the written model's logits exactly; the others within their rounding (measured here on these
    random weights: F16 about 1e-3 of the logits' scale, Q8_0 2e-2, Q4_1 0.24; the exact check is the one above)."""
    path, original = files[qtype]
    spec = load_gguf_spec(path).dequantized("fp32")
    reference = _logits(model_from_state(spec, {k: torch.from_numpy(v) for k, v in original.items()}))
    got = _logits(load_gguf(path))
    error = ((got - reference).abs().max() / reference.abs().max()).item()     # relative to the logits' scale
    assert error <= {"F32": 0.0, "F16": 2e-3, "Q8_0": 5e-2, "Q4_1": 0.4}[qtype]


def test_without_reversing_the_permutation_the_logits_differ(files):
    path, original = files["F32"]
    spec = load_gguf_spec(path).dequantized("fp32")
    permuted = {k: torch.from_numpy(ggml_permute(v, TINY["n_heads"] if ".q_proj." in k else TINY["n_kv_heads"])
                                    if (".q_proj." in k or ".k_proj." in k) else v) for k, v in original.items()}
    assert not torch.allclose(_logits(model_from_state(spec, permuted)), _logits(load_gguf(path)), atol=1e-3)


@pytest.mark.parametrize("qtype", ["F32", "Q4_1"])
def test_saved_as_a_hugging_face_folder_it_loads_in_transformers(files, tmp_path, qtype):
    transformers = pytest.importorskip("transformers")
    model = load_gguf(files[qtype][0])
    save_model(model, tmp_path / "hf")
    hf = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32).eval()
    with torch.inference_mode():
        theirs = hf(TOKENS).logits
    assert torch.allclose(theirs, _logits(model), atol=1e-4)


def test_dtype_is_the_requested_one_and_the_spec_says_so(files):
    model = load_gguf(files["Q8_0"][0], dtype="bf16")
    assert model.model.layers[0].self_attn.q_proj.weight.dtype == torch.bfloat16
    assert model.spec.dtype == "bf16" and model.spec.weight_formats == ()


def test_dequantize_reads_from_the_file_offsets(files):
    path, _ = files["Q8_0"]
    gf = read_gguf(path)
    tensor = gf.tensors["blk.1.ffn_down.weight"]
    assert dequantize(gf, tensor).shape == (TINY["hidden"], TINY["intermediate"])


# ---------------------------------------------------------------------- tokenizer
@pytest.fixture(scope="module")
def bpe():
    return train_tokenizer([TEXT] * 4, vocab_size=TINY["vocab"])


def _tokens_and_merges(tokenizer):
    data = json.loads(tokenizer._tok.to_str())
    vocab = data["model"]["vocab"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    return tokens, merges


def test_the_tokenizer_from_the_metadata_round_trips_text(tmp_path, bpe):
    tokens, merges = _tokens_and_merges(bpe)
    path = tmp_path / "tok.gguf"
    write_tiny_llama(path, "Q8_0", shape={"vocab": len(tokens)}, tokens=tokens, merges=merges)
    tok = gguf_tokenizer(path)
    assert tok.vocab_size == len(tokens) and tok.eos_id == 0
    for text in (TEXT, "x = 12345  # digits\n\tand tabs, ünïcode ✓"):
        assert tok.encode(text) == bpe.encode(text)
        assert tok.decode(tok.encode(text)) == text
    assert tok.encode("<|endoftext|>") == [0]          # a control token stays whole


@pytest.mark.parametrize("metadata,match", [
    ({"tokenizer.ggml.model": "llama"}, "tokenizer.ggml.model: 'llama' is not supported"),
    ({"tokenizer.ggml.pre": "qwen2"}, "tokenizer.ggml.pre: 'qwen2' is not supported"),
])
def test_a_tokenizer_it_cannot_build_is_refused(tmp_path, bpe, metadata, match):
    tokens, merges = _tokens_and_merges(bpe)
    path = tmp_path / "tok.gguf"
    write_tiny_llama(path, "F32", shape={"vocab": len(tokens)}, tokens=tokens, merges=merges)
    gf = read_gguf(path)
    gf.metadata.update(metadata)
    with pytest.raises(HetSpecError, match=f"^{path}: {match}"):
        gguf_tokenizer(gf)


def test_a_file_without_a_tokenizer_is_refused_naming_the_field(files):
    with pytest.raises(HetSpecError, match="tokenizer.ggml.model: missing field"):
        gguf_tokenizer(files["F32"][0])
