"""Medusa App. G.3 (Figs. 21-23) rerun on the measured A100 profile (a100-80gb-vidur) beside the roofline:
what the profile chooses, and that its rows are shown without changing the report's record."""

from __future__ import annotations


import pytest

from sim.acceptance_loader import load_acceptance
from sim.model_spec import get_model
from sim.reproduce import medusa, medusa_profile


@pytest.fixture(scope="module")
def curves():
    return medusa_profile.profile_curves(medusa, get_model(medusa.APPG_MODEL), load_acceptance(medusa.ACCEPTANCE))


def test_the_profile_moves_the_batch_1_optimum_to_the_papers_64(curves):
    found = medusa_profile.choices(medusa, curves)
    assert found["bs 1"] == 64 == medusa.FIG22_BEST[1]
    # ... and picks fewer candidates than the paper from batch 2 up: its GEMMs keep slowing past 64 tokens
    assert [found[f"bs {b}"] for b in (2, 4, 8, 16)] == [32, 16, 16, 16]
    assert {found[f"s {s}"] for s in medusa.FIG23_SPEEDUP} == {16}
    bs1 = curves["batch"][1]
    assert bs1[80][0] - bs1[64][0] > 0.1          # the measured GEMM step between 64 and 80 candidates


def test_the_profile_rows_are_alternatives_and_the_roofline_stays_the_record(tmp_path):
    report = medusa.reproduce(tmp_path)
    alt = [c for c in report.comparisons if c.kind.startswith("alternative")]
    assert len(alt) == 7 + 7 + len(medusa.FIG22_BEST) + len(medusa.FIG23_SPEEDUP)
    assert all("A100 measured profile" in c.quantity for c in alt)
    summary = report.summary()
    assert (summary["choices_reproduced"], summary["choices"]) == (12, 13)      # the roofline's, as before
    assert summary["predictions"] == 92        # Fig. 21's seven speedups are fits of the curve fitted to Fig. 21
    assert sum(c.matched for c in alt if c.kind == "alternative-choice") == 3
    assert "The roofline stays this report's record" in report.discussion
    assert (tmp_path / medusa_profile.FIGURE.filename).is_file()
