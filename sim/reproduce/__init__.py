"""Reproductions of the five papers' results with HetSpec's presets (``hetspec reproduce``): Medusa, Ghidorah,
Dovetail, LLMCad and ALSpec (each module's ``CITATION`` gives the full reference).

Each paper has one module exposing ``reproduce(out_dir: Path) -> PaperReport``: it computes every
result it can from the platform presets, model presets and acceptance tables, writes its figures
(PNG) into ``out_dir`` and returns the report (:mod:`sim.reproduce.report`), which
:func:`run` writes as ``<paper>.md`` + ``<paper>.json``. Adding a paper = one module + one line.
"""

from __future__ import annotations

from pathlib import Path

from hwmodels.datafile import output_folder
from hwmodels.errors import UnknownNameError
from sim.registry import import_registered
from sim.reproduce.report import PaperReport

#: paper name -> module implementing ``reproduce(out_dir)``
PAPER_MODULES: dict[str, str] = {
    "medusa": "sim.reproduce.medusa",
    "ghidorah": "sim.reproduce.ghidorah",
    "dovetail": "sim.reproduce.dovetail",
    "llmcad": "sim.reproduce.llmcad",
    "alspec": "sim.reproduce.alspec",
}

DEFAULT_OUT = Path("reports") / "papers"


def paper_names() -> tuple[str, ...]:
    return tuple(PAPER_MODULES)


def run(paper: str, out_dir: str | Path = DEFAULT_OUT) -> tuple[PaperReport, Path]:
    """Reproduce ``paper``, write ``<out_dir>/<paper>.md`` (+ ``.json`` and figures); return both."""
    if paper not in PAPER_MODULES:
        raise UnknownNameError("paper", paper, PAPER_MODULES)
    module = import_registered(PAPER_MODULES[paper], f"paper {paper} has no reproduction")
    out = output_folder(out_dir, "report folder")
    report = module.reproduce(out)      # its figures: sim.plots.save_figure, one line if one cannot be written
    path = report.write(out, f"hetspec reproduce {paper}")
    return report, path
