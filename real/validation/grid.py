"""The configurations ``hetspec validate`` predicts and measures: one :class:`GridPoint` each.

The validation grid: ``ar``; ``chain`` with gamma = 1..8; ``draft-tree`` with several tree
budgets; ``medusa`` with widths 1, 2, 4, 8, 16, 32, 64, each tree the greedy sparse tree built
from the head accuracies measured on calibration prompts. :func:`medusa_tree` builds that tree
once and the same :class:`~sim.tree.TokenTree` object is priced by the simulator and verified by
the real decoder.
"""

from __future__ import annotations

from dataclasses import dataclass

from hwmodels.errors import HetSpecError
from sim.tree import TokenTree

#: Draft lengths of ``chain`` (the simulator's chain search, sim.strategies.chain.MAX_GAMMA).
CHAIN_GAMMAS = tuple(range(1, 9))
#: Tree budgets (tokens verified per round, root included) of ``draft-tree``: around the real
#: decoder's default of 16 (real/decode/draft_tree.py), from a nearly-chain 4 to 32.
DRAFT_TREE_BUDGETS = (4, 8, 16, 32)
#: Medusa tree widths (root included), up to the 64-token tree of the Medusa paper.
MEDUSA_WIDTHS = (1, 2, 4, 8, 16, 32, 64)

#: The quick grid of a pretrained target (the ``smollm2`` preset: 135 M parameters, 30 layers): a thinner
#: sweep of each knob around where the best configurations lie. The whole grid took 82 s per A/B block and a
#: 35-minute acceptance profile on two cores there, two hours in all.
PRETRAINED_QUICK_VALUES = {"chain": (1, 2, 3, 4), "draft-tree": (4, 16), "medusa": (4, 16, 64)}
#: The full validation's grid: every other knob value past the first few, so that its more prompts per A/B
#: block fit its time (:data:`real.validation.validate.FULL`).
FULL_VALUES = {"chain": (1, 2, 3, 4, 6, 8), "draft-tree": (4, 8, 16, 32), "medusa": (2, 4, 8, 16, 32, 64)}

#: Which knob each method's grid varies, and its symbol in labels.
KNOB_OF = {"ar": ("", ""), "chain": ("draft_depth", "γ"), "draft-tree": ("tree_width", "M"),
           "medusa": ("tree_width", "w")}
#: Methods whose accuracy the validation sets a target for (``ar`` is measured and predicted as the baseline).
SPECULATIVE_METHODS = ("chain", "draft-tree", "medusa")


@dataclass(frozen=True)
class GridPoint:
    method: str
    value: int = 0        # the value of the method's knob (KNOB_OF); 0 for ar

    def __post_init__(self) -> None:
        if self.method not in KNOB_OF:
            raise HetSpecError(f"validation grid: unknown method {self.method!r}; valid: {', '.join(KNOB_OF)}")
        if (self.method == "ar") != (self.value == 0):
            raise HetSpecError(f"validation grid: {self.method} needs {'no knob' if self.method == 'ar' else 'a knob >= 1'}")

    @property
    def knob(self) -> str:
        return KNOB_OF[self.method][0]

    @property
    def label(self) -> str:
        symbol = KNOB_OF[self.method][1]
        return self.method if not symbol else f"{self.method} {symbol}={self.value}"

    def knobs(self) -> dict:
        """The point's knob by its one name (:mod:`sim.knobs`): what both halves are given."""
        return {self.knob: self.value} if self.knob else {}

    @property
    def key(self) -> str:
        return self.method if not self.knob else f"{self.method}/{self.knob}={self.value}"


def default_grid(methods: tuple[str, ...] = ("ar", "chain", "draft-tree", "medusa"),
                 values: dict[str, tuple[int, ...]] | None = None) -> tuple[GridPoint, ...]:
    """``ar`` and every knob value of each speculative method of ``methods``; ``values``: other knob values
    by method (e.g. :data:`PRETRAINED_QUICK_VALUES`)."""
    chosen = {"chain": CHAIN_GAMMAS, "draft-tree": DRAFT_TREE_BUDGETS, "medusa": MEDUSA_WIDTHS, **(values or {})}
    points: list[GridPoint] = []
    for method in methods:
        if method == "ar":
            points.append(GridPoint("ar"))
        elif method in chosen:
            points += [GridPoint(method, v) for v in chosen[method]]
        else:
            raise HetSpecError(f"validation grid: unknown method {method!r}; valid: {', '.join(KNOB_OF)}")
    return tuple(points)


def draft_tree_widths(grid) -> tuple[int, ...]:
    """Tree budgets whose real ``draft-tree`` rounds the acceptance profile counts: the grid's, and the
    decoder's default (the budget the weight-streaming section runs)."""
    from real.decode.draft_tree import DEFAULT_MAX_TOKENS

    return tuple(sorted({p.value for p in grid if p.method == "draft-tree"} | {DEFAULT_MAX_TOKENS}))


def medusa_tree(width: int, head_accuracy) -> TokenTree:
    """The greedy sparse tree of ``width`` tokens from measured per-depth x per-rank accuracies."""
    return TokenTree.greedy(head_accuracy, width)


def real_config(point: GridPoint, head_accuracy=None, tree: TokenTree | None = None):
    """The real decoder's config of ``point`` (greedy decoding), built from the point's knobs as
    ``hetspec run`` builds it; medusa verifies ``tree`` when given (the very tree the simulator prices),
    else the greedy tree of the point's width from ``head_accuracy``."""
    from real.decode.medusa import MedusaConfig
    from real.run.request import RunRequest
    from real.run.session import build_config

    if point.method == "medusa" and tree is not None:
        return MedusaConfig(tree=tree)
    if point.method == "medusa" and head_accuracy is None:
        raise HetSpecError("medusa grid points need measured head accuracies")
    return build_config(RunRequest(point.method, **point.knobs()), head_accuracy)
