"""The heterogeneous section as it runs on a CUDA machine, on a CPU stand-in.

On a machine with CUDA the section pairs ``cuda:0`` with ``cpu``; ``hetspec validate --hetero`` once
crashed there in the hcmp ratio sweep: the sweep cuts the same models at every ratio, the ratio-1
cut moved the shared Medusa heads to ``cuda:0`` in place (``Module.to``), and the ratio-0 cut then ran
those heads on a CPU hidden state. Here ``cuda_devices`` reports one device and worker ``cuda:0``
computes on torch device ``cpu:0``, which torch compares unequal to ``cpu``: the CUDA case's code path
runs (the pair, separate buffers with explicit copies, models copied to the endpoint's device) with
the arithmetic on the CPU. The shared models must never be moved in place.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from real.run import worker
from real.run.worker import allowed_cores

pytestmark = [pytest.mark.skipif(len(allowed_cores()) < 1, reason="needs a CPU worker"),
              pytest.mark.usefixtures("one_torch_thread")]


def host_like():
    """A CPU-only host platform (cpu, cpu0, cpu1): it describes no ``cuda:0``, so the sweep's predictions
    are reported missing while its measurements run."""
    from hwmodels.platform import Device, Link, MemoryDomain, Platform

    def device(name: str, threads: int) -> Device:
        return Device(name=name, kind="cpu", peak_tflops={"fp32": 0.05 * threads}, mem_bw_gbps=20.0,
                      mem_capacity_gb=8.0, bw_efficiency=1.0, compute_efficiency=1.0, op_overhead_us=8.0,
                      token_tile=1, sparse_attn_efficiency=0.0, cores=threads)

    devices = {"cpu": device("cpu", 2), "cpu0": device("cpu0", 1), "cpu1": device("cpu1", 1)}
    domain = MemoryDomain(name="dram", devices=tuple(devices), bw_gbps=30.0, capacity_gb=16.0, contention_efficiency=0.8)
    link = Link(name="cpu0-cpu1", kind="unified", src="cpu0", dst="cpu1", bw_gbps=30.0, latency_us=10.0, efficiency=1.0)
    return Platform(name="host", description="synthetic host for tests", devices=devices, links=(link,),
                    memory_domains=(domain,))


@pytest.fixture
def cuda_standin(monkeypatch):
    monkeypatch.setattr(worker, "cuda_devices", lambda: 1)
    monkeypatch.setattr(worker, "cuda_torch_device", lambda index: f"cpu:{index}")


@pytest.fixture
def no_inplace_moves(monkeypatch, tiny_demo):
    """Fail when ``Module.to`` is called on one of the shared demo models (a move in place)."""
    shared = {id(tiny_demo.target), id(tiny_demo.draft), id(tiny_demo.heads)}
    original = torch.nn.Module.to
    moved: list[str] = []

    def guarded(self, *args, **kwargs):
        if id(self) in shared:
            moved.append(type(self).__name__)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "to", guarded)
    yield moved
    assert not moved, f"shared models moved in place: {moved}"


def test_the_section_pairs_cuda0_with_cpu(cuda_standin):
    from real.validation.hetero.setup import default_pair, placements

    pair = default_pair()
    assert pair == ("cuda:0", "cpu")
    assert placements(pair) == (("cuda:0", "cpu"), ("cpu", "cuda:0"), ("cuda:0", "cuda:0"), ("cpu", "cpu"))
    gpu = worker.get_worker("cuda:0")
    assert gpu.name == "cuda:0" and gpu.device == "cpu:0" and not gpu.is_cuda


def test_hcmp_ratio_sweep_on_cuda0_and_cpu(cuda_standin, no_inplace_moves, tiny_demo):
    """The crash: the sweep over ratios 0, 0.5 and 1 on ``cuda:0`` + ``cpu`` (heads at both ends)."""
    from real.run.acceptance import measure_profile
    from real.train.corpus import prompts as corpus_prompts
    from real.validation.hetero.hcmp import hcmp_sweep
    from real.validation.hetero.setup import QUICK, default_pair
    from real.validation.predict import PredictionContext

    settings = replace(QUICK, eval_prompts=1, prompt_tokens=32, max_new_tokens=10, repeats=1,
                       ratios=(0.0, 0.5, 1.0), hcmp_width=6)
    calib = [list(p) for p in corpus_prompts(tiny_demo.tokenizer, "calibration", 2, 32, seed=0)]
    with torch.inference_mode():
        profile = measure_profile(tiny_demo, calib, 10, name="t", source="test")
    ctx = PredictionContext(target=tiny_demo.target.spec, draft_config=str(tiny_demo.folder / "draft" / "config.json"),
                            medusa_heads=tiny_demo.heads.n_heads, platform=host_like(), device="cpu", context=40,
                            profile=profile)
    out = hcmp_sweep(tiny_demo, host_like(), ctx, settings, default_pair(), progress=False)
    assert out["workers"] == ["cuda:0", "cpu"] and out["ratios"] == [0.0, 0.5, 1.0]
    assert out["same_tokens_at_every_ratio"]
    assert all(s > 0 for s in out["meas_step_ms"])
    assert "no device for worker cuda:0" in out["missing"]      # the synthetic host describes no GPU


def test_split_heads_at_both_ends_leave_the_shared_heads_alone(cuda_standin, no_inplace_moves, tiny_demo):
    from real.hetero.split_model import SplitTarget
    from real.hetero.workers import WorkerSession, parse_workers

    pair = parse_workers("cuda:0,cpu", 2)
    hidden = torch.randn(tiny_demo.target.spec.hidden)
    with torch.inference_mode():
        reference = tiny_demo.heads(hidden.view(1, 1, -1))[:, 0, 0]
        outs = []
        for ratio in (1.0, 0.0, 0.5):            # the order that crashed: the ratio-1 cut first
            split = SplitTarget(tiny_demo.target, tiny_demo.heads, ratio, (pair[0].device, pair[1].device))
            with WorkerSession(split.session_order(pair)) as session:
                logits, _ = split.heads(session, hidden)
            outs.append(logits)
    for logits in outs:
        torch.testing.assert_close(logits.to("cpu"), reference, rtol=1e-4, atol=1e-4)
