"""Model configs (a Hugging Face ``config.json``, read by :func:`sim.model_spec.spec_from_hf_config`, and a
GGUF file's metadata, read by :func:`sim.model_gguf.spec_fields`): each field checked for its type and range
where it is read, by the same checkers, one line naming the file and the field."""

from __future__ import annotations

import json

import pytest

from cli_runner import one_line_error

LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 688,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 2048,
         "rms_norm_eps": 1e-5, "rope_theta": 10000.0}


@pytest.mark.parametrize("field, value, match", [
    ("hidden_size", 256.9, "must be an integer >= 1, got 256.9"),
    ("hidden_size", "256", "must be an integer >= 1, got '256'"),
    ("num_hidden_layers", True, "must be an integer >= 1, got True"),
    ("num_key_value_heads", 0, "must be an integer >= 1, got 0"),
    ("max_position_embeddings", 0, "must be an integer >= 1, got 0"),
    ("rms_norm_eps", float("nan"), "must be a finite number > 0, got nan"),
    ("rms_norm_eps", -1e-5, "must be a finite number > 0, got -1e-05"),
    ("rms_norm_eps", 0, "must be a finite number > 0, got 0"),
    ("rope_theta", -10000.0, "must be a finite number > 0, got -10000.0"),
    ("rope_theta", "big", "must be a finite number > 0, got 'big'"),
    ("tie_word_embeddings", "false", "must be true or false, got 'false'"),
    ("head_dim", 0, "must be an integer >= 1, got 0"),
])
def test_a_wrong_config_field_is_one_line_naming_file_and_field(tmp_path, capsys, field, value, match):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, field: value}))
    one_line_error(capsys, "step", "--model", str(path), "--platform", "a100-80gb-pcie", "--tokens", "1",
                   "--context", "1", match=f"{path}: {field}: {match}")


def test_a_gpt2_config_is_checked_the_same_way(tmp_path):
    from hwmodels.errors import PresetError
    from sim.model_spec import spec_from_hf_config

    config = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 100, "n_positions": 0}
    with pytest.raises(PresetError, match="n_positions: must be an integer >= 1, got 0"):
        spec_from_hf_config(config, "g", "g/config.json")


def test_a_spec_refuses_a_non_finite_norm_or_theta():
    """Presets and other sources build a ModelSpec directly: it checks the same ranges."""
    from hwmodels.errors import HetSpecError
    from sim.model_spec import ModelSpec

    for field in ("norm_eps", "rope_theta"):
        with pytest.raises(HetSpecError, match=f"{field} must be a finite number > 0"):
            ModelSpec(name="m", n_layers=1, hidden=64, intermediate=128, n_heads=2, n_kv_heads=1, vocab=100,
                      **{field: float("nan")})


# ---------------------------------------------------------------------- GGUF metadata: the same checkers
def _gguf(tmp_path, **case):
    from gguf_files import write_tiny_llama

    path = tmp_path / "bad.gguf"
    write_tiny_llama(path, "F32", **case)
    return path


@pytest.mark.parametrize("field, value, match", [
    ("llama.embedding_length", "64", "must be an integer >= 1, got '64'"),
    ("llama.attention.head_count", True, "must be an integer >= 1, got True"),
    ("llama.block_count", 2.5, "must be an integer >= 1, got 2.5"),
    ("llama.block_count", 0, "must be an integer >= 1, got 0"),
    ("llama.attention.head_count", 0, "must be an integer >= 1, got 0"),
    ("llama.embedding_length", -64, "must be an integer >= 1, got -64"),
    ("llama.feed_forward_length", 0, "must be an integer >= 1, got 0"),
    ("llama.attention.head_count_kv", 3, "3 KV heads do not divide the 4 heads"),
    ("llama.attention.layer_norm_rms_epsilon", float("nan"), "must be a finite number > 0, got nan"),
    ("llama.attention.layer_norm_rms_epsilon", -1e-5, "must be a finite number > 0"),
    ("llama.rope.freq_base", -10000.0, "must be a finite number > 0, got -10000.0"),
    ("llama.context_length", 0, "must be an integer >= 1, got 0"),
    ("llama.vocab_size", "300", "must be an integer >= 1, got '300'"),
])
def test_a_wrong_gguf_field_is_one_line_naming_file_and_field(tmp_path, capsys, field, value, match):
    path = _gguf(tmp_path, metadata={field: value})
    one_line_error(capsys, "step", "--model", str(path), "--platform", "a100-80gb-pcie", "--tokens", "1",
                   "--context", "1", match=f"{path}: {field}: {match}")


def test_gguf_and_config_json_share_one_definition_of_the_ranges(tmp_path):
    """The same wrong value gets the same words from either file."""
    from hwmodels.errors import PresetError
    from sim.model_spec import load_gguf_spec, spec_from_hf_config

    with pytest.raises(PresetError) as hf:
        spec_from_hf_config({**LLAMA, "num_hidden_layers": 0}, "m", "config.json")
    with pytest.raises(PresetError) as gg:
        load_gguf_spec(_gguf(tmp_path, metadata={"llama.block_count": 0}))
    assert hf.value.problem == gg.value.problem == "must be an integer >= 1, got 0"


@pytest.mark.parametrize("case, match", [
    ({"arch": "qwen2"}, "general.architecture: 'qwen2' is not supported"),
    ({"drop": ("blk.0.attn_q.weight",)}, "tensor blk.0.attn_q.weight: missing"),
])
def test_another_architecture_or_a_missing_tensor_is_one_line(tmp_path, capsys, case, match):
    path = _gguf(tmp_path, **case)
    one_line_error(capsys, "step", "--model", str(path), "--platform", "a100-80gb-pcie", "--tokens", "1",
                   "--context", "1", match=f"{path}: {match}")


def test_an_unknown_gguf_tensor_type_is_one_line(tmp_path, capsys):
    from gguf_files import patch_tensor_type

    path = _gguf(tmp_path)
    patch_tensor_type(path, "blk.1.ffn_down.weight", 250)
    one_line_error(capsys, "step", "--model", str(path), "--platform", "a100-80gb-pcie", "--tokens", "1",
                   "--context", "1", match=f"{path}: tensor blk.1.ffn_down.weight: unknown tensor type id 250")
