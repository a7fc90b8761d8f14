"""The draft model's passes timed inside HetSpec's decode loops: the ``draft_pass_*`` rows of a CPU profile.

A draft pass inside the loop does not cost what the draft's forward costs in a loop of its own. Each round the
target's verification streams its weights through the caches, and the draft's next passes find theirs cold and
warm them again pass by pass; each pass also picks its token from the logits, and the first pass of a round
after one that accepted every draft feeds two tokens. The operator rows (each operator timed in a loop of its
own) and the ``forward_rest`` rows (the whole forward, timed once its caches have come back to it) price none
of that. On the 2-core Intel Xeon of docs/validation.md the small demo draft's passes took 1.98-2.22 ms inside
the loop where those rows price 1.69-1.82 ms.

So ``hetspec calibrate --device cpu`` also runs the real decoders (:mod:`real.decode.chain`,
:mod:`real.decode.draft_tree`) on random-weight models of every profiled demo preset's target and draft shapes.
Each timed decode is paired with the same forwards timed standalone right after it, on the same models (the
draft's one-token pass, the target's verification of the round's tokens, each in a loop of its own as the rows
are timed): what the profile keeps of a pass is its time over its standalone twin's, the median of those
ratios, and the row it writes is that ratio times the profile's own price of the standalone forward. A machine
whose speed moves (another process, a stall) moves a decode and its twins together, so the ratio holds where an
absolute time taken at another moment than the operator rows would not. The decodes are taken before and after
the operator rows and their ratios pooled; :mod:`sim.strategies.loop_passes` says how the simulator prices the
rows. What the models propose is set, not learnt: a forward hook on each LM head raises one token's
logit far above the rest, the same token for both models (every draft accepted: the ``_full`` rows) or another
for the draft (every draft rejected), so every round drafts :data:`PASSES` tokens whatever the weights, and a
draft tree grows along one branch to its budget.
Only times are taken from these runs, never acceptance.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

import torch

from real.run.repeats import median
from sim.strategies.loop_passes import FULL, OPS   # the profile op of each decoder's passes

#: Draft passes per round of the probe: every pass index a round of the simulator's search prices.
PASSES = 8
#: Rounds per timed decode whose passes are kept (each yields one sample of every pass index).
ROUNDS = 6
#: Prompt tokens of the probe decodes.
PROMPT_TOKENS = 64
#: What the LM-head hooks add to the proposed token's logit (the softmax puts all but nothing on it).
LOGIT_LIFT = 30.0
#: Timed calls of each standalone twin after a decode (:func:`twin_seconds`).
TWIN_CALLS = 5


def demo_pairs(names: Sequence[str]) -> list[tuple]:
    """(target spec, draft spec) of every ``demo:<preset>`` among ``names`` (a profile's model names)."""
    from real.train.demo import demo_specs

    return [demo_specs(name.split(":", 1)[1]) for name in names if name.startswith("demo:")]


def _lift(model, token: int):
    """A forward hook on ``model``'s LM head that raises ``token``'s logit by :data:`LOGIT_LIFT` (its handle)."""
    def hook(_module, _inputs, logits):
        logits[..., token] += LOGIT_LIFT
        return logits
    return model.lm_head.register_forward_hook(hook)


def _decoder(method: str):
    """(generate, config) of ``method`` drafting :data:`PASSES` tokens a round."""
    from real.decode import chain, draft_tree

    if method == "chain":
        return chain.generate, chain.ChainConfig(draft_depth=PASSES)
    return draft_tree.generate, draft_tree.DraftTreeConfig(tree_width=PASSES + 1, draft_depth=PASSES)


def passes_by_round(clock, phase: str = "draft") -> dict[int, list[float]]:
    """Seconds of each ``phase`` record (a draft pass; ``verify``: the round's verification) a decode's ``clock``
    (:class:`real.decode.common.Clock`) recorded, in order, by its round (the decode step)."""
    passes: dict[int, list[float]] = {}
    for r in clock.records:
        if r.phase == phase:
            passes.setdefault(r.step, []).append(r.end_s - r.start_s)
    return passes


def twin_seconds(step, calls: int = TWIN_CALLS, clock=time.perf_counter) -> float:
    """Seconds per call of ``step`` (a CPU forward) timed as a loop of its own, as the profile's whole forwards
    are (:func:`real.validation.profiler.forward_launch.warmed_time`): the mean of ``calls`` timed calls."""
    from real.validation.profiler.device_copies import wall_per_call
    from real.validation.profiler.forward_launch import warmed_time

    cpu = torch.device("cpu")
    return warmed_time(step, lambda fn, n: wall_per_call(fn, cpu, n, clock), calls)


def time_loop_passes(models, method: str, full: bool, repeats: int, guard=None,
                     records: list | None = None) -> list[tuple[int, list[float], float]]:
    """(context, pass 1..:data:`PASSES` over the standalone draft pass, the verification over the standalone
    verification) of every kept round of the draft inside ``method``'s decode loop on ``models``
    (:class:`real.decode.common.DecodeModels`, random weights), every draft accepted (``full``) or rejected:
    ``repeats`` decodes of :data:`ROUNDS` kept rounds each (the first round, after the prefill, and the last
    rounds, which draft fewer, left out), each decode followed by its standalone twins (:func:`twin_seconds`:
    the draft's one-token forward and the target's forward of :data:`PASSES` + 1 tokens under a chain's mask, at
    the kept rounds' middle context), taken in batches the contention ``guard`` checks (its records appended to
    ``records``). ``context``: the draft's cached tokens at the round's first pass."""
    from real.decode.common import Clock
    from real.run.contention import guarded_batches
    from real.validation.calibration.microbench import forward_step, prefilled_cache

    generate, config = _decoder(method)
    prompt = [1 + (7 * i) % (models.target.spec.vocab - 1) for i in range(PROMPT_TOKENS)]
    per_round = PASSES + 1 if full else 1            # tokens a round emits
    new_tokens = 1 + (ROUNDS + 1) * per_round + PASSES + 1
    handles = [_lift(models.target, 1), _lift(models.draft, 1 if full else 2)]
    middle = PROMPT_TOKENS + per_round * (ROUNDS + 1) // 2

    def decode(_item) -> list[tuple[int, list[float], float]]:
        clock = Clock()
        result = generate(models, prompt, new_tokens, config, clock)
        draft_s, verify_s = twin_seconds(draft_twin), twin_seconds(verify_twin)
        passes, verify = passes_by_round(clock), passes_by_round(clock, "verify")
        emitted = [0]
        for n in result.accepted_per_step:
            emitted.append(emitted[-1] + n)
        return [(PROMPT_TOKENS + emitted[step], [t / draft_s for t in times], verify[step][0] / verify_s)
                for step, times in sorted(passes.items())
                if 1 <= step <= ROUNDS and len(times) == PASSES and step in verify]

    try:
        with torch.inference_mode():
            draft_twin = forward_step(models.draft, prefilled_cache(models.draft, middle, middle + 1), 1)
            verify_twin = forward_step(models.target, prefilled_cache(models.target, middle, middle + PASSES + 1),
                                       PASSES + 1)
            decode(None)                   # allocations, first calls
            runs, kept = guarded_batches(guard, list(range(repeats)), decode)
    finally:
        for handle in handles:
            handle.remove()
    if records is not None:
        records += kept
    return [r for run in runs for r in run]


def pass_medians(rounds) -> tuple[int, list[float], float]:
    """(median context, median ratio of each pass index, median ratio of the verification) of ``rounds``
    (:func:`time_loop_passes`, any number of them pooled, at least one)."""
    return (int(median([c for c, _, _ in rounds])),
            [median([times[j] for _, times, _ in rounds]) for j in range(PASSES)],
            median([v for _, _, v in rounds]))


def time_draft_passes(pairs, device: torch.device, dtype: torch.dtype, repeats: int, guard=None,
                      records: list | None = None, progress: bool = True) -> list[tuple]:
    """(op, target spec, draft spec, [(context, seconds per pass index, verification seconds) of each round]) of
    every (target, draft) of ``pairs`` (specs), both decoders and both kinds of round (:func:`time_loop_passes`),
    on random-weight models in ``dtype``. :func:`bracketed_passes` pools two such measurements."""
    from real.decode.common import DecodeModels
    from real.model.transformer import Transformer

    out = []
    for target_spec, draft_spec in pairs:
        if progress:
            print(f"timing the passes of {draft_spec.name} inside the chain and draft-tree decode loops",
                  file=sys.stderr, flush=True)
        torch.manual_seed(0)
        with torch.device(device):
            models = DecodeModels(Transformer(target_spec).to(dtype=dtype).eval(),
                                  Transformer(draft_spec).to(dtype=dtype).eval())
        for method, op in OPS.items():
            for full in (False, True):
                out.append((op + (FULL if full else ""), target_spec, draft_spec,
                            time_loop_passes(models, method, full, repeats, guard, records)))
    return out


def bracketed_passes(before, after) -> list[tuple]:
    """(op, target spec, draft spec, context, [median ratio per pass index], median verification ratio) of two
    :func:`time_draft_passes` measurements, taken before and after a profile's operator rows, their rounds pooled:
    a machine whose pace changes between the two halves of a profile weighs in both."""
    pooled: dict = {}
    for op, target, spec, rounds in list(before) + list(after):
        pooled.setdefault((op, spec.name), [op, target, spec, []])[3].extend(rounds)
    return [(op, target, spec, *pass_medians(rounds)) for op, target, spec, rounds in pooled.values() if rounds]


def draft_pass_rows(timed, device) -> list[tuple]:
    """Profile rows of ``timed`` (:func:`bracketed_passes`) for the profiled ``device`` (its operator and
    ``forward_rest`` rows): each pass its ratio times the device's price of the draft's one-token forward at the
    rounds' context, in ``kernel_us`` (launch-inclusive: ``eager_launch_us`` 0, ``graph_launch_us`` not
    measured), ``tokens`` the pass's index in its round (1-based), ``keys`` the draft's cached tokens at the
    round's first pass; and the round's verification as a ``verify_pass_*`` row of the target, priced alike
    (:mod:`sim.strategies.loop_passes`). A twin a negative rest leaves unpriced takes its operator rows alone."""
    from sim.step_graph import build_step_graph, forward_key
    from sim.step_timing import price_step
    from sim.strategies.loop_passes import verify_op

    def twin_s(spec, tokens: int, context: int) -> float:
        price = price_step(build_step_graph(spec, tokens, context), device)
        return price.total_s if price.total_s > 0 else price.total_s - price.time_of("forward_rest")
    rows, NAN = [], float("nan")
    for op, target, spec, context, passes, verify in timed:
        pass_s, verify_s = twin_s(spec, 1, context), twin_s(target, PASSES + 1, context)
        rows += [(op, forward_key(spec), j + 1, context, ratio * pass_s * 1e6, 0.0, NAN)
                 for j, ratio in enumerate(passes)]
        rows.append((verify_op(op), forward_key(target), PASSES + 1, context, verify * verify_s * 1e6, 0.0, NAN))
    return rows
