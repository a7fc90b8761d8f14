"""The decode methods HetSpec knows, by the one name that selects both the simulated strategy
and the real implementation."""

from __future__ import annotations

from dataclasses import dataclass

from hwmodels.errors import UnknownNameError


@dataclass(frozen=True)
class MethodInfo:
    name: str
    title: str
    source: str       # the paper the method comes from (short name)
    lossless: bool    # greedy output equals autoregressive greedy output
    summary: str


METHODS: dict[str, MethodInfo] = {
    m.name: m
    for m in (
        MethodInfo("ar", "autoregressive", "baseline", True,
                   "one target forward per token; the baseline every speedup is measured against"),
        MethodInfo("offload", "weight offloading", "Dovetail (baseline)", True,
                   "weights that do not fit on the accelerator stream over PCIe or from storage, "
                   "overlapped with compute"),
        MethodInfo("chain", "draft-model speculation", "Leviathan et al. / Dovetail §II", True,
                   "a small draft model proposes gamma tokens in a chain; the target verifies them in one pass"),
        MethodInfo("draft-tree", "LLMCad token tree", "LLMCad", True,
                   "the draft grows a tree with confidence branching and a branch pacer; a "
                   "self-adjusting confidence threshold triggers verification of the whole tree"),
        MethodInfo("medusa", "Medusa heads + tree attention", "Medusa", True,
                   "extra decoding heads propose a sparse tree verified by tree attention in one pass"),
        MethodInfo("hcmp", "Ghidorah hetero-core model parallelism", "Ghidorah", True,
                   "Medusa verification with every linear split by columns between CPU and GPU, "
                   "attention split dense/sparse and merged by online softmax"),
        MethodInfo("dovetail", "Dovetail CPU verification", "Dovetail", True,
                   "the draft runs on the accelerator, the target verifies the tree on the CPU"),
        MethodInfo("alspec", "attention-level speculation", "ALSpec", False,
                   "approximate (sink + window) attention lets the rest of each layer start early on "
                   "a second device; a norm check accepts it or the layer is recomputed"),
    )
}

#: Methods the real PyTorch path implements on a single worker (its decoders; the heterogeneous methods run on
#: several workers).
SINGLE_WORKER_METHODS = ("ar", "chain", "draft-tree", "medusa")


def method_info(name: str) -> MethodInfo:
    """The method called ``name``; an unknown name raises one line listing the valid ones."""
    try:
        return METHODS[name]
    except KeyError:
        raise UnknownNameError("method", name, METHODS) from None


def method_names() -> tuple[str, ...]:
    return tuple(METHODS)
