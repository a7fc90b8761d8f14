"""The what-if notebooks in ``notebooks/`` run top to bottom (nbclient, kernel ``python3``) and keep no outputs in git."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from paths import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
#: Per-notebook execution limit (each is meant to take well under half a minute on 2 cores).
CELL_TIMEOUT_S = 300


def test_there_are_four_what_if_notebooks():
    assert {p.stem for p in NOTEBOOKS} >= {"jetson_width_ratio", "dovetail_vs_offload", "alspec_context",
                                           "host_calibration"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path):
    import nbformat

    book = nbformat.read(path, as_version=4)
    for cell in book.cells:
        if cell.cell_type == "code":
            assert not cell.get("outputs") and cell.get("execution_count") is None, f"{path.name} has outputs"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    # a calibrated host of the developer's machine is not needed: host_calibration measures a glance
    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", str(tmp_path / "platforms"))
    book = nbformat.read(path, as_version=4)
    t = time.perf_counter()
    NotebookClient(book, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    images = sum("image/png" in out.get("data", {}) for cell in book.cells if cell.cell_type == "code"
                 for out in cell.get("outputs", []))
    assert images >= 1, f"{path.name} drew no plot"
    print(f"{path.name}: {time.perf_counter() - t:.1f} s, {images} plots")
