"""Helpers of the tests that decode the demo models (imported by the tests, like ``cli_runner``):
evaluation prompts and the reference tokens that another decoding path must reproduce."""

from __future__ import annotations


def evaluation_prompts(demo, count: int, prompt_tokens: int, seed: int) -> list[list[int]]:
    """``count`` token-id prompts of ``prompt_tokens`` tokens from the demo corpus's evaluation files."""
    from real.train.corpus import prompts

    return prompts(demo.tokenizer, "evaluation", count, prompt_tokens, seed=seed)


def token_ids(result) -> list[list[int]]:
    """The generated token ids of each prompt of a :class:`real.run.session.RunResult`."""
    return [r.ids for r in result.results]


def reference_ids(demo, prompts, max_new_tokens: int, method: str = "ar", config=None) -> list[list[int]]:
    """The tokens of a plain single-worker run of ``prompts`` (greedy ``ar`` unless ``method`` and
    ``config`` are given; no warm-up)."""
    import torch

    from real.decode.ar import ArConfig
    from real.run.session import run_prompts

    with torch.inference_mode():
        return token_ids(run_prompts(demo, method, config or ArConfig(), prompts, max_new_tokens, warmup=False))


def host_platform_folder(tmp_path) -> str:
    """A platform folder holding a ``host`` with plausible CPU numbers (the calibration itself is tested
    elsewhere): what ``HETSPEC_PLATFORMS_DIR`` points at for a validation on the tiny models."""
    from dataclasses import replace

    from hwmodels.loader import write_platform_file
    from hwmodels.platform import Device, LoopCosts, MemoryDomain, Platform

    dev = Device(name="cpu", kind="cpu", peak_tflops={"fp32": 0.1}, mem_bw_gbps=20.0, mem_capacity_gb=16.0,
                 bw_efficiency=1.0, compute_efficiency=1.0, op_overhead_us=8.0, token_tile=1,
                 sparse_attn_efficiency=0.0, cores=1, gemm_efficiency_curve=((1, 0.08), (16, 0.5), (64, 0.8)),
                 cache_gb=0.032, cache_bw_gbps=80.0, cache_gemm_efficiency_curve=((1, 0.3), (16, 0.8)),
                 sources={"peak_tflops.fp32": "test"})
    plat = Platform(name="host", description="test host", devices={"cpu": dev, "cpu0": replace(dev, name="cpu0")},
                    memory_domains=(MemoryDomain(name="dram", devices=("cpu", "cpu0"), bw_gbps=20.0, capacity_gb=16.0,
                                                 contention_efficiency=0.9),),
                    loop_costs={"cpu": LoopCosts(device="cpu", costs_us={"chain_step": 40.0, "medusa_node": 2.0},
                                                 sources={"chain_step": "test", "medusa_node": "test"})})
    folder = tmp_path / "platforms"
    write_platform_file(plat, folder / "host.toml")
    return str(folder)
