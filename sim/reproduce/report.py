"""Paper-vs-HetSpec reports: comparison rows, fitted parameters, markdown and JSON output.

Every reproduced result is a :class:`Comparison` of a paper value with the HetSpec value. Its
``kind`` says how much it proves:

- ``prediction``: computed from presets and acceptance tables without using this number;
- ``fit``: this number (or one it determines) was used to fit a parameter: shown, never counted;
- ``consistency``: the paper's own arithmetic re-applied to its own printed inputs (intensity tables, a
  latency rebuilt from the paper's kernel table): it checks the transcription and the formula, not a model;
- ``choice``: a discrete decision (best width, best token count) that nothing fitted to it decides: matched or
  not, and counted as a choice reproduced from independent data when matched;
- ``fit-choice``: a discrete decision that a number fitted to the same figure decides: shown, never counted as
  reproduced (it is in the denominator of the choices all the same);
- ``alternative``, ``alternative-choice``: the same value or decision by a model that is *not* the report's
  record (e.g. a measured operator profile beside the roofline): shown side by side, never counted.

Error statistics (median absolute relative error) count ``prediction`` rows only. Every fitted
parameter is a :class:`Fit` that names the paper number it was fitted to; a row of kind ``fit`` or
``fit-choice`` names that figure in ``fitted_to``, and so may any other row whose value rests on a fit.
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

KINDS = ("prediction", "fit", "consistency", "choice", "fit-choice", "alternative", "alternative-choice")
#: Kinds judged as decisions (matched or not) rather than by relative error.
CHOICE_KINDS = ("choice", "fit-choice", "alternative-choice")
#: Kinds whose value a fitted number decides: they must name the figure it was fitted to.
FIT_KINDS = ("fit", "fit-choice")


@dataclass(frozen=True)
class Comparison:
    table: str            # where the paper gives it: "Table I", "Fig. 9 (MBPP)", "§4 text"
    quantity: str         # what it is: "speedup, Ghidorah, w=16"
    paper: float
    hetspec: float
    kind: str = "prediction"
    unit: str = ""
    note: str = ""
    fitted_to: str = ""   # the figure a fit this row rests on was fitted to: "Fig. 9 (MBPP), w=16 and 32"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise HetSpecError(f"comparison kind {self.kind!r} unknown; valid: {', '.join(KINDS)}")
        if self.kind in FIT_KINDS and not self.fitted_to.strip():
            raise HetSpecError(f"comparison {self.quantity!r} of kind {self.kind} must name the figure it was fitted to")
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
    def choices_reproduced(self) -> tuple[int, int]:
        """(choices matched from independent data, all choices of the paper, fit-conditioned ones included)."""
        matched = sum(bool(c.matched) for c in self.rows("choice"))
        return int(matched), len(self.rows("choice")) + len(self.rows("fit-choice"))

    @property
    def consistency_matched(self) -> tuple[int, int]:
        checks = self.rows("consistency")
        return int(sum(bool(c.matched) for c in checks)), len(checks)

    def summary(self) -> dict:
        reproduced, n_choices = self.choices_reproduced
        consistent, n_checks = self.consistency_matched
        return {"paper": self.paper, "choices_reproduced": reproduced, "choices": n_choices,
                "fit_choices": len(self.rows("fit-choice")),
                "fit_rows": len(self.rows("fit")) + len(self.rows("fit-choice")),
                "consistency_matched": consistent, "consistency_checks": n_checks,
                "predictions": len(self.rows("prediction")), "median_abs_rel_error": self.median_abs_rel_error,
                "fits": len(self.fits)}

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
            *counts_table([s]),
            "",
            f"A choice counts as reproduced only when nothing that decides it was fitted to it "
            f"({s['fit_choices']} of the {s['choices']} choices rest on a fit to their own figure: kind `fit-choice`). "
            f"Fit rows are results a preset number was fitted to ({s['fits']} fitted parameters); consistency checks "
            f"re-apply the paper's own arithmetic to its own tables. **Predictions:** {s['predictions']} rows, median "
            f"absolute relative error **{med}**.",
            "",
        ]
        if self.setup:
            lines += ["## Setup", "", self.setup, ""]
        lines += ["## Results", "", "| where | quantity | paper | HetSpec | error | kind | rests on a fit to |",
                  "|---|---|---:|---:|---:|---|---|"]
        for c in self.comparisons:
            unit = f" {c.unit}" if c.unit else ""
            if c.kind in CHOICE_KINDS:
                err = "match" if c.matched else "**differs**"
            else:
                err = f"{100 * c.rel_error:+.1f} %"
            note = f" ({c.note})" if c.note else ""
            lines.append(f"| {c.table} | {c.quantity}{note} | {_fmt(c.paper)}{unit} | {_fmt(c.hetspec)}{unit} | "
                         f"{err} | {c.kind} | {c.fitted_to} |")
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


COUNT_HEADER = ("| paper | choices reproduced from independent data | fit rows | consistency checks |",
                "|---|---:|---:|---:|")


def counts_table(summaries: list[dict], total: bool = False) -> list[str]:
    """The three counts side by side, one row per paper summary (and a total row if asked)."""
    rows = list(summaries) + ([_total(summaries)] if total else [])
    return [*COUNT_HEADER] + [f"| {s['paper']} | {s['choices_reproduced']}/{s['choices']} | {s['fit_rows']} | "
                              f"{s['consistency_matched']}/{s['consistency_checks']} |" for s in rows]


def _total(summaries: list[dict]) -> dict:
    keys = ("choices_reproduced", "choices", "fit_rows", "consistency_matched", "consistency_checks")
    return {"paper": "**all papers**"} | {k: sum(s[k] for s in summaries) for k in keys}


def write_summary(summaries: list[dict], out_dir: str | Path) -> Path:
    """``summary.md`` of a run over several papers: the three counts per paper and in total."""
    out = output_folder(out_dir, "report folder")
    path = out / "summary.md"
    lines = ["# The papers' results in HetSpec: summary", "",
             "Generated by `hetspec reproduce all`; do not edit (regenerate instead). A choice counts as reproduced "
             "only when nothing that decides it was fitted to it; fit rows are results a preset number was fitted "
             "to; consistency checks re-apply a paper's own arithmetic to its own tables. Each paper's report is "
             "`<paper>.md` next to this file.", "", *counts_table(summaries, total=True), ""]
    with writing(path, "report"):
        path.write_text("\n".join(lines))
    return path


def _fmt(value: float) -> str:
    if float(value).is_integer() and abs(value) < 1e6:
        return str(int(value))
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.3f}".rstrip("0").rstrip(".")


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
