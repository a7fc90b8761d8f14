"""``hetspec bench``: step times per token count, the weight layouts, the ar decode and the copy
bandwidth measured in the same run, on a tiny random-weight shape (the real shapes are for timing)."""

from __future__ import annotations

import json

import pytest
import torch

from hwmodels.errors import HetSpecError
from real.model import random_models
from real.model.random_models import RANDOM_SHAPES, random_spec, random_transformer, streamed_bytes
from real.run import bench
from sim.model_spec import ModelSpec

TINY = ModelSpec(name="random-tiny", n_layers=2, hidden=64, intermediate=128, n_heads=4, n_kv_heads=2, vocab=97,
                 dtype="fp32", max_position=256, tie_embeddings=True)


@pytest.fixture
def tiny_shape(monkeypatch):
    monkeypatch.setitem(random_models.RANDOM_SHAPES, "random-tiny", TINY)
    monkeypatch.setattr(bench, "CPU_COPY_BYTES", 8 * 2**20)


def test_bench_on_the_cpu(tiny_shape):
    result = bench.run_bench("random-tiny", device="cpu", tokens=(1, 2, 8), context=16, repeats=2, decode=4,
                             threads=1, layout="all", progress=False)
    assert [r.tokens for r in result.rows] == [1, 2, 8]
    assert [r.layout for r in result.rows] == ["in-out", "in-out", "hf"]           # the CPU policy
    assert all(set(r.by_layout) == {"hf", "fused", "in-out"} for r in result.rows)
    assert all(r.graph_ms is None for r in result.rows)                            # no CUDA graphs on a CPU
    assert result.copy_gbps > 0 and result.weight_bytes == streamed_bytes(TINY, 4)
    assert set(result.decode_by_layout) == {"hf", "fused", "in-out"} and result.decode_eager_ms > 0
    doc = json.loads(json.dumps(result.to_json()))
    assert 0 < doc["rows"][0]["eager_stream_fraction"] and doc["decode_graph_stream_fraction"] is None
    text = "\n".join(result.lines())
    assert "copy bandwidth" in text and "ar decode (in-out)" in text and "not on a CPU" in text


def test_bench_refuses_what_it_cannot_run(tiny_shape):
    with pytest.raises(HetSpecError, match="fp16 runs on CUDA only"):
        bench.run_bench("random-tiny", device="cpu", dtype="fp16", progress=False)
    with pytest.raises(HetSpecError, match="exceed random-tiny's 256 positions"):
        bench.run_bench("random-tiny", device="cpu", context=250, progress=False)
    with pytest.raises(HetSpecError, match="unknown random-weight model"):
        bench.run_bench("random-gpt5", device="cpu", progress=False)
    with pytest.raises(HetSpecError, match="--tokens"):
        bench.parse_tokens("1,x")


def test_random_shapes_of_the_gpu_models():
    seven = random_spec("random-llama2-7b")
    assert seven.params == pytest.approx(6.74e9, rel=0.01) and seven.dtype == "fp16"
    tiny = random_spec("random-tinyllama-1.1b")
    assert tiny.params == pytest.approx(1.10e9, rel=0.01) and tiny.n_kv_heads == 4
    assert {"random-smollm-135m", "random-smollm-360m"} <= set(RANDOM_SHAPES)
    model = random_transformer(TINY, dtype=torch.bfloat16)
    assert model.lm_head.weight is model.model.embed_tokens.weight                 # still tied
    assert model.lm_head.weight.dtype == model.rope_cos.dtype == torch.bfloat16
    assert float(model.model.layers[0].mlp.up_proj.weight.float().std()) == pytest.approx(0.02, rel=0.1)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
def test_bench_on_the_gpu_times_graphs(tiny_shape):
    result = bench.run_bench("random-tiny", device="cuda:0", tokens=(1, 64), context=16, repeats=2, decode=4,
                             progress=False)
    assert result.dtype == "fp16" and all(r.graph_ms is not None and r.graph_ms > 0 for r in result.rows)
    assert result.decode_graph_ms is not None
