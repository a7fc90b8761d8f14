"""``--device`` of ``hetspec validate`` / ``hetspec demo``: a host CPU device (cpu, cpuN) as calibrated, or a
GPU (cuda:N) decoded there and priced on the platform's device for it (cuda:N, cuda or gpu), found in the
platform ``hetspec calibrate --device cuda:N`` writes when --platform is left at host."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hwmodels.errors import HetSpecError
from real.validation import gpu_target
from real.validation.gpu_target import check_placement, profiled_platform_name, validation_target
from paths import DATA

GPU_PLATFORM = DATA / "h100-sxm-eager.toml"


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_cpu_names_are_the_host_platform_as_calibrated(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert check_placement(None) is None and check_placement("cpu1") is None
    with pytest.raises(HetSpecError, match="--dtype and --graphs apply to a CUDA --device, not cpu"):
        check_placement("cpu", dtype="bf16")
    with pytest.raises(HetSpecError, match="this machine has no CUDA device"):
        check_placement("cuda:0")


def test_a_gpu_is_priced_on_the_platforms_device_for_it(fake_cuda):
    target = validation_target(str(GPU_PLATFORM), "cuda:0", dtype="fp16")
    assert target.device == "gpu" and target.label == "cuda:0"
    assert target.placement.dtype == "fp16" and target.placement.graphs
    assert target.drift_device is target.platform.devices["cpu"]      # the probe re-times the host CPU
    assert validation_target(str(GPU_PLATFORM), None).placement.device == "cuda:0"   # the default on CUDA


def test_the_profiled_platform_is_found_by_itself(fake_cuda, monkeypatch):
    from hwmodels.loader import load_platform_file

    gpu_only = load_platform_file(GPU_PLATFORM)
    loaded = []

    def load_host(name):
        loaded.append(name)
        if name == profiled_platform_name("cuda:0"):
            return gpu_only
        raise HetSpecError(f"unknown platform {name!r}")

    monkeypatch.setattr("real.validation.trust.load_host", load_host)
    target = validation_target("host", "cuda")
    assert loaded[-1] == "profiled-cuda0" and target.device == "gpu"
    loaded.clear()
    monkeypatch.setattr("real.validation.trust.load_host", lambda name: (_ for _ in ()).throw(HetSpecError("none")))
    with pytest.raises(HetSpecError, match=r"--device cuda:0: platform host has no device for it .*"
                                           r"hetspec calibrate --device cuda:0"):
        validation_target("host", "cuda:0")
    assert gpu_target.is_cuda_name("cuda") and not gpu_target.is_cuda_name("cpu0")


def test_a_gpu_decodes_in_the_dtype_its_profile_was_measured_in_unless_asked(fake_cuda):
    assert validation_target(str(GPU_PLATFORM), "cuda:0").placement.dtype == "fp16"      # the profile's dtype
    assert validation_target(str(GPU_PLATFORM), "cuda:0", dtype="bf16").placement.dtype == "bf16"
    assert validation_target("a100-80gb-pcie", "cuda:0").placement.dtype == "fp32"       # a roofline GPU


def test_a_gpu_run_prices_the_draft_in_the_runs_dtype(tmp_path):
    import json

    from real.validation.validate import draft_in_dtype
    from sim.model_spec import get_model

    config = tmp_path / "config.json"
    spec = get_model("llama-68m").with_dtype("fp32")
    config.write_text(json.dumps(spec.to_hf_config()))
    assert get_model(str(config)).dtype == "fp32"
    fp16 = draft_in_dtype(str(config), "fp16", tmp_path)
    assert fp16 != str(config) and get_model(fp16).dtype == "fp16"
    assert get_model(fp16).params == get_model(str(config)).params        # the same model, another dtype
    assert draft_in_dtype(str(config), get_model(str(config)).dtype, tmp_path) == str(config)


H200 = DATA / "profiled-h200.toml"


def test_a_gpu_run_is_priced_in_the_execution_mode_it_runs_in(fake_cuda):
    """A profile measured in both modes (hetspec calibrate --device cuda:N) prices a CUDA-graph run in graph mode
    and an eager run (--graphs off) in eager mode; an eager-only profile keeps the mode its platform declares."""
    from sim.closed_form import step_seconds
    from sim.model_spec import get_model

    graphs, eager = validation_target(str(H200), "cuda:0"), validation_target(str(H200), "cuda:0", graphs="off")
    assert graphs.placement.graphs and not eager.placement.graphs
    g, e = graphs.platform.device("gpu"), eager.platform.device("gpu")
    assert (g.timing.mode, e.timing.mode) == ("graph", "eager")
    assert (g.op_overhead_us, e.op_overhead_us) == (1.541, 14.175)     # each mode's measured launch cost
    assert e.timing.sources["mode"].startswith("eager: the run launches every operator from Python")
    spec = get_model("llama-68m").with_dtype("fp16")
    gap = float(step_seconds(spec, eager.platform, "gpu", 1, 96) - step_seconds(spec, graphs.platform, "gpu", 1, 96))
    assert gap > spec.n_layers * 5 * (14.175 - 1.541) * 1e-6     # several launches a layer, each from Python
    assert validation_target(str(GPU_PLATFORM), "cuda:0").platform.device("gpu").timing.mode == "eager"


def test_a_mode_the_profile_did_not_measure_is_an_error():
    from hwmodels.loader import load_platform_file
    from hwmodels.profile import in_mode

    eager_only = load_platform_file(GPU_PLATFORM).device("gpu")
    assert in_mode(eager_only, "eager", "test") is eager_only
    with pytest.raises(HetSpecError, match=r"was not measured in graph mode, which this run needs \(test\)$"):
        in_mode(eager_only, "graph", "test")


def test_the_random_weight_steps_of_a_gpu_run_are_priced_as_the_eager_forwards_they_are(fake_cuda, monkeypatch):
    from dataclasses import replace

    from real.model import random_models
    from real.model.random_models import StepTiming, random_spec
    from real.validation.gpu_target import priced_as_run
    from real.validation.validate import _random_weight, settings_for
    from sim.closed_form import step_seconds

    target = validation_target(str(H200), "cuda:0")
    monkeypatch.setattr(random_models, "random_transformer", lambda spec, device=None, dtype=None: None)
    monkeypatch.setattr(random_models, "time_steps", lambda model, tokens, context, repeats, tick=None:
                        tuple(StepTiming("r", t, context, 0.02, repeats) for t in tokens))
    settings = replace(settings_for(True), random_models=("random-smollm-135m",), random_tokens=(1, 16))
    rows = _random_weight(settings, target.platform, target.device, 1, False, target.placement)
    spec = random_spec("random-smollm-135m").with_dtype("fp16")
    eager = priced_as_run(target.platform, "gpu", graphs=False)
    for row in rows:
        want = float(step_seconds(spec, eager, "gpu", row["tokens"], row["context"])) * 1e3
        assert row["pred_ms"] == pytest.approx(want)
        assert row["pred_ms"] > float(step_seconds(spec, target.platform, "gpu", row["tokens"], row["context"])) * 1e3
