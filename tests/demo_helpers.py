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
