"""Hugging Face style checkpoints: round trip, shards, tied heads, one-line errors."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from hwmodels.errors import HetSpecError
from real.model.checkpoint import (
    INDEX_FILE,
    SINGLE_FILE,
    expected_shapes,
    load_model,
    save_model,
)
from real.model.transformer import Transformer
from sim.model_spec import ModelSpec

SPEC = ModelSpec("ckpt-test", n_layers=2, hidden=64, intermediate=176, n_heads=4, n_kv_heads=2,
                 vocab=300, dtype="fp32", max_position=128)


@pytest.fixture()
def model():
    torch.manual_seed(0)
    return Transformer(SPEC).eval()


def logits(m, seed=1):
    x = torch.randint(0, SPEC.vocab, (2, 12), generator=torch.Generator().manual_seed(seed))
    with torch.inference_mode():
        return m(x)


def test_round_trip_same_logits_and_hf_names(model, tmp_path):
    save_model(model, tmp_path)
    names = set(load_file(str(tmp_path / SINGLE_FILE)))
    assert "model.embed_tokens.weight" in names and "lm_head.weight" in names
    assert "model.layers.1.self_attn.q_proj.weight" in names and "model.norm.weight" in names
    assert names == set(expected_shapes(SPEC))
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "llama" and config["num_key_value_heads"] == 2
    loaded = load_model(tmp_path)
    assert loaded.spec.n_kv_heads == 2 and loaded.spec.vocab == 300
    assert torch.equal(logits(model), logits(loaded))


def test_sharded_round_trip(model, tmp_path):
    save_model(model, tmp_path, max_shard_bytes=40_000)
    index = json.loads((tmp_path / INDEX_FILE).read_text())
    shards = set(index["weight_map"].values())
    assert len(shards) > 2 and not (tmp_path / SINGLE_FILE).exists()
    assert torch.equal(logits(model), logits(load_model(tmp_path)))


def test_load_in_bf16(model, tmp_path):
    save_model(model, tmp_path)
    loaded = load_model(tmp_path, dtype="bf16")
    assert loaded.lm_head.weight.dtype == torch.bfloat16
    assert loaded.rope_cos.dtype == torch.bfloat16       # tables in the activations' dtype, as transformers casts
    tokens = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():                          # a decode through the KV cache runs in bf16 throughout
        cache = loaded.new_cache(8)
        out = loaded(tokens, cache)
        ref = model(tokens)
    assert out.dtype == torch.bfloat16 and cache.k.dtype == torch.bfloat16
    assert torch.allclose(out.float(), ref, atol=0.05 * float(ref.abs().max()))


def test_tied_embeddings_without_lm_head_tensor(tmp_path):
    spec = ModelSpec("tied", n_layers=1, hidden=32, intermediate=64, n_heads=2, n_kv_heads=2, vocab=100,
                     dtype="fp32", max_position=64, tie_embeddings=True)
    torch.manual_seed(0)
    m = Transformer(spec).eval()
    save_model(m, tmp_path)
    assert "lm_head.weight" not in load_file(str(tmp_path / SINGLE_FILE))
    loaded = load_model(tmp_path)
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    x = torch.tensor([[1, 2, 3]])
    with torch.inference_mode():
        assert torch.equal(m(x), loaded(x))


def test_legacy_rotary_inv_freq_is_ignored(model, tmp_path):
    save_model(model, tmp_path)
    tensors = load_file(str(tmp_path / SINGLE_FILE))
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(8)
    save_file(tensors, str(tmp_path / SINGLE_FILE))
    assert torch.equal(logits(model), logits(load_model(tmp_path)))


def test_shape_mismatch_names_tensor_and_both_shapes(model, tmp_path):
    save_model(model, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["intermediate_size"] = 200
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(HetSpecError) as err:
        load_model(tmp_path)
    msg = str(err.value)
    assert "model.layers.0.mlp.gate_proj.weight" in msg and "[176, 64]" in msg and "[200, 64]" in msg
    assert "\n" not in msg


def test_missing_tensor_is_named(model, tmp_path):
    save_model(model, tmp_path)
    tensors = load_file(str(tmp_path / SINGLE_FILE))
    del tensors["model.layers.1.post_attention_layernorm.weight"]
    save_file(tensors, str(tmp_path / SINGLE_FILE))
    with pytest.raises(HetSpecError, match=r"tensor model\.layers\.1\.post_attention_layernorm\.weight is missing"):
        load_model(tmp_path)


def test_unexpected_tensor_is_named(model, tmp_path):
    save_model(model, tmp_path)
    tensors = load_file(str(tmp_path / SINGLE_FILE))
    tensors["model.layers.2.mlp.up_proj.weight"] = torch.zeros(176, 64)
    save_file(tensors, str(tmp_path / SINGLE_FILE))
    with pytest.raises(HetSpecError, match=r"unexpected tensor model\.layers\.2\.mlp\.up_proj\.weight"):
        load_model(tmp_path)


def test_missing_files_fail_with_one_line(model, tmp_path):
    with pytest.raises(HetSpecError, match="config"):
        load_model(tmp_path)
    save_model(model, tmp_path, max_shard_bytes=40_000)
    shard = sorted(tmp_path.glob("model-*.safetensors"))[0]
    shard.unlink()
    with pytest.raises(HetSpecError, match=f"shard {shard.name}"):
        load_model(tmp_path)
    (tmp_path / INDEX_FILE).unlink()
    with pytest.raises(HetSpecError, match="neither model.safetensors nor model.safetensors.index.json"):
        load_model(tmp_path)


def test_bad_dtype_name(model, tmp_path):
    save_model(model, tmp_path)
    with pytest.raises(HetSpecError, match="unknown torch dtype 'fp64'"):
        load_model(tmp_path, dtype="fp64")
