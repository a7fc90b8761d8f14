"""Pieces every decode method shares: sampling, the models bundle, step timing and results.

Conventions of all decoders in :mod:`real.decode`:

- A decoder is ``generate(models, prompt, max_new_tokens, config, clock) -> DecodeResult``.
- It emits exactly ``max_new_tokens`` tokens; the first comes from the prefill pass (the target's
  prediction after the last prompt token), every later one from a decode step.
- Target KV cache invariant between steps: the committed prefix holds every token of
  prompt + output *except the last one*, the *root*, which the next step feeds (AR) or verifies
  as node 0 of its token tree (speculative methods; see :mod:`sim.tree`).
- Times come from ``time.perf_counter()`` relative to the :class:`Clock`'s start, so the traces of
  several prompts of one run share a time axis, and their steps are numbered consecutively.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from hwmodels.errors import HetSpecError
from real.decode.sampling import Sampling
from sim.trace import TraceRecord

__all__ = ["Sampling"]  # re-exported: decoders and tests take it from here

#: Worker name written in the ``device`` column of real traces (one CPU worker runs everything).
DEFAULT_WORKER = "cpu"

#: Slack added to the KV cache beyond prompt + output + one tree, so the last step's
#: speculative tokens (which may overrun ``max_new_tokens`` before truncation) always fit.
CACHE_SLACK_TOKENS = 8


# ---------------------------------------------------------------------------- sampling
def probs_from_logits(logits: Tensor, sampling: Sampling) -> Tensor:
    """Sampling distribution ``[..., vocab]`` (float32): softmax(logits / T), then nucleus top-p.

    Top-p keeps the smallest set of most likely tokens whose mass reaches ``top_p`` (the token
    that crosses the threshold included) and renormalises. Greedy sampling gives a one-hot.
    """
    logits = logits.float()
    if sampling.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    probs = torch.softmax(logits / sampling.temperature, dim=-1)
    if sampling.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        mass_before = sorted_p.cumsum(-1) - sorted_p      # mass of strictly more likely tokens
        sorted_p = sorted_p.masked_fill(mass_before >= sampling.top_p, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def choose_token(logits: Tensor, sampling: Sampling, generator: torch.Generator | None) -> Tensor:
    """One token id (0-d long tensor) from ``logits [vocab]``: argmax, or a draw from the distribution."""
    if sampling.greedy:
        return logits.argmax()
    return torch.multinomial(probs_from_logits(logits, sampling), 1, generator=generator)[0]


# ---------------------------------------------------------------------------- models
@dataclass(frozen=True)
class DecodeModels:
    """The models a decoder may use. ``real.train.demo.DemoModels`` has the same attributes.

    target: :class:`real.model.transformer.Transformer`. draft: a smaller Transformer sharing the vocabulary
    (``chain``, ``draft-tree``). heads: Medusa heads, ``heads(hidden [b, q, d]) -> logits
    [n_heads, b, q, vocab]`` where head k (1-based) predicts the token k+1 positions after the one
    the LM head predicts (``medusa``).
    """

    target: Any
    draft: Any = None
    heads: Any = None


def require(models, attribute: str, method: str):
    model = getattr(models, attribute, None)
    if model is None:
        raise HetSpecError(f"method {method} needs a {attribute} model, and none was given")
    return model


def check_request(models, prompt, max_new_tokens: int, extra_tokens: int) -> int:
    """Validate a decode request; returns the KV-cache length it needs."""
    if len(prompt) < 1:
        raise HetSpecError("the prompt must hold at least one token")
    if max_new_tokens < 1:
        raise HetSpecError(f"max new tokens must be >= 1, got {max_new_tokens}")
    need = len(prompt) + max_new_tokens + extra_tokens + CACHE_SLACK_TOKENS
    limit = models.target.spec.max_position
    if len(prompt) + max_new_tokens + extra_tokens > limit:
        raise HetSpecError(
            f"prompt ({len(prompt)}) + new tokens ({max_new_tokens}) + one tree ({extra_tokens}) "
            f"exceed the model's max_position {limit}")
    vocab = models.target.spec.vocab
    if min(prompt) < 0 or max(prompt) >= vocab:
        raise HetSpecError(f"prompt token ids must be in [0, {vocab})")
    return need


# ---------------------------------------------------------------------------- timing and traces
class Clock:
    """Time origin, trace records and step numbering of one run (several prompts).

    Mutable on purpose: one instance is created per run and passed down; nothing is global.
    """

    def __init__(self, worker: str = DEFAULT_WORKER):
        self.worker = worker
        self.t0 = time.perf_counter()
        self.records: list[TraceRecord] = []
        self.next_step = 0   # first step number of the next prompt

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def record(self, step: int, phase: str, start_s: float, end_s: float,
               proposed: int = 0, accepted: int = 0) -> None:
        self.records.append(TraceRecord(step=step, phase=phase, device=self.worker, start_s=start_s,
                                        end_s=end_s, tokens_proposed=proposed, tokens_accepted=accepted))


@dataclass(frozen=True)
class DecodeResult:
    """One prompt's decode.

    ids: the generated token ids (exactly ``max_new_tokens``). accepted_per_step: tokens each decode
    step added to the output (for speculative methods: accepted speculative tokens + the target's own
    token; the last step counts only the tokens kept before truncation). proposed_per_step:
    speculative tokens offered to each verification (0 for ``ar``). draft_passes: draft-model
    forward passes (0 without a draft model); draft_tokens: the tokens those passes fed (more than
    one pass each where a round's first pass feeds the lag of a round that accepted everything).
    prefill_s: prompt pass(es) including the first token; decode_s: everything after it.
    """

    method: str
    prompt_tokens: int
    ids: tuple[int, ...]
    accepted_per_step: tuple[int, ...]
    proposed_per_step: tuple[int, ...]
    prefill_s: float
    decode_s: float
    draft_passes: int = 0
    draft_tokens: int = 0
    records: tuple[TraceRecord, ...] = field(default=(), repr=False)

    @property
    def steps(self) -> int:
        return len(self.accepted_per_step)

    @property
    def decode_tokens(self) -> int:
        """Tokens produced by decode steps (all but the prefill's first token)."""
        return sum(self.accepted_per_step)

    @property
    def mean_accepted_per_step(self) -> float:
        return self.decode_tokens / self.steps if self.steps else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def host_s(self) -> float:
        """Decode seconds outside the forwards: the acceptance records plus untraced time (the loop's
        Python between them); what :func:`traced_phase_seconds` leaves beyond draft and verify."""
        per = traced_phase_seconds(self.records)
        return self.decode_s - per["draft"] - per["verify"]


def traced_phase_seconds(records) -> dict[str, float]:
    """Seconds in each traced phase of the decode steps (records with ``step >= 0``): ``draft``,
    ``verify`` (``ar``'s whole step, its ``decode`` record, counts as its target pass) and ``accept``."""
    per = {"draft": 0.0, "verify": 0.0, "accept": 0.0}
    for r in records:
        if r.step >= 0:
            key = "verify" if r.phase == "decode" else r.phase
            per[key] = per.get(key, 0.0) + r.duration_s
    return per


class StepLog:
    """Collects one prompt's per-step counts and closes it into a :class:`DecodeResult`."""

    def __init__(self, method: str, prompt_tokens: int, max_new_tokens: int, clock: Clock):
        self.method, self.prompt_tokens, self.max_new_tokens = method, prompt_tokens, max_new_tokens
        self.clock = clock
        self.first_record = len(clock.records)
        self.step0 = clock.next_step
        self.ids: list[int] = []
        self.accepted: list[int] = []
        self.proposed: list[int] = []
        self.draft_passes = 0
        self.draft_tokens = 0
        self.start_s = clock.now()
        self.prefill_end_s = self.start_s

    @property
    def step(self) -> int:
        """Global number of the step being decoded now."""
        return self.step0 + len(self.accepted)

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - len(self.ids)

    def prefill_done(self, first_token: int, start_s: float) -> None:
        self.prefill_end_s = self.clock.now()
        self.ids.append(first_token)
        self.clock.record(-1, "prefill", start_s, self.prefill_end_s, 0, 1)

    def emit(self, tokens: list[int]) -> int:
        """Append a step's new tokens, truncated to the budget; returns how many were kept."""
        kept = tokens[: self.remaining]
        self.ids.extend(kept)
        return len(kept)

    def step_done(self, phase: str, start_s: float, end_s: float, proposed: int, accepted: int) -> None:
        """Record the deciding pass of the current step (``decode`` or ``verify``) and count it."""
        self.clock.record(self.step, phase, start_s, end_s, proposed, accepted)
        self.accepted.append(accepted)
        self.proposed.append(proposed)

    def finish(self) -> DecodeResult:
        end = self.clock.now()
        self.clock.next_step = self.step
        return DecodeResult(
            method=self.method, prompt_tokens=self.prompt_tokens, ids=tuple(self.ids),
            accepted_per_step=tuple(self.accepted), proposed_per_step=tuple(self.proposed),
            prefill_s=self.prefill_end_s - self.start_s, decode_s=end - self.prefill_end_s,
            draft_passes=self.draft_passes, draft_tokens=self.draft_tokens,
            records=tuple(self.clock.records[self.first_record:]),
        )


def prompt_tensor(prompt, device) -> Tensor:
    """``[1, n]`` long tensor of a prompt given as a sequence of ints or a 1-d tensor."""
    return torch.as_tensor(list(prompt) if not isinstance(prompt, Tensor) else prompt,
                           dtype=torch.long, device=device).view(1, -1)


def model_device(model) -> torch.device:
    return next(model.parameters()).device


def prefill(model, tokens: Tensor, cache_len: int, last_only: bool = True, return_hidden: bool = False,
            slot: str = "main"):
    """The prompt pass: a new KV cache of ``cache_len`` slots holding ``tokens`` (``[1, n]``) committed,
    and the model's output for them (logits ``[1, 1 or n, vocab]``; with ``return_hidden``, also the
    hidden states ``[1, 1 or n, d]``). Returns ``(cache, output)``. ``slot``: which of the model's
    static caches to use when it runs through an executor (a model that drafts for itself needs two)."""
    cache = model.new_cache(cache_len, slot=slot)
    out = model(tokens, cache, last_only=last_only, return_hidden=return_hidden)
    cache.keep(range(tokens.shape[1]))
    return cache, out
