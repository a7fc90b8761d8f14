"""Model configs (a Hugging Face ``config.json``, read by :func:`sim.model_spec.spec_from_hf_config`):
each field checked for its type and range where it is read, one line naming the file and the field."""

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
