"""Acceptance profiles: what the real path measures and the simulator consumes.

A profile records how often speculation is accepted, in whichever forms its source provides:

- ``medusa_accuracy[d][r]``: probability that Medusa head d+1's rank-r candidate is the correct
  token (top-(r+1) accuracy minus top-r accuracy; Medusa §2.3.3). Feeds
  :meth:`sim.tree.TokenTree.expected_accepted_length`.
- ``draft_alpha``: a draft model's mean per-token acceptance rate (Dovetail §II's α).
- ``draft_confidence_bins``: per-token acceptance rate as a function of the draft's confidence
  (its probability of the proposed token), for LLMCad-style confidence-driven trees.
- ``acceptance_length``: measured mean tokens per step against tree width (e.g. Ghidorah Table I),
  for sources that give no per-head accuracies.
- ``chain_acceptance_length``: measured mean tokens per step of greedy draft-chain speculation
  against the draft length gamma (replayed on the real path's calibration prompts; unlike
  Omega(gamma, alpha) it keeps the correlation between neighbouring draft tokens).
- ``alspec_hit_rate_by_layer``: ALSpec's per-layer probability that approximate attention passes
  the norm check.

Stored as JSON (``format: hetspec-acceptance-profile/1``) by ``hetspec profile-acceptance``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from hwmodels.atomic_files import write_text
from hwmodels.datafile import output_path, read_data_file, writing
from hwmodels.errors import HetSpecError, PresetError

FORMAT = "hetspec-acceptance-profile/1"


@dataclass(frozen=True)
class ConfidenceBin:
    lo: float            # draft confidence interval [lo, hi)
    hi: float
    accept_rate: float   # fraction of draft tokens in the bin that the target accepted
    count: int           # tokens observed in the bin


@dataclass(frozen=True)
class AcceptanceProfile:
    name: str
    source: str
    medusa_accuracy: tuple[tuple[float, ...], ...] | None = None
    draft_alpha: float | None = None
    draft_confidence_bins: tuple[ConfidenceBin, ...] | None = None
    acceptance_length: dict[int, float] | None = None
    chain_acceptance_length: dict[int, float] | None = None
    alspec_hit_rate_by_layer: tuple[float, ...] | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"acceptance profile {self.name!r}"
        if self.medusa_accuracy is not None:
            rows = tuple(tuple(float(v) for v in row) for row in self.medusa_accuracy)
            if not rows or any(len(r) != len(rows[0]) or not r for r in rows):
                raise HetSpecError(f"{where}: medusa_accuracy must be a non-empty rectangular depth x rank matrix")
            for d, row in enumerate(rows):
                if any(not 0.0 <= v <= 1.0 for v in row) or sum(row) > 1.0 + 1e-6:
                    raise HetSpecError(f"{where}: medusa_accuracy[{d}] must be probabilities summing to <= 1")
            object.__setattr__(self, "medusa_accuracy", rows)
        if self.draft_alpha is not None and not 0.0 <= self.draft_alpha < 1.0:
            raise HetSpecError(f"{where}: draft_alpha must be in [0, 1), got {self.draft_alpha}")
        if self.draft_confidence_bins is not None:
            for b in self.draft_confidence_bins:
                if not (0.0 <= b.lo < b.hi <= 1.0 and 0.0 <= b.accept_rate <= 1.0 and b.count >= 0):
                    raise HetSpecError(f"{where}: bad confidence bin {b}")
        if self.acceptance_length is not None:
            table = {int(k): float(v) for k, v in self.acceptance_length.items()}
            if any(k < 1 or v < 1.0 for k, v in table.items()):
                raise HetSpecError(f"{where}: acceptance_length needs widths >= 1 and lengths >= 1")
            object.__setattr__(self, "acceptance_length", dict(sorted(table.items())))
        if self.chain_acceptance_length is not None:
            table = {int(k): float(v) for k, v in self.chain_acceptance_length.items()}
            if any(k < 1 or not 1.0 <= v <= k + 1.0 + 1e-9 for k, v in table.items()):
                raise HetSpecError(f"{where}: chain_acceptance_length needs gammas >= 1 and 1 <= length <= gamma + 1")
            object.__setattr__(self, "chain_acceptance_length", dict(sorted(table.items())))
        if self.alspec_hit_rate_by_layer is not None:
            rates = tuple(float(v) for v in self.alspec_hit_rate_by_layer)
            if not rates or any(not 0.0 <= v <= 1.0 for v in rates):
                raise HetSpecError(f"{where}: alspec_hit_rate_by_layer must be probabilities")
            object.__setattr__(self, "alspec_hit_rate_by_layer", rates)

    @property
    def medusa_depths(self) -> int:
        return len(self.medusa_accuracy) if self.medusa_accuracy else 0

    def to_json(self) -> dict:
        out: dict = {"format": FORMAT, "name": self.name, "source": self.source}
        if self.medusa_accuracy is not None:
            out["medusa_accuracy"] = [list(r) for r in self.medusa_accuracy]
        if self.draft_alpha is not None:
            out["draft_alpha"] = self.draft_alpha
        if self.draft_confidence_bins is not None:
            out["draft_confidence_bins"] = [vars(b) for b in self.draft_confidence_bins]
        if self.acceptance_length is not None:
            out["acceptance_length"] = {str(k): v for k, v in self.acceptance_length.items()}
        if self.chain_acceptance_length is not None:
            out["chain_acceptance_length"] = {str(k): v for k, v in self.chain_acceptance_length.items()}
        if self.alspec_hit_rate_by_layer is not None:
            out["alspec_hit_rate_by_layer"] = list(self.alspec_hit_rate_by_layer)
        if self.meta:
            out["meta"] = self.meta
        return out

    def save(self, path: str | Path) -> Path:
        path = output_path(path, "acceptance profile")
        with writing(path, "acceptance profile"):
            write_text(path, json.dumps(self.to_json(), indent=2) + "\n")
        return path

    @classmethod
    def from_json(cls, data: dict, where: str = "acceptance profile") -> "AcceptanceProfile":
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise PresetError(where, "format", f"expected {FORMAT!r}")
        for key in ("name", "source"):
            if key not in data:
                raise PresetError(where, key, "missing field")
        try:
            bins = data.get("draft_confidence_bins")
            return cls(
                name=str(data["name"]), source=str(data["source"]),
                medusa_accuracy=data.get("medusa_accuracy"),
                draft_alpha=data.get("draft_alpha"),
                draft_confidence_bins=None if bins is None else tuple(ConfidenceBin(**b) for b in bins),
                acceptance_length=data.get("acceptance_length"),
                chain_acceptance_length=data.get("chain_acceptance_length"),
                alspec_hit_rate_by_layer=data.get("alspec_hit_rate_by_layer"),
                meta=dict(data.get("meta", {})),
            )
        except TypeError as exc:
            raise PresetError(where, "draft_confidence_bins", str(exc)) from None
        except HetSpecError as exc:
            raise PresetError(where, "values", str(exc)) from None

    @classmethod
    def load(cls, path: str | Path) -> "AcceptanceProfile":
        return cls.from_json(read_data_file(path, "acceptance profile"), str(path))


def rounds_key(width: int, depth: int) -> str:
    """The key of a tree budget and depth cap in a profile's ``meta["draft_tree_rounds"]`` (the real
    ``draft-tree`` decoder's rounds, :mod:`real.run.draft_tree_rounds`)."""
    return f"{width}x{depth}"
