"""``chain``: draft-model speculation (Leviathan et al. 2023; Dovetail §II).

Each step the draft proposes γ tokens autoregressively with its own KV cache, and the target
verifies the root and the γ proposals (γ + 1 positions, causal) in one pass. Greedy: accept the
longest prefix equal to the target's argmax, then the target's own token. Sampled: lossless
speculative sampling (:func:`real.decode.speculative_sampling.speculative_sample`).

Draft cache: tokens the draft has not yet seen (the *lag*: the target's token of the last step,
preceded by the last proposal when all γ were accepted) are fed at the start of the next
proposal, so the draft's committed prefix always ends right before them. After verification the
draft keeps the K/V of the lag and of the accepted proposals it fed and drops the rest (its
pending block is contiguous, so this is a truncation).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from hwmodels.errors import HetSpecError
from real.decode.common import (
    Clock,
    DecodeResult,
    Sampling,
    StepLog,
    check_request,
    choose_token,
    model_device,
    prefill,
    probs_from_logits,
    prompt_tensor,
    require,
)
from real.decode.device_tree import read_back
from real.decode.speculative_sampling import speculative_sample_tensors
from real.model.executor import declare_widths

NAME = "chain"

#: Default draft length. Dovetail §II: with a CPU verifier few draft tokens are best (T_V(γ)/T_T
#: rises sharply with γ). Measured on the small demo models, one thread: γ = 2/3/4 gave
#: 1.36/1.69/1.62x over ar (docs/decode-methods.md).
DEFAULT_GAMMA = 3


@dataclass(frozen=True)
class ChainConfig:
    draft_depth: int = DEFAULT_GAMMA       # gamma: draft tokens per step
    sampling: Sampling = field(default_factory=Sampling)

    def __post_init__(self) -> None:
        if not isinstance(self.draft_depth, int) or self.draft_depth < 1:
            raise HetSpecError(f"chain: gamma (draft tokens per step) must be an integer >= 1, got {self.draft_depth!r}")


def generate(models, prompt, max_new_tokens: int, config: ChainConfig, clock: Clock,
             generator: torch.Generator | None = None) -> DecodeResult:
    target, draft = models.target, require(models, "draft", NAME)
    cache_len = check_request(models, prompt, max_new_tokens, extra_tokens=config.draft_depth + 1)
    sampling = config.sampling
    log = StepLog(NAME, len(prompt), max_new_tokens, clock)
    declare_widths(target, (config.draft_depth + 1,))   # the verify width of every step but the last
    declare_widths(draft, expect=2)                      # the lag: one or two tokens, then one per pass
    with torch.inference_mode():
        device = model_device(target)
        t = clock.now()
        tokens = prompt_tensor(prompt, device)                               # [1, n]
        t_cache, logits = prefill(target, tokens, cache_len)                 # logits [1, 1, vocab]
        d_cache, _ = prefill(draft, tokens, cache_len, slot="draft")
        root_t = choose_token(logits[0, -1], sampling, generator).view(1)
        log.prefill_done(read_back(root_t)[0], t)
        lag = root_t                       # [m]: tokens the draft has not fed yet; lag[-1] is the root

        while log.remaining > 0:
            step = log.step
            gamma = min(config.draft_depth, log.remaining - 1)   # the last step needs no more proposals
            drafts: list[Tensor] = []                            # [1] each, on the device
            q_rows = []
            feed = lag.view(1, -1)                                              # [1, m]
            for _ in range(gamma):
                t = clock.now()
                d_logits = draft(feed, d_cache, last_only=True)[0, -1]     # [vocab]
                if sampling.greedy:
                    x = d_logits.argmax().view(1)
                else:
                    q_i = probs_from_logits(d_logits, sampling)
                    q_rows.append(q_i)
                    x = torch.multinomial(q_i, 1, generator=generator)
                drafts.append(x)
                log.draft_tokens += feed.shape[1]
                feed = x.view(1, 1)
                log.draft_passes += 1
                clock.record(step, "draft", t, clock.now())

            t = clock.now()
            block = torch.cat([lag[-1:], *drafts]).view(1, -1)                   # [1, g+1]
            v_logits = target(block, t_cache)[0]                                # [g+1, vocab]
            t_verified = clock.now()
            # acceptance on the device; the step's one read-back
            if sampling.greedy:
                best = v_logits.argmax(-1)                                      # [g+1]
                n_acc_t = (best[:gamma] == block[0, 1:]).int().cumprod(0).sum().view(1)
                nxt_t = best.gather(0, n_acc_t)
            else:
                p = probs_from_logits(v_logits, sampling)                       # [g+1, vocab]
                q = torch.stack(q_rows) if q_rows else p[:0]
                n_acc_t, nxt_t = speculative_sample_tensors(p, q, block[0, 1:], generator)
            values = read_back(n_acc_t, nxt_t, block[0, 1:])
            n_acc, nxt = values[0], values[1]

            t_cache.keep(range(n_acc + 1))                                  # root + accepted drafts
            if gamma == 0:
                lag = torch.cat([lag, nxt_t])
            else:
                # fed: the lag, then d_1..d_{g-1}; keep the lag and the accepted ones among those
                d_cache.keep(range(len(lag) + min(n_acc, gamma - 1)))
                lag = torch.cat([drafts[-1], nxt_t]) if n_acc == gamma else nxt_t
            kept = log.emit(values[2:2 + n_acc] + [nxt])
            clock.record(step, "accept", t_verified, clock.now())
            log.step_done("verify", t, t_verified, proposed=gamma, accepted=kept)
    return log.finish()
