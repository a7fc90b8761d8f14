"""Step graph accounting: the Medusa paper's roofline tables, exactly, and the roofline's laws."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels.loader import get_platform
from sim.model_spec import get_model
from sim.reproduce.medusa import Q_COLUMNS, TABLE6, TABLE7_OI, TABLE7_TFLOPS, TABLE8
from sim.step_graph import build_step_graph
from sim.step_timing import price_step
from sim.tree import TokenTree

from cli_runner import run_cli

# Medusa App. G.2, Tables 6-8 (Llama-33B on A100-80GB-PCIe): the paper's numbers, kept once in the reproduction
# module; these tests check the arithmetic intensity column exactly.
# Columns: ar (q=1), then q = 16, 32, 48, 64, 80, 96, 112 candidates.
TABLE6_ATTENTION_OI = {s: tuple(oi for _, oi in row) for s, row in TABLE6.items()}   # batch 16, rows = s
TABLE7_BATCHES = tuple(TABLE7_TFLOPS)            # at s = 1024 the intensity is the same for every batch
TABLE8_MLP_OI = {b: tuple(oi for _, oi in row) for b, row in TABLE8.items()}          # rows = batch

LLAMA_33B = get_model("vicuna-33b")  # LLaMA-33B shape: h = 6656, i = 17920, head dim 128


def _close(value: float, table: float) -> bool:
    return round(value, 2) == pytest.approx(table, abs=1e-9)


@pytest.mark.parametrize("s", sorted(TABLE6_ATTENTION_OI))
def test_medusa_table6_attention_intensity(s):
    for q, expected in zip(Q_COLUMNS, TABLE6_ATTENTION_OI[s]):
        op = build_step_graph(LLAMA_33B, q, s, batch=16).op("attn_score")
        assert _close(op.intensity, expected), (s, q, op.intensity, expected)
        assert _close(build_step_graph(LLAMA_33B, q, s, batch=16).op("attn_value").intensity, expected)


@pytest.mark.parametrize("batch", TABLE7_BATCHES)
def test_medusa_table7_attention_intensity_independent_of_batch(batch):
    for q, expected in zip(Q_COLUMNS, TABLE7_OI):
        assert _close(build_step_graph(LLAMA_33B, q, 1024, batch=batch).op("attn_score").intensity, expected)


@pytest.mark.parametrize("batch", sorted(TABLE8_MLP_OI))
def test_medusa_table8_mlp_intensity(batch):
    for q, expected in zip(Q_COLUMNS, TABLE8_MLP_OI[batch]):
        graph = build_step_graph(LLAMA_33B, q, 1024, batch=batch)
        for name in ("gate_proj", "up_proj", "down_proj"):
            assert _close(graph.op(name).intensity, expected), (batch, q, name, graph.op(name).intensity)


def test_medusa_example_attention_intensity_llama2_7b():
    graph = build_step_graph(get_model("llama2-7b"), 64, 1024)
    assert round(graph.op("attn_score").intensity, 2) == 40.96


def test_flops_and_bytes_of_a_linear_follow_the_formula():
    model = get_model("llama2-7b")
    graph = build_step_graph(model, 8, 100, batch=2)
    op = graph.op("gate_proj")
    T, h, i, dt = 16, 4096, 11008, 2
    assert op.flops == 2 * T * h * i
    assert op.bytes == dt * (T * h + T * i + h * i)
    assert op.count == model.n_layers


def test_gqa_reads_only_the_kv_heads():
    mha = build_step_graph(get_model("llama2-70b"), 1, 4096)
    # llama2-70b: 64 query heads, 8 KV heads, head dim 128 -> K read = 8 * 4096 * 128 * 2 bytes
    assert mha.op("attn_score").kv_bytes == 2 * 8 * 4096 * 128


def test_tree_density_reaches_the_sparse_operators():
    tree = TokenTree.medusa_default()
    graph = build_step_graph(get_model("vicuna-7b"), tree.size, 256, tree=tree)
    assert graph.op("tree_score").density == pytest.approx(tree.mask_density)
    assert graph.op("tree_score").density < 0.2
    with pytest.raises(ValueError, match="tree has 64 tokens but the step has 8"):
        build_step_graph(get_model("vicuna-7b"), 8, 256, tree=tree)


@pytest.mark.parametrize("bad", [{"tokens": 0}, {"context": -1}, {"batch": 0}, {"tokens": 1.5}])
def test_bad_step_sizes_are_clear_errors(bad):
    args = {"tokens": 1, "context": 1, "batch": 1} | bad
    with pytest.raises(ValueError, match=next(iter(bad))):
        build_step_graph(get_model("gpt2"), args["tokens"], args["context"], args["batch"])


# ---------------------------------------------------------------------- roofline laws
GPU = get_platform("a100-80gb-pcie").device("gpu")
MODELS = ("llama2-7b", "tinyllama-1.1b", "gpt2", "llama3.1-8b")
sizes = st.tuples(st.sampled_from(MODELS), st.integers(1, 256), st.integers(0, 8192), st.integers(1, 32))


@settings(max_examples=60, deadline=None)
@given(sizes)
def test_no_operator_beats_the_physical_memory_limit(case):
    name, q, s, b = case
    graph = build_step_graph(get_model(name), q, s, b)
    price = price_step(graph, GPU)
    for p in price.ops:
        assert p.time_s >= p.op.bytes * p.op.count / GPU.mem_bw_bytes_per_s * (1 - 1e-12)
        assert p.time_s >= p.timing.effective_flops * p.op.count / GPU.peak_flops_per_s(graph.dtype) * (1 - 1e-12)
    assert price.total_s >= graph.total_bytes / GPU.mem_bw_bytes_per_s


@settings(max_examples=60, deadline=None)
@given(sizes, st.floats(1.0, 8.0), st.floats(1.0, 8.0))
def test_more_bandwidth_or_flops_is_never_slower(case, bw_scale, flop_scale):
    name, q, s, b = case
    graph = build_step_graph(get_model(name), q, s, b)
    faster = dataclasses.replace(
        GPU, mem_bw_gbps=GPU.mem_bw_gbps * bw_scale,
        peak_tflops={k: v * flop_scale for k, v in GPU.peak_tflops.items()},
    )
    assert price_step(graph, faster).total_s <= price_step(graph, GPU).total_s * (1 + 1e-12)


def test_memory_bound_decode_becomes_compute_bound_with_many_tokens():
    model = get_model("llama2-7b")
    assert price_step(build_step_graph(model, 1, 1024), GPU).ops[1].timing.bound == "memory"
    big = price_step(build_step_graph(model, 4096, 1024), GPU)
    assert {p.timing.bound for p in big.ops if p.op.kind == "linear"} == {"compute"}


def test_tile_quantization_makes_latency_rise_in_steps():
    model = get_model("llama2-7b")
    tile = GPU.token_tile
    # ~900+ tokens make the MLP compute-bound; 1024 - tile + 1 .. 1024 tokens fill the same tiles
    lo, first = 1024 - tile, 1024 - tile + 1
    t = {q: price_step(build_step_graph(model, q, 0), GPU).time_of("gate_proj") for q in (lo, first, 1024, 1025)}
    assert t[first] == pytest.approx(t[1024]) and t[lo] < t[first] and t[1024] < t[1025]
    # compute time: one more tile for one more token
    compute = {q: next(p for p in price_step(build_step_graph(model, q, 0), GPU).ops
                       if p.op.name == "gate_proj").timing.compute_s for q in (1024, 1025)}
    assert compute[1025] / compute[1024] == pytest.approx((1024 // tile + 1) / (1024 // tile))


# ---------------------------------------------------------------------- CLI
def test_cli_step_json_has_the_attention_intensity():
    result = run_cli("step", "--model", "llama2-7b", "--platform", "a100-80gb-pcie", "--tokens", "64",
                     "--context", "1024", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert {"total_s", "ops"} <= set(data)
    attn = [op for op in data["ops"] if op["name"] == "attn_score"][0]
    assert attn["intensity"] == 40.96
    for op in data["ops"]:
        assert {"name", "flops", "bytes", "intensity", "time_s", "bound"} <= set(op)
    assert data["total_s"] == pytest.approx(sum(op["time_s"] for op in data["ops"]))


@pytest.mark.parametrize("args, unknown", [
    (["--model", "llama9"], "unknown model 'llama9'; valid: gpt2"),
    (["--platform", "abacus"], "unknown platform 'abacus'; valid: a100-80gb-pcie"),
    (["--device", "tpu"], "'tpu'; valid: cpu, gpu"),
])
def test_cli_unknown_names_fail_with_one_line(args, unknown):
    base = {"--model": "llama2-7b", "--platform": "a100-80gb-pcie"}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    argv = ["step", *[x for kv in base.items() for x in kv], "--tokens", "1", "--context", "1"]
    result = run_cli(*argv)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hetspec: error:") and unknown in lines[0]
