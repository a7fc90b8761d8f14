"""``hcmp``: Ghidorah's Medusa decoding with every verification pass split over two workers.

The decode loop is :mod:`real.decode.medusa`'s (the same tree buffers, acceptance and cache
compaction); only the target's forward and the heads run split at ratio r on the two workers of
``workers`` (primary first) through :class:`real.hetero.split_model.SplitTarget`. Greedy
acceptance is lossless: greedy ``hcmp`` emits the tokens of greedy ``ar`` (the split changes the
floating-point order of a few reductions, within float tolerance of the unsplit model).

Traces: the step's ``verify`` record (the one carrying the token counts) is on the primary worker;
with ``trace_ops`` each worker's part of every synchronised group is a record of its own
(device = worker name, ``op`` = the group: ``embed``, ``qkv``, ``attention``, ``o_proj``,
``gate_up``, ``down_proj``, ``lm_head``; ``medusa_resblock`` and ``medusa_head`` in phase
``draft``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from hwmodels.errors import HetSpecError
from real.decode.common import (
    Clock,
    DecodeResult,
    StepLog,
    check_request,
    prompt_tensor,
    require,
)
from real.decode.medusa import (
    DEFAULT_DELTA,
    DEFAULT_EPSILON,
    MedusaConfig,
    TreeBuffers,
    correct_nodes,
)
from real.hetero.split_model import SplitTarget
from real.hetero.workers import WorkerSession, in_runtime, parse_workers, record
from sim.tree import TokenTree

NAME = "hcmp"
#: Default workers: two single-thread CPU workers (the host platform's cpu0 and cpu1).
DEFAULT_WORKERS = ("cpu0", "cpu1")
#: Default partition ratio (the simulator's default for hcmp, sim/strategies/hcmp.py).
DEFAULT_RATIO = 0.5


@dataclass(frozen=True)
class HcmpConfig:
    tree: TokenTree = field(default_factory=TokenTree.medusa_default)
    partition_ratio: float = DEFAULT_RATIO                 # share of every split operator on the primary
    workers: tuple[str, ...] = DEFAULT_WORKERS     # (primary, secondary)
    temperature: float = 0.0                       # 0: greedy acceptance; > 0: typical acceptance
    epsilon: float = DEFAULT_EPSILON
    delta: float = DEFAULT_DELTA
    trace_ops: bool = False                        # one trace record per worker per synchronised group
    separate_buffers: bool = False                 # explicit copies even on one device (tests)

    def __post_init__(self) -> None:
        if isinstance(self.partition_ratio, bool) or not isinstance(self.partition_ratio, (int, float)) or not 0.0 <= self.partition_ratio <= 1.0:
            raise HetSpecError(f"hcmp: partition ratio must be in [0, 1], got {self.partition_ratio!r}")
        workers = tuple(self.workers)
        if len(workers) != 2:
            raise HetSpecError(f"hcmp needs exactly two workers (primary,secondary), got {','.join(workers)}")
        if workers[0] == workers[1]:
            raise HetSpecError(f"hcmp needs two different workers, got {workers[0]} twice")
        object.__setattr__(self, "workers", workers)
        object.__setattr__(self, "partition_ratio", float(self.partition_ratio))
        self.medusa()   # checks temperature / epsilon / delta

    def medusa(self) -> MedusaConfig:
        return MedusaConfig(tree=self.tree, temperature=self.temperature, epsilon=self.epsilon, delta=self.delta)


class HcmpRuntime:
    """What a run of ``hcmp`` keeps between prompts: the workers and the target cut once."""

    def __init__(self, models, config: HcmpConfig, session: WorkerSession | None = None,
                 split: SplitTarget | None = None):
        """``session``: workers already started, in :meth:`SplitTarget.session_order`; ``split``: the target
        already cut at ``config.partition_ratio`` (a sweep cuts each ratio once). Otherwise both are made here."""
        require(models, "heads", NAME)
        self.models = models
        self.target = models.target
        self.workers = parse_workers(config.workers, 2)
        self.split = split or SplitTarget(models.target, models.heads, config.partition_ratio,
                                          (self.workers[0].device, self.workers[1].device), config.separate_buffers)
        order = self.split.session_order(self.workers)
        if session is not None and session.workers[:2] != order:
            raise HetSpecError(f"hcmp: the session's workers are not {','.join(w.name for w in order)}")
        self._owns_session = session is None
        self.session = session or WorkerSession(order)

    def close(self) -> None:
        if self._owns_session:
            self.session.close()

    def __enter__(self) -> "HcmpRuntime":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def prepare(models, config: HcmpConfig, session: WorkerSession | None = None,
            split: SplitTarget | None = None) -> HcmpRuntime:
    return HcmpRuntime(models, config, session, split)


def _record_spans(clock: Clock, runtime: HcmpRuntime, step: int, phase: str, spans) -> None:
    """Each side's ``(group, start, end)`` spans as trace records of that side's worker."""
    for side, side_spans in enumerate(spans):
        for op, t0, t1 in side_spans or ():
            record(clock, runtime.workers[side].name, step, phase, t0 - clock.t0, t1 - clock.t0, op=op)


def generate(models, prompt, max_new_tokens: int, config: HcmpConfig, clock: Clock,
             generator: torch.Generator | None = None) -> DecodeResult:
    return in_runtime(HcmpRuntime, models, config, lambda rt: _generate(rt, prompt, max_new_tokens, config, clock))


def _generate(rt: HcmpRuntime, prompt, max_new_tokens: int, config: HcmpConfig, clock: Clock) -> DecodeResult:
    tree, medusa = config.tree, config.medusa()
    cache_len = check_request(rt.models, prompt, max_new_tokens, extra_tokens=tree.size)
    if max(tree.ranks[1:], default=0) >= rt.target.spec.vocab:
        raise HetSpecError(f"hcmp: the tree uses rank {max(tree.ranks[1:])} but the vocabulary has "
                           f"{rt.target.spec.vocab} tokens")
    if tree.depth > rt.split.n_heads:
        raise HetSpecError(f"hcmp: the tree is {tree.depth} deep but the model has {rt.split.n_heads} heads")
    log = StepLog(NAME, len(prompt), max_new_tokens, clock)
    split, session, ops = rt.split, rt.session, config.trace_ops
    with torch.inference_mode():
        device = split.devices[0]
        buffers = TreeBuffers.build(tree, device)
        mask_cpu = buffers.mask.cpu()
        t = clock.now()
        cache = split.new_cache(cache_len)
        tokens = prompt_tensor(prompt, device)                                      # [1, n]
        logits, hidden, spans = split.prefill(session, tokens, cache, ops)          # [1, n, V], [1, n, d]
        cache.keep(range(tokens.shape[1]))
        root = logits[0, -1].argmax()
        head_logits, head_spans = split.heads(session, hidden[0, -1], ops)           # [K, V]
        head_top = head_logits.topk(buffers.top_k, dim=-1).indices                  # [K, top_k]
        log.prefill_done(int(root), t)
        _record_spans(clock, rt, -1, "prefill", spans)
        _record_spans(clock, rt, -1, "prefill", head_spans)

        while log.remaining > 0:
            step = log.step
            t = clock.now()
            block = buffers.candidates(root, head_top)                              # [1, n]
            positions = cache.length + buffers.depth.cpu()
            logits, hidden, spans = split.forward(session, block, cache, positions, mask_cpu, ops)
            t_verified = clock.now()
            path = tree.accepted_path(correct_nodes(buffers, block[0], logits[0], medusa))
            cache.keep(path)
            last = path[-1]
            root = logits[0, last].argmax()
            kept = log.emit(block[0, list(path[1:])].tolist() + [int(root)])
            t_accept = clock.now()
            clock.record(step, "accept", t_verified, t_accept)
            log.step_done("verify", t, t_verified, proposed=tree.size - 1, accepted=kept)
            _record_spans(clock, rt, step, "verify", spans)
            if log.remaining > 0:   # the heads' proposals are the next step's draft
                head_logits, head_spans = split.heads(session, hidden[0, last], ops)
                head_top = head_logits.topk(buffers.top_k, dim=-1).indices
                clock.record(step + 1, "draft", t_accept, clock.now())
                _record_spans(clock, rt, step + 1, "draft", head_spans)
    return log.finish()
