"""Acceptance models: how many tokens a speculative step produces, expected or drawn.

One :class:`AcceptanceModel` holds whichever forms its source gives:

- ``medusa_accuracy[d][r]``: probability that the rank-r candidate at depth d+1 is correct
  (Medusa §2.3.3). The expected tokens of any tree is exact
  (:meth:`sim.tree.TokenTree.expected_accepted_length`); a draw picks, per depth, the correct
  rank from the row (ranks mutually exclusive, depths independent) and walks the tree.
- ``draft_alpha``: a draft model's per-token acceptance rate; a chain of gamma drafts yields
  Omega(gamma, alpha) = (1 - alpha^(gamma+1)) / (1 - alpha) tokens per verification
  (Dovetail §II, after MagicDec), see :func:`omega`.
- ``chain_length_table``: measured mean tokens per verification against gamma (a real-path
  profile replays greedy chains on calibration prompts); where it covers gamma it is used instead
  of Omega, whose independent-tokens assumption misses runs of easy tokens.
- ``confidence_bins``: per-token acceptance as a function of the draft's confidence (LLMCad
  style trees): :meth:`AcceptanceModel.confidence_accept_rate`, and
  :func:`expected_tokens_from_node_probs` for a tree with a probability on every node.
- ``length_table``: mean tokens per step against tree width (Ghidorah Table I), interpolated
  linearly in log width; a width outside the table is refused (no extrapolation).
- ``length_curve``: ``intercept + slope * ln(width)`` on a stated width range (Medusa App. G).
- ``alspec_hit_rate_by_layer`` (measured) or ``alspec_hit_rates`` (task -> lambda -> rate,
  ALSpec Tables 1/2): probability that a layer's approximate attention passes the check.
- ``tau_entries``: Dovetail's mean acceptance length tau per drafter, drafter depth (blocks),
  verified tokens and temperature (Dovetail Tables I/III).
- ``draft_rank_accuracy`` (preset, kept in ``meta`` as a profile keeps it): the probability that the
  draft's rank-r candidate is the target's token; the ``draft-tree`` strategy grows its tree from it.

Sources: a real-path :class:`~sim.acceptance_profile.AcceptanceProfile` JSON file, a paper table
by name (``sim/presets/acceptance/<name>.json``, each with its paper, table and section), or a
literal ``alpha:<a>`` for a draft chain. :func:`sim.acceptance_loader.load_acceptance` takes any of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from hwmodels.errors import HetSpecError, UnknownNameError
from sim.acceptance_profile import AcceptanceProfile, ConfidenceBin
from sim.tree import TokenTree

#: Format tag of the paper-table presets in ``sim/presets/acceptance/``.
PRESET_FORMAT = "hetspec-acceptance-preset/1"
PRESET_DIR = "presets/acceptance"
ALPHA_PREFIX = "alpha:"


@dataclass(frozen=True)
class LengthCurve:
    """Tokens per step = ``intercept + slope * ln(width)`` for widths in [min_width, max_width]."""

    intercept: float
    slope: float
    min_width: int
    max_width: int

    def __call__(self, widths):
        return self.intercept + self.slope * np.log(np.asarray(widths, dtype=float))


@dataclass(frozen=True)
class TauEntry:
    """One Dovetail measurement: mean acceptance length ``tau`` of a drafter at ``width`` verified tokens.

    ``drafter`` names the draft model family (``eagle2``: EAGLE-2's fc fusion; ``dgf``: Dovetail's
    Dynamic Gating Fusion; or a small LLM such as ``tinyllama-1.1b``); ``blocks`` is the drafter's
    number of transformer blocks (None for a whole small LLM).
    """

    drafter: str
    blocks: int | None
    width: int
    temperature: float
    tau: float
    speedup: float | None = None


@dataclass(frozen=True)
class AcceptanceModel:
    name: str
    source: str
    medusa_accuracy: tuple[tuple[float, ...], ...] | None = None
    draft_alpha: float | None = None
    confidence_bins: tuple[ConfidenceBin, ...] | None = None
    length_table: tuple[tuple[int, float], ...] | None = None
    length_curve: LengthCurve | None = None
    chain_length_table: tuple[tuple[int, float], ...] | None = None
    alspec_hit_rate_by_layer: tuple[float, ...] | None = None
    alspec_hit_rates: Mapping[str, Mapping[float, float]] | None = None
    alspec_default_lambda: float | None = None
    tau_entries: tuple[TauEntry, ...] | None = None
    meta: Mapping = field(default_factory=dict)

    # ------------------------------------------------------------------ what it can answer
    @property
    def accuracy(self) -> np.ndarray | None:
        return None if self.medusa_accuracy is None else np.asarray(self.medusa_accuracy, dtype=float)

    @property
    def max_depth(self) -> int | None:
        """Deepest tree the accuracies cover (None: not limited by depth)."""
        return len(self.medusa_accuracy) if self.medusa_accuracy is not None else None

    @property
    def width_range(self) -> tuple[int, int] | None:
        """Widths a length table / curve covers (None when the tree is priced from accuracies)."""
        if self.medusa_accuracy is not None:
            return None
        if self.length_table is not None:
            return self.length_table[0][0], self.length_table[-1][0]
        if self.length_curve is not None:
            return self.length_curve.min_width, self.length_curve.max_width
        return None

    def _fail(self, what: str) -> HetSpecError:
        return HetSpecError(f"acceptance model {self.name}: {what}")

    # ------------------------------------------------------------------ trees (Medusa heads)
    def tree_tokens(self, tree: TokenTree) -> float:
        """Expected tokens per step when verifying ``tree`` (root included)."""
        if self.medusa_accuracy is not None:
            try:
                return tree.expected_accepted_length(self.medusa_accuracy)
            except HetSpecError as exc:
                raise self._fail(f"does not fit the tree ({exc})") from None
        return float(self.width_tokens(tree.size))

    def width_tokens(self, widths):
        """Mean tokens per step at tree width(s), from the length table or curve (no extrapolation)."""
        w = np.asarray(widths, dtype=float)
        scalar = w.ndim == 0
        w = np.atleast_1d(w)
        if np.any(w < 1) or np.any(w != np.round(w)):
            raise self._fail(f"widths must be integers >= 1 (got {widths})")
        if self.length_table is not None:
            xs = np.array([k for k, _ in self.length_table], dtype=float)
            ys = np.array([v for _, v in self.length_table], dtype=float)
            self._check_range(w, int(xs[0]), int(xs[-1]), "table")
            out = np.interp(np.log(w), np.log(xs), ys)
        elif self.length_curve is not None:
            c = self.length_curve
            self._check_range(w, c.min_width, c.max_width, "curve")
            out = c(w)
        elif self.medusa_accuracy is not None:
            raise self._fail("has per-head accuracies: ask for the tokens of a tree, not of a width")
        else:
            raise self._fail("has no tree acceptance (no medusa_accuracy, acceptance_length or length curve)")
        return float(out[0]) if scalar else out

    def _check_range(self, w: np.ndarray, lo: int, hi: int, kind: str) -> None:
        bad = w[(w < lo) | (w > hi)]
        if bad.size:
            raise self._fail(f"its {kind} covers tree widths {lo}..{hi}; width {int(bad[0])} is outside "
                             "(no extrapolation)")

    def check_tree(self, tree: TokenTree) -> None:
        """One line if this model cannot price ``tree`` (too deep, too many ranks, width outside a table)."""
        if self.medusa_accuracy is None and (self.length_table is not None or self.length_curve is not None):
            lo, hi = self.width_range
            self._check_range(np.array([float(tree.size)]), lo, hi, "table" if self.length_table else "curve")
            return
        self.tree_tokens(tree)

    def trees_tokens(self, trees: Sequence[TokenTree]) -> np.ndarray:
        """:meth:`tree_tokens` of many trees (vectorised over widths when the model is a table or curve)."""
        if self.medusa_accuracy is not None:
            return np.array([self.tree_tokens(t) for t in trees], dtype=float)
        return np.asarray(self.width_tokens(np.array([t.size for t in trees], dtype=float)), dtype=float)

    def sample_tree_tokens(self, tree: TokenTree, rng: np.random.Generator) -> int:
        """Draw the tokens one step produces.

        With accuracies: per depth draw the correct rank (or none, with probability 1 - row sum)
        and walk the tree from the root along the correct children. With only a mean (table or
        curve): the mean rounded up or down at random so that the expectation is kept.
        """
        if self.medusa_accuracy is None:
            return _bernoulli_round(self.tree_tokens(tree), rng)
        acc = self.accuracy
        self.tree_tokens(tree)  # fit check
        node = 0
        for d in range(tree.depth):
            row = acc[d]
            u = rng.random()
            cum = np.cumsum(row)
            rank = int(np.searchsorted(cum, u, side="right"))
            if rank >= len(row):
                break
            child = next((c for c in tree.children[node] if tree.ranks[c] == rank), None)
            if child is None:
                break
            node = child
        return 1 + tree.depths[node]

    # ------------------------------------------------------------------ draft chains
    def need_alpha(self) -> float:
        if self.draft_alpha is None:
            raise self._fail("has no draft_alpha (a draft model's per-token acceptance rate); pass a "
                             "measured profile or alpha:<a>")
        return self.draft_alpha

    def chain_tokens(self, gamma):
        """Expected tokens per verification of gamma draft tokens: the measured chain table where it
        covers every gamma asked, else Omega(gamma, alpha)."""
        if self.chain_length_table:
            table = dict(self.chain_length_table)
            g = np.asarray(gamma)
            if all(int(x) in table for x in np.atleast_1d(g).ravel()):
                out = np.vectorize(lambda x: table[int(x)], otypes=[float])(g)
                return float(out) if np.ndim(out) == 0 else out
        return omega(gamma, self.need_alpha())

    def sample_chain_tokens(self, gamma: int, rng: np.random.Generator) -> int:
        """Accept each draft token with probability alpha until the first rejection; +1 target token.
        With a measured chain table covering gamma: its mean, rounded up or down at random."""
        if self.chain_length_table and int(gamma) in dict(self.chain_length_table):
            return _bernoulli_round(dict(self.chain_length_table)[int(gamma)], rng)
        alpha = self.need_alpha()
        accepted = 0
        while accepted < gamma and rng.random() < alpha:
            accepted += 1
        return accepted + 1

    # ------------------------------------------------------------------ draft trees (LLMCad)
    def confidence_accept_rate(self, confidence):
        """Acceptance probability of a draft token with the given confidence (from the bins)."""
        if not self.confidence_bins:
            raise self._fail("has no draft_confidence_bins")
        conf = np.atleast_1d(np.asarray(confidence, dtype=float))
        if np.any((conf < 0) | (conf > 1)):
            raise self._fail("confidences must be in [0, 1]")
        bins = sorted(self.confidence_bins, key=lambda b: b.lo)
        edges = np.array([b.lo for b in bins] + [bins[-1].hi])
        rates = np.array([b.accept_rate for b in bins])
        idx = np.clip(np.searchsorted(edges, conf, side="right") - 1, 0, len(bins) - 1)
        outside = (conf < edges[0]) | (conf > edges[-1])
        if np.any(outside):
            raise self._fail(f"confidence {conf[outside][0]} is outside the bins [{edges[0]}, {edges[-1]}]")
        out = rates[idx]
        return float(out[0]) if np.ndim(confidence) == 0 else out

    # ------------------------------------------------------------------ ALSpec
    def alspec_hit_rate(self, layer: int | None = None, task: str | None = None, lam: float | None = None) -> float:
        """Probability that a layer's speculated attention passes the norm check.

        A measured per-layer profile answers per layer (``layer`` None: the mean). A paper table
        answers per task and lambda; ``task`` None means the mean over the table's tasks and
        ``lam`` None the model's default lambda (the paper's recommended 0.10 for ALSpec).
        """
        if self.alspec_hit_rate_by_layer is not None:
            rates = self.alspec_hit_rate_by_layer
            if layer is None:
                return float(np.mean(rates))
            if not 0 <= layer < len(rates):
                raise self._fail(f"has hit rates for {len(rates)} layers; layer {layer} is outside")
            return float(rates[layer])
        if not self.alspec_hit_rates:
            raise self._fail("has no ALSpec hit rates")
        lam = self.alspec_default_lambda if lam is None else float(lam)
        tasks = [task] if task is not None else sorted(self.alspec_hit_rates)
        out = []
        for t in tasks:
            if t not in self.alspec_hit_rates:
                raise UnknownNameError(f"task of acceptance model {self.name}:", t, self.alspec_hit_rates)
            row = self.alspec_hit_rates[t]
            match = [v for k, v in row.items() if math.isclose(k, lam)]
            if not match:
                raise self._fail(f"has no hit rate at lambda {lam}; lambdas: {', '.join(str(k) for k in sorted(row))}")
            out.append(match[0])
        return float(np.mean(out))

    # ------------------------------------------------------------------ Dovetail tau
    def tau(self, drafter: str, blocks: int | None = None, width: int | None = None, temperature: float = 0.0) -> float:
        """Mean acceptance length of a drafter (Dovetail Tables I/III); one line if not in the table."""
        if not self.tau_entries:
            raise self._fail("has no tau table (Dovetail)")
        for e in self.tau_entries:
            if (e.drafter == drafter and e.blocks == blocks and (width is None or e.width == width)
                    and math.isclose(e.temperature, temperature)):
                return e.tau
        have = ", ".join(sorted({f"{e.drafter}/{e.blocks}@{e.width}" for e in self.tau_entries
                                 if math.isclose(e.temperature, temperature)}))
        raise self._fail(f"has no tau for drafter {drafter} blocks={blocks} width={width} T={temperature}; "
                         f"it has: {have}")

    def tau_blocks(self, drafter: str, temperature: float = 0.0) -> tuple[int, ...]:
        """Drafter depths (blocks) the tau table covers for ``drafter``."""
        return tuple(sorted({e.blocks for e in self.tau_entries or () if e.drafter == drafter
                             and e.blocks is not None and math.isclose(e.temperature, temperature)}))

    def describe(self) -> dict:
        """What the model holds, for ``--json`` outputs."""
        out: dict = {"name": self.name, "source": self.source, "forms": []}
        for form in ("medusa_accuracy", "draft_alpha", "confidence_bins", "length_table", "length_curve", "chain_length_table",
                     "alspec_hit_rate_by_layer", "alspec_hit_rates", "tau_entries"):
            if getattr(self, form) is not None:
                out["forms"].append(form)
        if self.width_range:
            out["width_range"] = list(self.width_range)
        return out


# ---------------------------------------------------------------------- formulas
def omega(gamma, alpha):
    """Omega(gamma, alpha) = (1 - alpha^(gamma+1)) / (1 - alpha): expected tokens per verification
    of a chain of gamma draft tokens each accepted with probability alpha (Dovetail §II / MagicDec).
    Vectorised; at alpha = 1 the limit gamma + 1."""
    g = np.asarray(gamma, dtype=float)
    a = np.asarray(alpha, dtype=float)
    if np.any(g < 0) or np.any((a < 0) | (a > 1)):
        raise HetSpecError(f"omega needs gamma >= 0 and alpha in [0, 1] (got {gamma}, {alpha})")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(np.isclose(a, 1.0), g + 1.0, (1.0 - a ** (g + 1.0)) / (1.0 - np.where(np.isclose(a, 1.0), 0.0, a)))
    return float(out) if out.ndim == 0 else out


def expected_tokens_from_node_probs(tree: TokenTree, node_probs: Sequence[float]) -> float:
    """Expected tokens per step of a draft tree whose node i is correct (given its parent was) with
    probability ``node_probs[i]`` (root ignored). Siblings are distinct tokens, so at most one is
    correct: their probabilities must sum to <= 1."""
    p = np.asarray(node_probs, dtype=float)
    if p.shape != (tree.size,):
        raise HetSpecError(f"node_probs has {p.size} entries for a tree of {tree.size} nodes")
    if np.any((p < 0) | (p > 1)):
        raise HetSpecError("node probabilities must be in [0, 1]")
    for node, kids in enumerate(tree.children):
        if kids and p[list(kids)].sum() > 1 + 1e-9:
            raise HetSpecError(f"acceptance probabilities of the children of node {node} sum to > 1")
    values = np.ones(tree.size)
    for i in range(1, tree.size):
        values[i] = values[tree.parents[i]] * p[i]
    return float(values.sum())


def _bernoulli_round(mean: float, rng: np.random.Generator) -> int:
    low = math.floor(mean)
    return int(low + (rng.random() < mean - low))


# ---------------------------------------------------------------------- loading
def from_profile(profile: AcceptanceProfile) -> AcceptanceModel:
    """An acceptance model from a real-path profile."""
    table = tuple(sorted(profile.acceptance_length.items())) if profile.acceptance_length else None
    chain = tuple(sorted(profile.chain_acceptance_length.items())) if profile.chain_acceptance_length else None
    return AcceptanceModel(
        name=profile.name, source=profile.source, medusa_accuracy=profile.medusa_accuracy,
        draft_alpha=profile.draft_alpha, confidence_bins=profile.draft_confidence_bins, length_table=table,
        chain_length_table=chain,
        alspec_hit_rate_by_layer=profile.alspec_hit_rate_by_layer, meta=dict(profile.meta),
    )


def preset_dir() -> Path:
    return Path(str(resources.files("sim").joinpath(PRESET_DIR)))


def acceptance_names() -> tuple[str, ...]:
    """Paper-table acceptance presets by name."""
    return tuple(sorted(p.stem for p in preset_dir().glob("*.json")))
