"""``alspec``: attention-level speculation on two workers (ALSpec, §3).

Greedy autoregressive decoding in which every layer of every decode step runs ALSpec's Alg. 1
on a *sender* worker (``workers[0]``) and a *receiver* worker (``workers[1]``):

1. the sender runs the pre-attention operators (norm, Q/K/V, RoPE, cache write), then the
   approximate attention ``A~`` over the first ``S`` and the last ``S`` cached tokens (a sink and
   a window, §3.1; S = ``window``) and hands ``A~`` to the receiver;
2. the receiver starts the rest of the layer on it (output projection, residual, norm, MLP,
   residual) while the sender computes the exact attention ``A`` over the whole cache;
3. the check ``||A~ - A|| < lambda ||A||`` (§3.2, per token over all heads) decides: a *hit* takes
   the receiver's output as the layer's output; a *miss* recomputes the rest of the layer on the
   sender with ``A`` (the receiver's speculative work is discarded).

With ``lambda = 0`` no check passes (the inequality is strict), every layer is recomputed from the
exact attention with the model's own operators, and the output equals greedy ``ar`` token for
token. With ``lambda > 0`` ALSpec is lossy; the run reports the hit rate per layer and the
runner compares the tokens with exact decoding.

Departures, marked: (a) the exact attention is computed on its own (``scaled_dot_product_attention``
over all keys, as the model does) instead of reusing the approximation as the first chunk of a
speculative flash decode (App. B), so a miss reproduces the model bit for bit; (b) no role swap on
a hit: the sender adopts the receiver's output (the two CPU workers share memory, so nothing
moves; the paper swaps roles to avoid sending the residual back over Ethernet); (c) the receiver
does not start the next layer's pre-attention operators. The prompt pass runs exactly on the
sender (ALSpec speculates in decode only).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from hwmodels.errors import HetSpecError
from real.decode.common import (
    Clock,
    DecodeResult,
    StepLog,
    check_request,
    prefill,
    prompt_tensor,
)
from real.hetero.layer_ops import exact_attention, post_attention, project_qkv, write_kv
from real.hetero.workers import WorkerSession, in_runtime, parse_workers, record

NAME = "alspec"
#: ALSpec's recommended threshold (§3.2; Fig. 2 uses 0.10).
DEFAULT_LAMBDA = 0.10
#: Sink and window size S. The paper's S = 128-512 covers 1/1000-1/30 of 16K-128K contexts; the
#: demo decodes 64-token prompts to ~130 tokens, where S = 16 (32 of ~100 cached tokens) keeps the
#: approximation an approximation (S >= context / 2 makes it exact).
DEFAULT_WINDOW = 16
DEFAULT_WORKERS = ("cpu0", "cpu1")


@dataclass(frozen=True)
class AlspecConfig:
    lam: float = DEFAULT_LAMBDA                    # lambda of the norm check
    window: int = DEFAULT_WINDOW                   # S: sink tokens and recent-window tokens
    workers: tuple[str, ...] = DEFAULT_WORKERS     # (sender, receiver)
    trace_ops: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.lam, bool) or not isinstance(self.lam, (int, float)) or not self.lam >= 0.0:
            raise HetSpecError(f"alspec: lambda must be a number >= 0, got {self.lam!r}")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1:
            raise HetSpecError(f"alspec: window S must be an integer >= 1, got {self.window!r}")
        workers = tuple(self.workers)
        if len(workers) != 2 or workers[0] == workers[1]:
            raise HetSpecError(f"alspec needs two different workers (sender,receiver), got {','.join(workers)}")
        object.__setattr__(self, "workers", workers)
        object.__setattr__(self, "lam", float(self.lam))


class AlspecRuntime:
    """Workers and the hit statistics of a run (per layer, over every decode step of every prompt)."""

    def __init__(self, models, config: AlspecConfig):
        self.models = models
        self.target = models.target
        self.workers = parse_workers(config.workers, 2)
        devices = {torch.device(w.device) for w in self.workers}
        if len(devices) != 1 or torch.device(self.workers[0].device) != next(self.target.parameters()).device:
            raise HetSpecError("alspec: both workers must run on the target's device (the receiver reads the "
                               f"sender's residual and weights in shared memory); got {','.join(config.workers)}")
        self.session = WorkerSession(self.workers)
        n = self.target.spec.n_layers
        self.hits = [0] * n
        self.checks = [0] * n
        self.rel_errors: list[float] = []      # ||A~ - A|| / ||A|| of every check

    @property
    def hit_rate(self) -> float:
        return sum(self.hits) / sum(self.checks) if sum(self.checks) else float("nan")

    def hit_rates_by_layer(self) -> list[float]:
        return [h / c if c else float("nan") for h, c in zip(self.hits, self.checks)]

    def reset_stats(self) -> None:
        n = len(self.hits)
        self.hits, self.checks, self.rel_errors = [0] * n, [0] * n, []

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> "AlspecRuntime":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def prepare(models, config: AlspecConfig) -> AlspecRuntime:
    return AlspecRuntime(models, config)


def sink_window_attention(attn, xq, cache, layer: int, end: int, window: int):
    """ALSpec's approximation: attention of ``xq [1, H, 1, hd]`` over cache slots ``[0, S)`` and
    ``[end - S, end)`` (every slot when ``end <= 2 S``) -> ``[1, 1, H * hd]``."""
    keys, values = cache.k[layer, :1, :, :end], cache.v[layer, :1, :, :end]
    if end > 2 * window:
        keys = torch.cat([keys[:, :, :window], keys[:, :, end - window:]], dim=2)
        values = torch.cat([values[:, :, :window], values[:, :, end - window:]], dim=2)
    out = F.scaled_dot_product_attention(xq, keys, values, enable_gqa=attn.n_kv != attn.n_heads)
    return out.transpose(1, 2).reshape(1, 1, attn.n_heads * attn.hd)


def speculative_step(rt: AlspecRuntime, token, cache, config: AlspecConfig, clock: Clock, step: int):
    """One decode step (one token) with attention-level speculation in every layer -> logits ``[V]``."""
    target, session = rt.target, rt.session
    spec_w, recv_w = rt.workers[0].name, rt.workers[1].name
    ops = config.trace_ops
    now = time.perf_counter
    start = cache.reserve(1)
    pos = torch.tensor([start], device=token.device)
    cos, sin = target.rope_cos[pos].unsqueeze(1), target.rope_sin[pos].unsqueeze(1)
    x = target.model.embed_tokens(token.view(1, 1))                                       # [1, 1, d]

    def speculate(layer_module, x_in, approx):
        t0 = now()
        out = post_attention(layer_module, x_in, approx)
        return out, t0, now()

    for i, layer in enumerate(target.model.layers):
        attn = layer.self_attn
        t0 = now()
        xq, xk, xv = project_qkv(attn, layer.input_layernorm(x), cos, sin)
        end = write_kv(cache, i, start, xk, xv)
        approx = sink_window_attention(attn, xq, cache, i, end, config.window)          # [1, 1, H*hd]
        t1 = now()
        session.submit(1, speculate, layer, x, approx)                                   # receiver: rest of the layer
        exact = exact_attention(attn, xq, cache, i, end, None)                           # sender: exact attention
        t2 = now()
        err = float(torch.linalg.vector_norm(approx - exact))
        ref = float(torch.linalg.vector_norm(exact))
        hit = err < config.lam * ref
        rt.checks[i] += 1
        rt.rel_errors.append(err / ref if ref > 0 else 0.0)
        x_spec, r0, r1 = session.result(1)
        if hit:
            rt.hits[i] += 1
            x = x_spec
            t3 = t2
        else:
            x = post_attention(layer, x, exact)                                          # rollback: recompute
            t3 = now()
        if ops:
            base = clock.t0
            record(clock, spec_w, step, "attention", t0 - base, t1 - base, op=f"L{i}/approx")
            record(clock, spec_w, step, "attention", t1 - base, t2 - base, op=f"L{i}/exact")
            record(clock, recv_w, step, "decode", r0 - base, r1 - base, op=f"L{i}/post_attn_speculative")
            if not hit:
                record(clock, spec_w, step, "recompute", t2 - base, t3 - base, op=f"L{i}/post_attn")
    cache.pending += 1
    hidden = target.model.norm(x)
    return target.lm_head(hidden)[0, -1]                                                # [V]


def generate(models, prompt, max_new_tokens: int, config: AlspecConfig, clock: Clock,
             generator: torch.Generator | None = None) -> DecodeResult:
    return in_runtime(AlspecRuntime, models, config, lambda rt: _generate(rt, prompt, max_new_tokens, config, clock))


def _generate(rt: AlspecRuntime, prompt, max_new_tokens: int, config: AlspecConfig, clock: Clock) -> DecodeResult:
    target = rt.target
    cache_len = check_request(rt.models, prompt, max_new_tokens, extra_tokens=1)
    log = StepLog(NAME, len(prompt), max_new_tokens, clock)
    with torch.inference_mode():
        device = next(target.parameters()).device
        t = clock.now()
        cache, logits = prefill(target, prompt_tensor(prompt, device), cache_len)      # exact prompt pass
        token = logits[0, -1].argmax()
        log.prefill_done(int(token), t)
        while log.remaining > 0:
            step = log.step
            t = clock.now()
            logits = speculative_step(rt, token, cache, config, clock, step)
            cache.keep((0,))
            token = logits.argmax()
            log.emit([int(token)])
            log.step_done("decode", t, clock.now(), proposed=0, accepted=1)
    return log.finish()
