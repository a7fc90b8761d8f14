"""``hetspec sweep``: what it skips and why, and ``--scheduler`` (the same chunks of problems on a Dask
cluster: the same rows in the same order)."""

from __future__ import annotations

import sys

import pytest

from cli_runner import one_line_error
from hetspec.cli import main

try:
    import dask.distributed  # noqa: F401
    HAVE_DASK = True
except ImportError:
    HAVE_DASK = False
needs_dask = pytest.mark.skipif(not HAVE_DASK, reason="needs the dask extra (pip install 'hetspec[dask]')")
A100 = "a100-80gb-pcie"

SWEEP = ("sweep", "--models", "llama-68m", "--platforms", "a100-80gb-pcie", "--methods", "ar,medusa,chain",
         "--acceptance", "ghidorah-mbpp", "--contexts", "64,256,1024", "--batches", "1,2", "--tree-width", "1,8,32",
         "--no-progress")


@needs_dask
def test_a_local_cluster_gives_the_rows_of_the_local_run(tmp_path, capsys):
    local, dask = tmp_path / "local.csv", tmp_path / "dask.csv"
    assert main([*SWEEP, "--out", str(local)]) == 0
    assert main([*SWEEP, "--out", str(dask), "--scheduler", "local", "--workers", "2"]) == 0
    capsys.readouterr()
    assert dask.read_text() == local.read_text()
    assert len(local.read_text().splitlines()) > 40


@needs_dask
def test_an_unreachable_scheduler_is_one_line(tmp_path, capsys, monkeypatch):
    import sim.sweep

    monkeypatch.setattr(sim.sweep, "CONNECT_TIMEOUT_S", 1.0)
    one_line_error(capsys, *SWEEP, "--out", str(tmp_path / "t.csv"), "--scheduler", "tcp://127.0.0.1:9",
                   match="cannot reach the Dask scheduler at tcp://127.0.0.1:9 within 1 s")


@needs_dask
@pytest.mark.parametrize("args, match", [
    (("--scheduler", "nowhere"), "--scheduler expects local or a Dask scheduler address like tcp://HOST:8786"),
    (("--scheduler", "tcp://127.0.0.1:9", "--workers", "2"), "the cluster at tcp://127.0.0.1:9 has its own workers"),
])
def test_bad_scheduler_arguments_are_one_line(tmp_path, capsys, args, match):
    one_line_error(capsys, *SWEEP, "--out", str(tmp_path / "t.csv"), *args, match=match)


def test_without_dask_the_scheduler_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "dask.distributed", None)      # as if the extra were not installed
    one_line_error(capsys, *SWEEP, "--out", str(tmp_path / "t.csv"), "--scheduler", "local",
                   match="--scheduler needs Dask: pip install 'hetspec[dask]'")


def test_sweep_skips_contexts_beyond_a_model_and_says_so(tmp_path, capsys):
    out = tmp_path / "t.csv"
    assert main(["sweep", "--models", "vicuna-7b,zephyr-7b", "--platforms", A100, "--methods", "ar",
                 "--contexts", "256,8192", "--out", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "skipped vicuna-7b on a100-80gb-pcie (ar; 1 problem): context 8192 + 1 new token exceeds" in err
    import pandas as pd

    t = pd.read_csv(out)
    assert set(zip(t["model"], t["context"])) == {("vicuna-7b", 256), ("zephyr-7b", 256), ("zephyr-7b", 8192)}
