"""``scripts/gpu_report.sh``: the GPU checks in one command, within a time budget.

A stand-in interpreter (``PYTHON``) that reports a CUDA device and echoes what it is asked to run lets the
budget logic run on a machine without one: which steps run, which are skipped and named, what each file holds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from paths import REPO

ROOT = REPO
SCRIPT = ROOT / "scripts" / "gpu_report.sh"
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None or shutil.which("timeout") is None, reason="needs bash and timeout")


def _run(*args: str, python: str = sys.executable) -> subprocess.CompletedProcess:
    return subprocess.run([BASH, str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHON": python})


def test_a_bad_time_budget_is_one_line_exit_2(tmp_path):
    proc = _run(str(tmp_path / "gpu"), "soon")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "gpu_report: SECONDS must be a whole number of seconds, got 'soon'"
    assert not (tmp_path / "gpu").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_it_refuses_in_one_line_and_writes_nothing(tmp_path):
    proc = _run(str(tmp_path / "gpu"), "60")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith("gpu_report: no CUDA device here")
    assert not (tmp_path / "gpu").exists()


def test_the_steps_run_in_order_until_the_budget_and_the_rest_are_named(tmp_path):
    fake = tmp_path / "fake-python"
    fake.write_text("#!/usr/bin/env bash\n"
                    "if [ \"$1\" = -c ]; then echo 'python, torch, CUDA, device: 3.12 2.11 13.0 Fake GPU'; exit 0; fi\n"
                    "printf 'bar:  50%%|#    | 1/2 [00:01<00:01,  1.00it/s]\\r'\n"
                    "echo \"ran $*\"\n")
    fake.chmod(0o755)
    out = tmp_path / "gpu"
    proc = _run(str(out), "100", python=str(fake))
    assert proc.returncode == 0, proc.stderr
    tests = (out / "cuda-tests.txt").read_text().splitlines()
    assert tests[0].startswith("ran -m pytest -q") and "-k cuda or gpu" in tests[0] and tests[-1] == "exit status 0"
    assert not any("%|" in line for line in tests)                      # the progress bar left out
    assert "Fake GPU" in (out / "machine.txt").read_text()
    skipped = (out / "skipped.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in skipped] == ["train.txt", "calibrate.txt", "calibrate-default.txt"]
    assert "needs about 240 s" in skipped[0] and "needs about 600 s" in skipped[2]
    assert not (out / "train.txt").exists() and not (out / "validate.txt").exists()   # no profile: no validation
    for name in ("run-compare.txt", "bench-llama2-7b.txt", "hetero-hcmp.txt", "hetero-dovetail.txt", "hetero-alspec.txt"):
        assert (out / name).read_text().startswith("ran -m hetspec ")           # the steps that fit in what was left
    assert "ran -m real.run.gpu_record " + str(out) + " --started " in proc.stdout    # the run record, last


def test_the_run_record_lists_each_step_and_the_validation_headline(tmp_path):
    import json

    from real.run.gpu_record import main as record_main

    out = tmp_path / "2026-01-01-nvidia-h200-gpu-report"
    (out / "validation").mkdir(parents=True)
    (out / "machine.txt").write_text("date: now\n")
    (out / "cuda-tests.txt").write_text("10 passed\nexit status 0\n")
    (out / "bench-llama2-7b.txt").write_text("Traceback\nexit status 1\n")
    (out / "skipped.txt").write_text("calibrate-default.txt: skipped, 10 s left of 780 (needs about 600 s)\n")
    (out / "validation" / "results.json").write_text(json.dumps({"methods": [
        {"method": "chain", "median_step_error": 0.126, "regret": 0.0},
        {"method": "medusa", "median_step_error": 0.263, "regret": 0.131}]}))
    assert record_main([str(out), "--started", "2026-01-01T05:02:04+00:00"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["steps"] == [{"file": "bench-llama2-7b.txt", "exit_status": 1},
                                {"file": "cuda-tests.txt", "exit_status": 0}]
    record = results["record"]
    assert record["kind"] == "gpu-report"
    assert record["headline"] == {"steps run": 2, "steps skipped": 1, "steps failed": 1, "chain step err %": 12.6,
                                  "chain regret %": 0.0, "medusa step err %": 26.3, "medusa regret %": 13.1}
    assert record["verdict"] == "2 steps ran, 1 failed (bench-llama2-7b.txt); 1 skipped for time (skipped.txt)"
    machine = json.loads((out / "machine.json").read_text())
    assert machine["started"] == "2026-01-01T05:02:04+00:00"
    assert machine["machine"]["gpu"] == (None if not torch.cuda.is_available() else machine["machine"]["gpu"])
