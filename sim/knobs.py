"""The knobs of the decode methods: one name each, used by the simulator, the real path, the CLI,
traces and reports.

A knob's name is the field of :class:`sim.strategies.base.StrategyConfig` (or its option) that the
simulator prices, the field of the real decoder's config that runs it, the key in reports and JSON,
and (with dashes) the command-line flag. Short flags are accepted as aliases (``--width`` for
``--tree-width``, ``--depth`` / ``--gamma`` for ``--draft-depth``, ``--ratio`` for
``--partition-ratio``).

:data:`RUN_KNOBS` says which knobs each real decode method takes: a knob given to a method that
does not use it is an error, never silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from hwmodels.errors import HetSpecError


@dataclass(frozen=True)
class KnobInfo:
    name: str                      # the one name (config field, JSON key)
    flag: str                      # the command-line flag
    aliases: tuple[str, ...]       # short flags accepted as well
    meaning: str


KNOBS: dict[str, KnobInfo] = {k.name: k for k in (
    KnobInfo("tree_width", "--tree-width", ("--width",),
             "tokens verified per step, root included (chain: draft_depth + 1; medusa / hcmp: the size of the "
             "greedy tree from the heads' accuracies; draft-tree: the tree budget; dovetail: verified tokens)"),
    KnobInfo("draft_depth", "--draft-depth", ("--depth", "--gamma"),
             "speculation depth: draft tokens per step (chain's gamma), the tree's depth cap (draft-tree, medusa, "
             "hcmp), the drafter's passes after the first (dovetail)"),
    KnobInfo("partition_ratio", "--partition-ratio", ("--ratio",),
             "share of every split operator on the primary device, in [0, 1] (hcmp)"),
    KnobInfo("top_k", "--top-k", (), "nodes expanded per level and children scored per node (dovetail)"),
    KnobInfo("drafter", "--drafter", (), "dovetail's drafter: draft (the demo draft model) or dgf "
                                         "(Dynamic Gating Fusion on the target's features)"),
    KnobInfo("lam", "--lambda", (), "ALSpec's norm-check threshold lambda (0 = exact)"),
    KnobInfo("window", "--window", (), "ALSpec's sink and recent-window size S"),
    KnobInfo("workers", "--workers", (), "the workers of a heterogeneous method, e.g. cpu0,cpu1 or cuda:0,cpu"),
    KnobInfo("memory_budget", "--memory-budget", (),
             "draft-tree: stream the target's layers from storage under this memory budget (LLMCad)"),
    KnobInfo("tree_file", "--tree", (), "a JSON file of Medusa choice paths (medusa, hcmp) instead of the greedy tree"),
)}

#: The knobs each method of the real path takes (anything else given is an error).
RUN_KNOBS: dict[str, tuple[str, ...]] = {
    "ar": (),
    "chain": ("draft_depth",),
    "draft-tree": ("tree_width", "draft_depth", "memory_budget"),
    "medusa": ("tree_width", "draft_depth", "tree_file"),
    "hcmp": ("tree_width", "draft_depth", "tree_file", "partition_ratio", "workers"),
    "dovetail": ("tree_width", "draft_depth", "top_k", "workers", "drafter"),
    "alspec": ("lam", "window", "workers"),
}


def flag(name: str) -> str:
    """The command-line flag of knob ``name`` (for messages)."""
    return KNOBS[name].flag if name in KNOBS else "--" + name.replace("_", "-")


def check_applies(method: str, given: dict[str, object]) -> None:
    """One line naming the first knob ``method`` does not take, among the non-None ones in ``given``."""
    if method not in RUN_KNOBS:
        raise HetSpecError(f"unknown method {method!r}; valid: {', '.join(RUN_KNOBS)}")
    extra = sorted(k for k, v in given.items() if v is not None and k not in RUN_KNOBS[method])
    if extra:
        takes = ", ".join(flag(k) for k in RUN_KNOBS[method]) or "none"
        raise HetSpecError(f"{flag(extra[0])} does not apply to method {method} (its knobs: {takes})")


def check_applies_to_any(methods: tuple[str, ...], given: dict[str, object]) -> dict[str, tuple[str, ...]]:
    """For several methods run side by side (``hetspec run --compare``): one line naming the first knob
    none of them takes; returns, per knob given, the methods that do not take it (they run without it)."""
    for method in methods:
        if method not in RUN_KNOBS:
            raise HetSpecError(f"unknown method {method!r}; valid: {', '.join(RUN_KNOBS)}")
    without = {k: tuple(m for m in methods if k not in RUN_KNOBS[m]) for k, v in given.items() if v is not None}
    for knob, left_out in sorted(without.items()):
        if len(left_out) == len(methods):
            raise HetSpecError(f"{flag(knob)} does not apply to any method compared ({', '.join(methods)})")
    return {k: v for k, v in without.items() if v}
