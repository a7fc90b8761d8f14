"""A model's passes as measured inside HetSpec's decode loop: the ``draft_pass_*`` and ``verify_pass_*`` rows of a
profile.

Inside the loop a draft pass costs more than the draft's forward in a loop of its own: the target's
verification has just streamed its weights through the caches, and each pass also picks its token from the
logits. ``hetspec calibrate --device cpu`` therefore runs the real decoders (``chain``, ``draft-tree``) on
random-weight models of the profiled demo shapes and writes each pass of a round, by its index in the round
(1-based ``tokens``), as rows of the draft's ``forward_key`` (:mod:`real.validation.draft_loop`):

- ``draft_pass_chain`` / ``draft_pass_tree``: rounds after one that rejected a draft token (the round's first
  pass feeds the target's correction alone);
- ``draft_pass_chain_full`` / ``draft_pass_tree_full``: rounds after one that accepted every draft token (the
  first pass also feeds the last draft token, which the draft has not seen).

``keys`` holds the draft's cached tokens at the measured rounds' first pass. A pass at another context is the
measured time moved by what the operator rows price between the two contexts. A round's passes cost the mix
of both kinds by the share of rounds that follow a round accepting everything: for ``chain`` the measured
chain table's ``L(gamma) - L(gamma - 1)`` (the probability that all gamma drafts are accepted), else
``alpha^gamma``; for ``draft-tree`` ``alpha^k`` for a round whose main branch the draft fed ``k`` nodes.

The same rounds' verifications are the target's ``verify_pass_chain`` / ``verify_pass_tree`` rows (and their
``_full`` twins; ``tokens`` the tokens verified, ``keys`` the context): what they cost beyond the rows' price of
the same pass is added to every verification of that loop (:func:`loop_verify_excess`).
"""

from __future__ import annotations

import numpy as np

from hwmodels.profile import LOOP_OPS
from sim.model_spec import ModelSpec
from sim.op_timing import timing_of

#: profile op of each decoder's passes (rounds after a rejection); ``+ FULL`` after a round accepting all.
OPS = {"chain": "draft_pass_chain", "draft-tree": "draft_pass_tree"}
FULL = "_full"


def measured_passes(problem, draft: ModelSpec, device: str, method: str, full: bool = False):
    """``(context, seconds per pass index)`` of ``draft``'s passes in ``method``'s decode loop on ``device``
    (the profile's rows; the rounds after a rejection where ``full`` asks for the other kind and the
    profile lacks it), or None: a roofline device, a profile without them, a batch or dtype they were not
    measured at."""
    from sim.step_graph import forward_key

    timing = timing_of(problem.platform.device(device))
    if timing is None or method not in OPS or problem.batch != 1 or draft.dtype != timing.profile.dtype:
        return None
    key = forward_key(draft)
    table = (timing.profile.table(OPS[method] + FULL, key) if full else None) or timing.profile.table(OPS[method], key)
    if table is None:
        return None
    keys, _, kernel_us = table.lines[0][:3]
    return int(keys), np.asarray(kernel_us, dtype=float) * 1e-6


def verify_op(op: str) -> str:
    """The profile op of the verifications of the rounds whose draft passes are ``op`` (``draft_pass_chain`` ->
    ``verify_pass_chain``; the prefixes are :data:`hwmodels.profile.LOOP_OPS`)."""
    draft, verify = LOOP_OPS
    return verify + op[len(draft):]


def loop_verify_excess(problem, device: str, method: str, resident: bool | None = None) -> float:
    """Seconds a verification inside ``method``'s decode loop costs beyond the target's pass as the profile's rows
    price it: the ``verify_pass_*`` rows (the loop rounds' verifications of ``tokens`` tokens, the mean of the
    rounds after a rejection and after full acceptance) less the price of that pass at the rows' context. Between
    the loop's passes runs Python, and the waiting threads of a multi-threaded device sleep through it and are
    woken by the next pass; an operator's rows, timed in a loop of its own, never see that. 0 without the rows (a
    roofline device, a profile without them, a batch, dtype or model they were not measured for); never below 0."""
    from sim.closed_form import step_seconds
    from sim.step_graph import forward_key

    timing = timing_of(problem.platform.device(device))
    model = problem.model
    if timing is None or method not in OPS or problem.batch != 1 or model.dtype != timing.profile.dtype:
        return 0.0
    op = verify_op(OPS[method])
    excess = []
    for table in (timing.profile.table(op, forward_key(model)), timing.profile.table(op + FULL, forward_key(model))):
        if table is None:
            continue
        keys, tokens, kernel_us = table.lines[0][:3]
        priced = float(step_seconds(model, problem.platform, device, int(tokens[0]), int(keys), 1, resident=resident))
        excess.append(float(kernel_us[0]) * 1e-6 - priced)
    return max(float(np.mean(excess)), 0.0) if excess else 0.0


def full_share_chain(acceptance, gamma) -> np.ndarray | float:
    """Share of chain rounds at ``gamma`` that follow a round accepting all its drafts (see the module docstring)."""
    table = dict(acceptance.chain_length_table or ())
    g = np.atleast_1d(np.asarray(gamma, dtype=int))
    if all(int(x) in table and (int(x) == 1 or int(x) - 1 in table) for x in g):
        out = np.array([table[int(x)] - (table[int(x) - 1] if x > 1 else 1.0) for x in g])
    else:
        out = float(acceptance.draft_alpha or 0.0) ** g.astype(float)
    out = np.clip(out, 0.0, 1.0)
    return float(out[0]) if np.ndim(gamma) == 0 else out


def full_share_tree(acceptance, fed) -> np.ndarray:
    """Share of draft-tree rounds whose main branch of ``fed`` nodes follows a round accepting all (``alpha^fed``)."""
    return float(acceptance.draft_alpha or 0.0) ** np.asarray(fed, dtype=float)
