"""LLMCad's weight streaming layer by layer through staging buffers (``draft-tree`` option ``staging``).

The ``draft-tree`` strategy's default prices a round as ``max(draft, load) + verify``: the whole
streamed part of the target loads while the draft drafts (LLMCad preloads up to its memory bound).
A loader with ``k`` staging buffers (the real path's :mod:`real.hetero.streaming`, one buffer by
default, as the memory plan counts) cannot run that far ahead: it reads the streamed layers one
after the other, each into the next free buffer, and a buffer is free again only when the
verification has computed with the layer in it. So, in every round:

- the loader reads streamed layer ``j`` once the read of layer ``j - 1`` is done and the buffer of
  layer ``j - k`` is free (its compute is done; across rounds, the layers of the previous
  verification);
- the verification computes the embedding and its resident layers, then each streamed layer once
  it is loaded and the previous layer is computed, then the final norm and the LM head;
- the round is: the draft's passes, the verification, the host-side work; the loader runs beside;
- a thread that waited for the other (the loader for a free buffer, the forward for a layer) is woken
  when it may go on: ``wake_s`` each time (a calibrated host's measured wake-up of a waiting worker).

With one buffer the first streamed layer loads while the round's tail, the next draft and the
resident layers run, and every further layer costs its read plus its compute. :func:`pipeline_round`
plays this recurrence over a few identical rounds (the loader's state at a round's start is the
previous round's) and returns the last round's time and its load / wait / compute split.

The memory plan is the real loader's (:func:`layer_plan`, as :func:`real.hetero.streaming.plan_memory`):
whole layers, the first ``R`` resident, the budget holding the draft, both KV caches, the target's
embedding / final norm / LM head and ``k`` staging layers. A layer's read is one request per tensor
(:data:`READS_PER_LAYER`) over the platform's storage link: ``reads x latency + bytes / bandwidth``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hwmodels.dtypes import DTYPE_BYTES
from hwmodels.errors import HetSpecError

#: Read requests per streamed layer: the real loader reads a Llama layer tensor by tensor (q, k, v, o,
#: gate, up, down and the two norms: :func:`real.hetero.streaming.StreamingLayers._read_layer`).
READS_PER_LAYER = 9
#: Identical rounds played to reach the loader's steady state (one buffer needs one round; more
#: buffers carry more of a round into the next).
PIPELINE_ROUNDS = 4


@dataclass(frozen=True)
class LayerPlan:
    """Whole target layers under a budget (bytes), as the real loader plans them."""

    budget: float
    layer_bytes: float
    fixed_bytes: float         # embedding, final norm, LM head (always resident)
    draft_bytes: float         # the draft's weights
    kv_bytes: float            # both KV caches
    staging: int
    resident_layers: int
    streamed_layers: int

    @property
    def streamed_bytes(self) -> float:
        return self.streamed_layers * self.layer_bytes


def layer_plan(model, draft, budget_bytes: float, cache_tokens: float, staging: int) -> LayerPlan:
    """Resident and streamed layers of ``model`` under ``budget_bytes`` with ``staging`` buffers.

    ``cache_tokens``: the tokens both KV caches hold. One line if the must-haves do not fit."""
    if staging < 1:
        raise HetSpecError(f"draft-tree: option staging must be an integer >= 1 (got {staging})")
    dt = DTYPE_BYTES[model.dtype]
    layer = model.params_per_layer * dt
    fixed = model.weight_bytes() - model.n_layers * layer
    draft_w = draft.weight_bytes() if draft is not None else 0.0
    kv = (model.kv_bytes_per_token() + (draft.kv_bytes_per_token() if draft is not None else 0.0)) * cache_tokens
    base = draft_w + kv + fixed
    L = model.n_layers
    if base + L * layer <= budget_bytes:
        return LayerPlan(budget_bytes, layer, fixed, draft_w, kv, staging, L, 0)
    room = budget_bytes - base - staging * layer
    if room < 0:
        raise HetSpecError(f"memory budget {budget_bytes / 1e6:.2f} MB is too small: the draft ({draft_w / 1e6:.2f} MB), "
                           f"the KV caches ({kv / 1e6:.2f} MB), the target's embedding and LM head ({fixed / 1e6:.2f} MB) "
                           f"and {staging} streamed layer(s) ({staging * layer / 1e6:.2f} MB) need "
                           f"{(base + staging * layer) / 1e6:.2f} MB")
    resident = min(int(room // layer), L - 1)
    return LayerPlan(budget_bytes, layer, fixed, draft_w, kv, staging, resident, L - resident)


@dataclass(frozen=True)
class PipelineRound:
    """One steady-state round: its seconds, its parts and where the verification's layer loop spent them."""

    time_s: float
    load_s: float        # the loader's reads of this round's streamed layers
    wait_s: float        # the verification waiting for a layer not loaded yet
    compute_s: float     # the verification's layer loop computing (resident and streamed layers, waits excluded)
    draft_s: float = 0.0
    embed_s: float = 0.0
    resident_s: float = 0.0
    layer_s: float = 0.0     # one streamed layer's compute
    tail_s: float = 0.0
    host_s: float = 0.0
    wake_s: float = 0.0
    resume_s: float = 0.0    # a streamed layer's compute beyond ``layer_s`` when the forward waited for it
    host_share: float = 0.0  # the share of the compute a read in flight takes away
    #: the draft, the embedding with the resident layers, and the tail with the host-side work as they ran
    #: (slowed where a read was in flight beside them)
    draft_wall_s: float = 0.0
    pre_wall_s: float = 0.0
    post_wall_s: float = 0.0
    #: per streamed layer (load start, load end, compute start, compute end), seconds from the round's start
    #: (a read begun during the previous round starts below 0)
    schedule: tuple[tuple[float, float, float, float], ...] = ()

    @property
    def verify_s(self) -> float:
        """The verification from its start to its end (its layers' waits included)."""
        return self.embed_s + self.compute_s + self.wait_s + self.tail_s


def beside_reads(t: float, work: float, reads, share: float) -> float:
    """When ``work`` seconds of compute begun at ``t`` end, running at ``1 - share`` of its speed while a read
    of ``reads`` (``(begin, end)`` intervals, in order, not overlapping) is in flight."""
    if share <= 0.0 or work <= 0.0:
        return t + max(work, 0.0)
    speed = 1.0 - share
    for begin, end in reads:
        if end <= t:
            continue
        if begin > t:
            if work <= begin - t:
                return t + work
            work -= begin - t
            t = begin
        done = (end - t) * speed
        if work <= done:
            return t + work / speed
        work -= done
        t = end
    return t + work


def pipeline_round(draft_s: float, embed_s: float, resident_s: float, layer_s: float, tail_s: float, host_s: float,
                   load_s: float, streamed: int, staging: int, rounds: int = PIPELINE_ROUNDS,
                   wake_s: float = 0.0, resume_s: float = 0.0, host_share: float = 0.0) -> PipelineRound:
    """Play ``rounds`` identical rounds of the staged pipeline (see the module docstring) and return the last.

    ``draft_s``: the round's drafting; ``embed_s``: the verification before its layers; ``resident_s``:
    its resident layers; ``layer_s``: one streamed layer's compute; ``tail_s``: after its layers;
    ``host_s``: the round's host-side work; ``load_s``: one streamed layer's read; ``wake_s``: a thread
    that waited for the other (the loader for a free buffer, the forward for a layer) woken; ``resume_s``:
    what a streamed layer's compute costs beyond ``layer_s`` after the forward waited for its read;
    ``host_share``: the share of the compute a read in flight takes away (:func:`beside_reads`)."""
    parts = dict(draft_s=draft_s, embed_s=embed_s, resident_s=resident_s, layer_s=layer_s, tail_s=tail_s,
                 host_s=host_s, wake_s=wake_s, resume_s=resume_s, host_share=host_share)
    if streamed == 0:
        t = draft_s + embed_s + resident_s + tail_s + host_s
        return PipelineRound(t, 0.0, 0.0, resident_s, **parts, draft_wall_s=draft_s, pre_wall_s=embed_s + resident_s,
                             post_wall_s=tail_s + host_s)
    reads: list[tuple[float, float]] = []      # every load so far (all rounds, in order)
    compute_end: list[float] = []

    def schedule_reads(limit: int) -> None:
        """Start every read whose buffer is free (its layer ``staging`` reads back has been computed)."""
        while len(reads) < limit:
            g = len(reads)
            if g >= staging and g - staging >= len(compute_end):
                return
            prev = reads[-1][1] if reads else 0.0
            freed = compute_end[g - staging] + wake_s if g >= staging else 0.0
            begin = max(prev, freed)                 # the loader waited for the buffer: woken when it is freed
            reads.append((begin, begin + load_s))

    def run(t: float, work: float) -> float:
        return beside_reads(t, work, reads, host_share)

    start = 0.0
    last = None
    for r in range(rounds):
        limit = (r + 2) * streamed                   # the loader may run into the next round, buffers allowing
        schedule_reads(limit)
        drafted = run(start, draft_s)
        embedded = run(drafted, embed_s)
        ready = reach = run(embedded, resident_s)    # the layer loop reaches the first streamed layer
        wait = 0.0
        schedule = []
        for j in range(streamed):
            g = r * streamed + j
            schedule_reads(limit)
            begin, loaded = reads[g]
            arrive = loaded + wake_s if loaded > ready else loaded   # the forward waited: woken
            waited = arrive > ready
            wait += max(arrive - ready, 0.0)
            c0 = max(ready, arrive)
            ready = run(c0, layer_s + (resume_s if waited else 0.0))
            compute_end.append(ready)
            schedule.append((begin - start, loaded - start, c0 - start, ready - start))
        schedule_reads(limit)
        end = run(ready, tail_s + host_s)
        last = PipelineRound(end - start, streamed * load_s, wait, ready - embedded - wait, **parts,
                             draft_wall_s=drafted - start, pre_wall_s=reach - drafted, post_wall_s=end - ready,
                             schedule=tuple(schedule))
        start = end
    return last
