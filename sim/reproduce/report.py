"""Paper-vs-HetSpec reports: comparison rows, fitted parameters, markdown and JSON output.

Every reproduced result is a :class:`Comparison` of a paper value with the HetSpec value. Its
``kind`` says how much it proves:

- ``prediction``: computed from presets and acceptance tables without using this number;
- ``fit``: this number (or one it determines) was used to fit a parameter: shown, never counted;
- ``exact``: a formula reproduced to the paper's printed precision (e.g. intensity tables);
- ``choice``: a discrete decision (best width, best token count): matched or not;
- ``alternative``, ``alternative-choice``: the same value or decision by a model that is *not* the report's
  record (e.g. a measured operator profile beside the roofline): shown side by side, never counted.

Error statistics (median absolute relative error) count ``prediction`` rows only. Every fitted
parameter is a :class:`Fit` that names the paper number it was fitted to.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hwmodels.atomic_files import write_text
from hwmodels.datafile import output_folder, writing
from hwmodels.errors import HetSpecError

KINDS = ("prediction", "fit", "exact", "choice", "alternative", "alternative-choice")
#: Kinds judged as decisions (matched or not) rather than by relative error.
CHOICE_KINDS = ("choice", "alternative-choice")


@dataclass(frozen=True)
class Comparison:
    table: str            # where the paper gives it: "Table I", "Fig. 9 (MBPP)", "§4 text"
    quantity: str         # what it is: "speedup, Ghidorah, w=16"
    paper: float
    hetspec: float
    kind: str = "prediction"
    unit: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise HetSpecError(f"comparison kind {self.kind!r} unknown; valid: {', '.join(KINDS)}")
        for label in ("paper", "hetspec"):
            value = getattr(self, label)
            try:
                number = float(value)  # numpy scalars too; stored as a plain float for JSON
            except (TypeError, ValueError):
                number = math.nan
            if isinstance(value, bool) or not math.isfinite(number):
                raise HetSpecError(f"comparison {self.quantity!r}: {label} value must be a finite number (got {value!r})")
            object.__setattr__(self, label, number)

    @property
    def rel_error(self) -> float:
        """(HetSpec − paper) / |paper|; for choices 0 if matched, else 1."""
        if self.kind in CHOICE_KINDS:
            return 0.0 if self.matched else 1.0
        if self.paper == 0:
            return 0.0 if self.hetspec == 0 else math.inf
        return (self.hetspec - self.paper) / abs(self.paper)

    @property
    def matched(self) -> bool:
        return self.hetspec == self.paper if self.kind in CHOICE_KINDS else abs(self.rel_error) < 5e-3


@dataclass(frozen=True)
class Fit:
    parameter: str        # "contention_efficiency of jetson-xavier-nx-204mhz/lpddr4x"
    value: float          # stored as a plain float
    fitted_to: str        # "Ghidorah Fig. 9 MBPP EM speedup at w=16 (5.8x)"
    how: str = ""         # "least squares over ...", "solved exactly from ..."


@dataclass(frozen=True)
class Figure:
    filename: str         # PNG next to the markdown
    caption: str


@dataclass
class PaperReport:
    paper: str                              # "ghidorah"
    title: str                              # full paper title
    citation: str                           # the paper's reference: authors, "title", venue year
    comparisons: list[Comparison] = field(default_factory=list)
    fits: list[Fit] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    discussion: str = ""                    # the honest paragraph: what does not match and why
    missing: list[str] = field(default_factory=list)  # what the paper does not give
    setup: str = ""                         # presets, acceptance tables and methods used

    def add(self, *rows: Comparison) -> None:
        self.comparisons.extend(rows)

    def rows(self, kind: str) -> list[Comparison]:
        return [c for c in self.comparisons if c.kind == kind]

    @property
    def median_abs_rel_error(self) -> float | None:
        """Median |relative error| over prediction rows (None if there are none)."""
        errors = [abs(c.rel_error) for c in self.rows("prediction")]
        return float(statistics.median(errors)) if errors else None

    @property
    def choices_matched(self) -> tuple[int, int]:
        choices = self.rows("choice")
        return int(sum(bool(c.matched) for c in choices)), len(choices)

    @property
    def exact_matched(self) -> tuple[int, int]:
        exact = self.rows("exact")
        return int(sum(bool(c.matched) for c in exact)), len(exact)

    def summary(self) -> dict:
        matched, n_choices = self.choices_matched
        exact, n_exact = self.exact_matched
        return {"paper": self.paper, "predictions": len(self.rows("prediction")),
                "median_abs_rel_error": self.median_abs_rel_error, "choices_matched": matched,
                "choices": n_choices, "exact_matched": exact, "exact": n_exact, "fits": len(self.fits)}

    def to_json(self) -> dict:
        return {"summary": self.summary(), "title": self.title, "citation": self.citation, "setup": self.setup,
                "comparisons": [asdict(c) | {"rel_error": _finite(c.rel_error)} for c in self.comparisons],
                "fits": [asdict(f) for f in self.fits], "figures": [asdict(f) for f in self.figures],
                "discussion": self.discussion, "missing": self.missing}

    def to_markdown(self, command: str) -> str:
        s = self.summary()
        med = "n/a" if s["median_abs_rel_error"] is None else f"{100 * s['median_abs_rel_error']:.1f} %"
        lines = [
            f"# {self.title}: paper vs HetSpec",
            "",
            f"Generated by `{command}` from the presets in `hwmodels/presets/` and the acceptance tables in "
            f"`sim/presets/acceptance/`; do not edit (regenerate instead). Paper: {self.citation}.",
            "",
            f"**Predictions:** {s['predictions']} rows, median absolute relative error **{med}**. "
            f"**Choices reproduced:** {s['choices_matched']}/{s['choices']}. "
            f"**Exact reproductions:** {s['exact_matched']}/{s['exact']}. **Fitted parameters:** {s['fits']} "
            f"(results they were fitted to are marked `fit` and not counted).",
            "",
        ]
        if self.setup:
            lines += ["## Setup", "", self.setup, ""]
        lines += ["## Results", "", "| where | quantity | paper | HetSpec | error | kind |",
                  "|---|---|---:|---:|---:|---|"]
        for c in self.comparisons:
            unit = f" {c.unit}" if c.unit else ""
            if c.kind in CHOICE_KINDS:
                err = "match" if c.matched else "**differs**"
            else:
                err = f"{100 * c.rel_error:+.1f} %"
            note = f" ({c.note})" if c.note else ""
            lines.append(f"| {c.table} | {c.quantity}{note} | {_fmt(c.paper)}{unit} | {_fmt(c.hetspec)}{unit} | "
                         f"{err} | {c.kind} |")
        lines.append("")
        if self.fits:
            lines += ["## Fitted parameters", "", "| parameter | value | fitted to | how |", "|---|---:|---|---|"]
            lines += [f"| {f.parameter} | {_fmt(f.value)} | {f.fitted_to} | {f.how} |" for f in self.fits]
            lines.append("")
        for fig in self.figures:
            lines += [f"![{fig.caption}]({fig.filename})", "", f"*{fig.caption}*", ""]
        if self.discussion:
            lines += ["## What does not match, and why", "", self.discussion, ""]
        if self.missing:
            lines += ["## What the paper does not give", ""] + [f"- {m}" for m in self.missing] + [""]
        return "\n".join(lines)

    def write(self, out_dir: str | Path, command: str) -> Path:
        out = output_folder(out_dir, "report folder")
        path = out / f"{self.paper}.md"
        with writing(path, "report"):
            write_text(path, self.to_markdown(command))
            write_text(out / f"{self.paper}.json", json.dumps(self.to_json(), indent=2) + "\n")
        return path


def _fmt(value: float) -> str:
    if float(value).is_integer() and abs(value) < 1e6:
        return str(int(value))
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.3f}".rstrip("0").rstrip(".")


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
