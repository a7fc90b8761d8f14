"""``--device`` / ``--dtype`` / ``--graphs`` of the single-device methods (real.model.placement): names
checked without torch, a device this machine lacks is one line and exit 2 before any model loads, the
defaults, and models moved (copies, never the caller's) with CUDA graphs attached where asked."""

from __future__ import annotations

import pytest
import torch
from cli_runner import run_cli

from hwmodels.errors import HetSpecError
from real.model.placement import Placement, check_device_name, place_models, resolve
from real.run.request import RunRequest

NO_CUDA = not torch.cuda.is_available()


@pytest.mark.parametrize("text,name", [("cpu", "cpu"), ("cuda", "cuda:0"), ("cuda:0", "cuda:0"), ("cuda:3", "cuda:3"),
                                       (None, None)])
def test_device_names(text, name):
    assert check_device_name(text) == name


@pytest.mark.parametrize("kwargs,message", [
    ({"method": "ar", "device": "gpu"}, "--device 'gpu': give cpu, cuda or cuda:N"),
    ({"method": "ar", "dtype": "fp8"}, "--dtype 'fp8': give one of fp32, fp16, bf16"),
    ({"method": "ar", "graphs": "maybe"}, "--graphs 'maybe': give one of auto, on, off"),
    ({"method": "hcmp", "device": "cuda:0"}, "hcmp places its work with --workers (e.g. cuda:0,cpu), not --device"),
    ({"method": "dovetail", "dtype": "bf16"}, "dovetail places its work with --workers"),
    ({"method": "draft-tree", "memory_budget": "60MB", "device": "cpu"}, "--memory-budget streams"),
])
def test_bad_placements_fail_in_the_request(kwargs, message):
    with pytest.raises(HetSpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RunRequest(**kwargs)


def test_defaults(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve() == Placement("cpu", "fp32", graphs=False)
    assert resolve("cpu", "bf16") == Placement("cpu", "bf16", graphs=False)
    with pytest.raises(HetSpecError, match="--dtype fp16 runs on CUDA only"):
        resolve("cpu", "fp16")
    with pytest.raises(HetSpecError, match="--graphs on needs a CUDA device"):
        resolve("cpu", graphs="on")
    with pytest.raises(HetSpecError, match=r"--device cuda:0: this machine has no CUDA device"):
        resolve("cuda:0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve() == Placement("cuda:0", "fp32", graphs=True)        # CUDA graphs by default on a GPU
    assert resolve(graphs="off").graphs is False
    with pytest.raises(HetSpecError, match="this machine has 1 CUDA device"):
        resolve("cuda:1")


@pytest.mark.skipif(not NO_CUDA, reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("args", [
    ["run", "--method", "ar", "--device", "cuda:0"],
    ["run", "--compare", "ar,medusa", "--device", "cuda"],
    ["profile-acceptance", "--out", "p.json", "--device", "cuda:0"],
    ["bench", "--device", "cuda:0"],
    ["validate", "--quick", "--device", "cuda:0"],
    ["demo", "--device", "cuda"],
])
def test_cuda_without_cuda_is_one_line(args, tmp_path):
    proc = run_cli(*args, env={"HETSPEC_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cuda:0: this machine has no CUDA device" in lines[0], proc.stderr
    assert not any(tmp_path.iterdir())            # refused before any model was trained or loaded


def test_placing_copies_the_callers_models():
    from real.decode.common import DecodeModels
    from real.model.transformer import Transformer
    from sim.model_spec import ModelSpec

    spec = ModelSpec(name="t", n_layers=1, hidden=16, intermediate=32, n_heads=2, n_kv_heads=1, vocab=31,
                     dtype="fp32", max_position=64)
    models = DecodeModels(Transformer(spec).eval())
    same = place_models(models, Placement("cpu", "fp32", graphs=False))
    assert same.target is models.target
    bf16 = place_models(models, Placement("cpu", "bf16", graphs=False))
    assert bf16.target is not models.target and bf16.target.lm_head.weight.dtype == torch.bfloat16
    assert models.target.lm_head.weight.dtype == torch.float32
    with torch.inference_mode():
        cache = bf16.target.new_cache(16)
        assert cache.k.dtype == torch.bfloat16
        assert bf16.target(torch.tensor([[1, 2, 3]]), cache).shape == (1, 3, 31)


def test_run_on_the_cpu_in_bf16_reports_its_placement(tiny_demo):
    from real.run.demo_run import run_demo

    result, info = run_demo(RunRequest("chain", prompts=1, max_new_tokens=8, device="cpu", dtype="bf16"),
                            progress=False)
    assert info["device"] == "cpu" and info["dtype"] == "bf16" and info["graphs"] is False
    assert len(result.results[0].ids) == 8
