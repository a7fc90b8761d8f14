"""Hugging Face interoperability, both directions: HetSpec's saved checkpoints load in transformers'
``LlamaForCausalLM``, and transformers' saved folders (transformers 4 and 5 config spellings, with
and without the ``model.`` prefix) load in HetSpec, with the same logits and greedy tokens.

Tiny random models (fp32), so the module runs in seconds; skipped without transformers.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

transformers = pytest.importorskip("transformers")

from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from hwmodels.errors import HetSpecError  # noqa: E402
from real.model.checkpoint import load_model, save_model  # noqa: E402
from real.model.transformer import Transformer, rope_inv_freq  # noqa: E402
from sim.model_spec import ModelSpec, load_hf_config  # noqa: E402
from sim.step_graph import build_step_graph  # noqa: E402

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32}
TOKENS = torch.tensor([[3, 17, 5, 60, 2, 9, 33, 41, 7, 12, 50, 1]])


def _hf_config(**overrides):
    """A tiny Llama config: theta 500000, head_dim 16 != hidden 48 / 4 heads, tied embeddings,
    Llama 3.1's RoPE scaling (short original context, so the scaling moves every band)."""
    kwargs = dict(vocab_size=64, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=128, rms_norm_eps=1e-5,
                  tie_word_embeddings=True, bos_token_id=None, eos_token_id=7,
                  rope_parameters={**LLAMA3_ROPE, "rope_theta": 500000.0})
    kwargs.update(overrides)
    return transformers.LlamaConfig(**kwargs)


def _hf_model(config) -> torch.nn.Module:
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).float().eval()
    with torch.no_grad():               # norms away from 1, so a mis-read norm weight shows
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    return model


def _hetspec_spec(**overrides) -> ModelSpec:
    kwargs = dict(name="interop", n_layers=2, hidden=48, intermediate=80, n_heads=4, n_kv_heads=2, vocab=64,
                  dtype="fp32", max_position=128, rope_theta=500000.0, attn_head_dim=16, tie_embeddings=True,
                  rope_scaling=LLAMA3_ROPE, bos_token_id=None, eos_token_id=7)
    kwargs.update(overrides)
    return ModelSpec(**kwargs)


def _random_hetspec(spec: ModelSpec) -> Transformer:
    torch.manual_seed(1)
    model = Transformer(spec)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.rand_like(p) + 0.5 if name.endswith("norm.weight") else torch.randn_like(p) * 0.2)
    return model.eval()


def _greedy(step, prompt: torch.Tensor, n: int) -> list[int]:
    """``n`` greedy tokens by full recomputation (no cache: the same on both sides)."""
    ids = prompt.clone()
    for _ in range(n):
        nxt = step(ids)[0, -1].argmax()
        ids = torch.cat([ids, nxt.view(1, 1)], dim=1)
    return ids[0, prompt.shape[1]:].tolist()


def _hf_logits(model):
    return lambda ids: model(ids).logits


def _assert_same_model(ours: Transformer, theirs) -> None:
    with torch.no_grad():
        a, b = ours(TOKENS), theirs(TOKENS).logits
        assert a.shape == b.shape
        assert torch.allclose(a, b, atol=1e-4, rtol=0), float((a - b).abs().max())
        assert _greedy(ours, TOKENS[:, :4], 12) == _greedy(_hf_logits(theirs), TOKENS[:, :4], 12)


# ---------------------------------------------------------------------- transformers -> HetSpec
def test_transformers5_folder_loads_in_hetspec(tmp_path):
    hf = _hf_model(_hf_config())
    hf.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert "rope_parameters" in config and "rope_theta" not in config          # transformers 5's spelling
    spec = load_hf_config(tmp_path)
    assert spec.rope_theta == 500000.0 and spec.dtype == "fp32"
    assert spec.head_dim == 16 and spec.q_dim == 64 != spec.hidden
    assert spec.rope_parameters == LLAMA3_ROPE
    assert spec.tie_embeddings and (spec.bos_token_id, spec.eos_token_id) == (None, 7)
    assert spec.params == sum(p.numel() for p in hf.parameters())
    ours = load_model(tmp_path)
    assert torch.allclose(rope_inv_freq(spec).float(), hf.model.rotary_emb.inv_freq, rtol=1e-6)
    _assert_same_model(ours, hf)


def test_transformers4_spelling_reads_the_same(tmp_path):
    """rope_theta + rope_scaling ({"type": ...} or {"rope_type": ...}) + torch_dtype, as transformers 4 wrote."""
    hf = _hf_model(_hf_config())
    hf.save_pretrained(tmp_path)
    five = load_hf_config(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    rope = config.pop("rope_parameters")
    config.pop("dtype")
    config["rope_theta"] = rope.pop("rope_theta")
    config["rope_scaling"] = {"type" if k == "rope_type" else k: v for k, v in rope.items()}
    config["torch_dtype"] = "float32"
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert load_hf_config(tmp_path) == five
    _assert_same_model(load_model(tmp_path), hf)


def test_checkpoint_without_the_model_prefix_loads(tmp_path):
    """A base-model checkpoint (``LlamaModel.save_pretrained``: ``embed_tokens.weight``, ``layers.*``,
    ``norm.weight``) with tied embeddings, and a causal LM's file with the prefix stripped (untied)."""
    hf = _hf_model(_hf_config())
    base = tmp_path / "base"
    hf.model.save_pretrained(base)
    with safe_open(str(base / "model.safetensors"), framework="pt") as f:
        assert not any(k.startswith("model.") for k in f.keys())
    _assert_same_model(load_model(base), hf)

    untied = _hf_model(_hf_config(tie_word_embeddings=False))
    stripped = tmp_path / "stripped"
    untied.save_pretrained(stripped)
    state = {k.removeprefix("model."): v.contiguous() for k, v in untied.state_dict().items()}
    save_file(state, str(stripped / "model.safetensors"), metadata={"format": "pt"})
    _assert_same_model(load_model(stripped), untied)


# ---------------------------------------------------------------------- HetSpec -> transformers
@pytest.mark.parametrize("variant", ["llama3-tied-head-dim", "plain"])
def test_hetspec_checkpoint_loads_in_transformers(tmp_path, variant):
    spec = _hetspec_spec() if variant != "plain" else _hetspec_spec(
        rope_theta=10000.0, attn_head_dim=None, tie_embeddings=False, rope_scaling=(), bos_token_id=1,
        eos_token_id=(2, 5))
    ours = _random_hetspec(spec)
    save_model(ours, tmp_path)
    theirs = transformers.LlamaForCausalLM.from_pretrained(tmp_path).float().eval()
    assert theirs.config.eos_token_id == (list(spec.eos_token_id) if isinstance(spec.eos_token_id, tuple)
                                          else spec.eos_token_id)
    assert theirs.config.bos_token_id == spec.bos_token_id                 # not transformers' defaults 1 / 2
    assert theirs.config.tie_word_embeddings == spec.tie_embeddings
    assert theirs.config.head_dim == spec.head_dim
    assert theirs.config.rope_parameters["rope_theta"] == spec.rope_theta
    _assert_same_model(ours, theirs)
    again = load_model(tmp_path)                                            # and back: nothing lost
    assert replace(again.spec, source="") == spec
    assert torch.equal(again(TOKENS), ours(TOKENS).detach())


# ---------------------------------------------------------------------- what is refused, in one line
@pytest.mark.parametrize("change, match", [
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}}, "rope_type 'yarn' is not supported"),
    ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}}, "rope_type 'dynamic'"),
    ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "rope_theta": 1e4}}, "needs a positive low_freq_factor"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
    ({"attention_bias": True}, "attention_bias: biases are not supported"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"dtype": "float8_e4m3fn"}, "dtype 'float8_e4m3fn' is not supported"),
])
def test_unsupported_config_features_are_refused(tmp_path, change, match):
    config = {"model_type": "llama", "hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64, **change}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(HetSpecError, match=match) as err:
        load_hf_config(tmp_path)
    assert "\n" not in str(err.value)


def test_explicit_head_dim_prices_the_right_projections():
    spec = _hetspec_spec(hidden=48, attn_head_dim=32)                        # q width 128 > hidden 48
    ops = {op.name: op for op in build_step_graph(spec, tokens=1, context=8).ops}
    assert ops["q_proj"].flops == 2 * spec.hidden * 4 * 32
    assert ops["o_proj"].flops == 2 * 4 * 32 * spec.hidden
    assert spec.params == sum(p.numel() for p in Transformer(spec).parameters())
    with pytest.raises(HetSpecError, match="odd"):
        _hetspec_spec(attn_head_dim=15)
