"""Platform files: loading, every bad-input case as one clear line, round trip, contention."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cli_runner import run_cli
from hwmodels.contention import share_bandwidth, standalone_bw
from hwmodels.errors import PresetError
from hwmodels.loader import builtin_preset_dir, get_platform, load_platform_file, write_platform_file
from sim.model_spec import ModelSpec, get_model, load_hf_config

REFERENCE = builtin_preset_dir() / "a100-80gb-pcie.toml"
A100_TOKEN_TILE_LINE = next(line + "\n" for line in REFERENCE.read_text().splitlines()
                            if line.startswith("token_tile = "))


def _broken(tmp_path: Path, old: str, new: str, count: int = 1) -> Path:
    text = REFERENCE.read_text()
    assert old in text, old
    path = tmp_path / "broken.toml"
    path.write_text(text.replace(old, new, count))
    return path


BAD_FILES = [
    # (old text, new text, field named in the error, problem named in the error)
    ('mem_bw_gbps = { value = 1935.0', 'mem_bw_gbps = { value = -5.0', "devices.gpu.mem_bw_gbps", "must be > 0"),
    ('mem_bw_gbps = { value = 1935.0', 'mem_bw_gbps = { value = 0', "devices.gpu.mem_bw_gbps", "must be > 0"),
    ('fp32 = { value = 19.5', 'fp99 = { value = 19.5', "devices.gpu.peak_tflops.fp99", "unknown dtype"),
    ('dst = "gpu"', 'dst = "tpu"', "links[0].dst", "link to unknown device 'tpu'"),
    (A100_TOKEN_TILE_LINE, '',
     "devices.gpu.token_tile", "missing field"),
    ('source = "NVIDIA A100 datasheet: 108 SMs"', 'source = ""', "devices.gpu.cores", "missing source"),
    ('bw_efficiency = { value = 0.67', 'bw_efficiency = { value = 1.5', "devices.gpu.bw_efficiency", "fraction"),
    ('kind = "gpu"', 'kind = "fpga"', "devices.gpu.kind", "unknown kind 'fpga'"),
    ('devices = ["gpu"]', 'devices = ["gpu", "dsp"]', "memory_domains[0].devices", "unknown device 'dsp'"),
    ('bw_gbps = { value = 31.5', 'bw_gbps = { value = -31.5', "links[0].bw_gbps", "must be > 0"),
    ('mem_capacity_gb = { value = 80.0, source = "NVIDIA A100 datasheet" }', 'mem_capacity_gb = 80.0',
     "devices.gpu.mem_capacity_gb", "value = <number>, source"),
    ('kind = "pcie"', 'kind = "carrier-pigeon"', "links[0].kind", "unknown link kind"),
]


@pytest.mark.parametrize("old, new, field, problem", BAD_FILES)
def test_bad_platform_file_names_file_field_and_problem(tmp_path, old, new, field, problem):
    path = _broken(tmp_path, old, new)
    with pytest.raises(PresetError) as err:
        load_platform_file(path)
    message = str(err.value)
    assert message.startswith(f"{path}: {field}: "), message
    assert problem in message
    assert "\n" not in message


def test_bad_platform_file_through_the_cli_is_one_line_without_traceback(tmp_path):
    path = _broken(tmp_path, 'mem_bw_gbps = { value = 1935.0', 'mem_bw_gbps = { value = -5.0')
    result = run_cli("platform", "show", str(path))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == f"hetspec: error: {path}: devices.gpu.mem_bw_gbps: must be > 0 (got -5.0)"


def test_invalid_toml_is_reported_with_the_file(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text("name = \n")
    with pytest.raises(PresetError, match=re.escape(f"{path}: toml: not valid TOML")):
        load_platform_file(path)


def test_device_lookup_and_accelerator():
    plat = get_platform("a100-80gb-pcie")
    assert plat.accelerator.name == "gpu" and plat.cpu.name == "cpu"
    assert plat.link("gpu", "cpu").kind == "pcie"
    assert plat.storage_link("cpu").kind == "storage"
    with pytest.raises(ValueError, match="no link of kind ethernet between cpu and gpu"):
        plat.link("cpu", "gpu", kind="ethernet")


def test_a_device_replaced_keeps_the_rest_of_the_platform():
    from dataclasses import replace

    plat = get_platform("a100-80gb-pcie")
    faster = plat.with_device(replace(plat.device("gpu"), mem_bw_gbps=2 * plat.device("gpu").mem_bw_gbps))
    assert faster.device("gpu").mem_bw_gbps == 2 * plat.device("gpu").mem_bw_gbps
    assert faster.device("cpu") == plat.device("cpu") and faster.links == plat.links and faster.name == plat.name
    assert plat.device("gpu").mem_bw_gbps != faster.device("gpu").mem_bw_gbps       # the original is unchanged
    with pytest.raises(ValueError, match="npu"):
        plat.with_device(replace(plat.device("gpu"), name="npu"))


def test_platform_round_trips_through_the_writer(tmp_path):
    plat = get_platform("a100-80gb-pcie")
    out = write_platform_file(plat, tmp_path / "copy.toml")
    again = load_platform_file(out)
    assert again.devices == plat.devices and again.links == plat.links
    assert again.memory_domains == plat.memory_domains
    assert again.device("gpu").sources == plat.device("gpu").sources


def test_user_platform_folder_is_listed(tmp_path, monkeypatch):
    plat = get_platform("a100-80gb-pcie")
    write_platform_file(plat, tmp_path / "my-box.toml")
    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", str(tmp_path))
    assert get_platform("my-box").devices == plat.devices
    with pytest.raises(ValueError, match="hetspec calibrate"):
        get_platform("host")


def test_link_transfer_time():
    link = get_platform("a100-80gb-pcie").link("cpu", "gpu")
    assert link.transfer_s(0) == 0
    assert link.transfer_s(31.5e9 * 0.8) == pytest.approx(1.0 + 10e-6)


# ---------------------------------------------------------------------- contention
def test_share_bandwidth_is_max_min_fair():
    assert share_bandwidth(10.0, {"a": 2.0, "b": 20.0}) == {"a": 2.0, "b": 8.0}
    assert share_bandwidth(10.0, {"a": 8.0, "b": 8.0}) == {"a": 5.0, "b": 5.0}
    shares = share_bandwidth(9.0, {"a": 1.0, "b": 4.0, "c": 100.0})
    assert shares == {"a": 1.0, "b": 4.0, "c": 4.0}


def _soc(tmp_path: Path, contention: float, cpu_bw: float = 40.0, gpu_bw: float = 59.7) -> Path:
    text = f'''
name = "soc"
[devices.cpu]
kind = "cpu"
mem_bw_gbps = {{ value = {cpu_bw}, source = "t" }}
mem_capacity_gb = {{ value = 8, source = "t" }}
bw_efficiency = {{ value = 0.8, source = "t" }}
compute_efficiency = {{ value = 0.5, source = "t" }}
op_overhead_us = {{ value = 1, source = "t" }}
token_tile = {{ value = 4, source = "t" }}
sparse_attn_efficiency = {{ value = 0.5, source = "t" }}
[devices.cpu.peak_tflops]
fp16 = {{ value = 0.3, source = "t" }}
[devices.gpu]
kind = "gpu"
mem_bw_gbps = {{ value = {gpu_bw}, source = "t" }}
mem_capacity_gb = {{ value = 8, source = "t" }}
bw_efficiency = {{ value = 0.8, source = "t" }}
compute_efficiency = {{ value = 0.5, source = "t" }}
op_overhead_us = {{ value = 10, source = "t" }}
token_tile = {{ value = 16, source = "t" }}
sparse_attn_efficiency = {{ value = 0, source = "t" }}
[devices.gpu.peak_tflops]
fp16 = {{ value = 1.2, source = "t" }}
[[memory_domains]]
name = "lpddr"
devices = ["cpu", "gpu"]
bw_gbps = {{ value = 59.7, source = "t" }}
capacity_gb = {{ value = 8, source = "t" }}
contention_efficiency = {{ value = {contention}, source = "t" }}
'''
    path = tmp_path / f"soc-{contention}.toml"
    path.write_text(text)
    return path


def _together(plat, devices):
    """What each of ``devices`` of the SoC's shared domain gets while they all stream, as the engine shares it."""
    from sim.engine import domain_shares

    domain = plat.memory_domains[0]
    return domain_shares(domain.bw_bytes_per_s * domain.contention_efficiency,
                         {d: standalone_bw(plat, d) for d in devices})


@pytest.mark.parametrize("contention", [0.5, 0.8, 1.0])
def test_concurrent_streams_never_get_more_than_alone(tmp_path, contention):
    plat = load_platform_file(_soc(tmp_path, contention))
    both = _together(plat, ["cpu", "gpu"])
    for dev in ("cpu", "gpu"):
        assert both[dev] <= standalone_bw(plat, dev) + 1e-6
    assert sum(both.values()) == pytest.approx(min(59.7e9 * contention, sum(standalone_bw(plat, d) for d in both)))
    assert _together(plat, ["gpu"])["gpu"] == pytest.approx(standalone_bw(plat, "gpu"))


def test_contention_slows_a_streaming_neighbour(tmp_path):
    plat = load_platform_file(_soc(tmp_path, 0.8))
    alone, shared = standalone_bw(plat, "gpu"), _together(plat, ["cpu", "gpu"])["gpu"]
    assert shared < alone
    # the domain caps the GPU alone at min(device, domain) bandwidth times its efficiency
    assert alone == pytest.approx(59.7e9 * 0.8)


# ---------------------------------------------------------------------- model configs
def test_load_llama_config_json(tmp_path):
    config = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
              "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
              "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = load_hf_config(tmp_path, name="tl")
    assert spec == ModelSpec(name="tl", n_layers=22, hidden=2048, intermediate=5632, n_heads=32, n_kv_heads=4,
                             vocab=32000, dtype="bf16", max_position=2048, source=str(tmp_path / "config.json"))
    assert spec.params == get_model("tinyllama-1.1b").params
    assert get_model(str(tmp_path / "config.json")).n_kv_heads == 4


def test_load_gpt2_config_json(tmp_path):
    config = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257,
              "n_positions": 1024}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    spec = load_hf_config(path)
    assert (spec.arch, spec.intermediate, spec.tie_embeddings) == ("gpt2", 3072, True)
    assert round(spec.params / 1e6) == 124


def test_config_json_missing_field_names_file_and_field(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    with pytest.raises(PresetError, match=re.escape(f"{path}: num_hidden_layers: missing field")):
        load_hf_config(path)
    path.write_text("{not json")
    with pytest.raises(PresetError, match="not valid JSON"):
        load_hf_config(path)


def test_config_json_model_runs_in_the_cli(tmp_path):
    config = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
              "num_attention_heads": 4, "vocab_size": 1000}
    (tmp_path / "config.json").write_text(json.dumps(config))
    result = run_cli("step", "--model", str(tmp_path / "config.json"), "--platform", "a100-80gb-pcie",
                     "--tokens", "4", "--context", "16", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["total_s"] > 0
