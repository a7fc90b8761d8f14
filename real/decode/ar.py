"""``ar``: autoregressive decoding with the KV cache, greedy or sampled — the baseline.

One target forward per token. The cache is allocated once for the whole request and written by
slot; each step feeds the previous token (``[1, 1]``), commits it, and picks the next one from the
last logits. Per-step work is constant: no tensor grows with the sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from real.decode.common import (
    Clock,
    DecodeResult,
    Sampling,
    StepLog,
    check_request,
    choose_token,
    model_device,
    prefill,
    prompt_tensor,
)

NAME = "ar"


@dataclass(frozen=True)
class ArConfig:
    sampling: Sampling = field(default_factory=Sampling)


def generate(models, prompt, max_new_tokens: int, config: ArConfig, clock: Clock,
             generator: torch.Generator | None = None) -> DecodeResult:
    target = models.target
    cache_len = check_request(models, prompt, max_new_tokens, extra_tokens=1)
    log = StepLog(NAME, len(prompt), max_new_tokens, clock)
    with torch.inference_mode():
        device = model_device(target)
        t = clock.now()
        cache, logits = prefill(target, prompt_tensor(prompt, device), cache_len)   # logits [1, 1, vocab]
        token = choose_token(logits[0, -1], config.sampling, generator)
        log.prefill_done(int(token), t)
        keep_one = (0,)
        while log.remaining > 0:
            t = clock.now()
            logits = target(token.view(1, 1), cache)                  # [1, 1, vocab]
            cache.keep(keep_one)
            token = choose_token(logits[0, -1], config.sampling, generator)
            log.emit([int(token)])
            log.step_done("decode", t, clock.now(), proposed=0, accepted=1)
    return log.finish()
