"""``hetspec predict``, ``simulate`` and ``sweep`` as a user runs them, and their one-line errors."""

from __future__ import annotations

import json

import pytest

from cli_runner import one_line_error, run_cli
from hwmodels.loader import platform_names

JETSON = "jetson-xavier-nx-204mhz"


def ok(*args: str):
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    return proc




@pytest.mark.skipif(JETSON not in platform_names(), reason="Jetson preset not in the tree yet")
def test_reference_example_predict_medusa_on_the_jetson():
    proc = ok("predict", "--model", "vicuna-7b", "--platform", JETSON, "--method", "medusa",
              "--acceptance", "ghidorah-mbpp", "--json")
    out = json.loads(proc.stdout)
    best = out["best"]
    for key in ("method", "tree_width", "draft_depth", "partition_ratio", "tokens_per_s", "step_s", "speedup_vs_ar"):
        assert key in best
    assert best["method"] == "medusa" and 1 <= best["tree_width"] <= 64
    assert best["tokens_per_s"] == max(row["tokens_per_s"] for row in out["table"])
    assert len(out["table"]) == out["evaluated"] > 1


def test_predict_text_and_json_on_the_a100():
    text = ok("predict", "--model", "vicuna-7b", "--platform", "a100-80gb-pcie", "--method", "chain",
              "--acceptance", "alpha:0.75", "--device", "gpu", "--top", "3").stdout
    assert "best: width" in text and "x vs ar" in text and "evaluated 16 configurations" in text
    out = json.loads(ok("predict", "--model", "vicuna-7b", "--platform", "a100-80gb-pcie", "--method", "medusa",
                        "--acceptance", "ghidorah-mtbench", "--tree-width", "1-8", "--json", "--no-table").stdout)
    assert "table" not in out and out["evaluated"] == 16
    assert out["best"]["tree_choices"] and out["acceptance"] == "ghidorah-mtbench"


def test_predict_with_a_choice_list_file(tmp_path):
    path = tmp_path / "tree.json"
    path.write_text("[[0], [1], [0, 0], [0, 0, 0]]")
    out = json.loads(ok("predict", "--model", "vicuna-7b", "--platform", "a100-80gb-pcie", "--method", "medusa",
                        "--acceptance", "medusa-log", "--tree-choices", str(path), "--device", "gpu",
                        "--json").stdout)
    assert out["best"]["tree_width"] == 5 and out["best"]["draft_depth"] == 3


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".json"])
def test_simulate_writes_the_trace_and_reports_the_difference(tmp_path, suffix):
    trace = tmp_path / f"trace{suffix}"
    proc = ok("simulate", "--model", "tinyllama-1.1b", "--platform", "a100-80gb-pcie", "--method", "medusa",
              "--acceptance", "ghidorah-mbpp", "--tree-width", "8", "--steps", "5", "--seed", "1",
              "--trace", str(trace))
    assert "engine" in proc.stdout and "closed form" in proc.stdout and "difference +0.000 %" in proc.stdout
    assert trace.exists() and trace.stat().st_size > 0
    if suffix == ".json":
        assert "traceEvents" in json.loads(trace.read_text())


def test_simulate_json_summary():
    out = json.loads(ok("simulate", "--model", "vicuna-7b", "--platform", "a100-80gb-pcie", "--method", "ar",
                        "--steps", "4", "--json").stdout)
    assert out["steps"] == 4 and out["tokens"] == 4
    assert abs(out["step_diff_pct"]) < 1.0 and out["config"]["device"] == "gpu"


def test_sweep_writes_a_table(tmp_path):
    out = tmp_path / "sweep.csv"
    proc = ok("sweep", "--models", "vicuna-7b,llama-68m", "--platforms", "a100-80gb-pcie", "--methods",
              "ar,medusa", "--acceptance", "ghidorah-mbpp", "--contexts", "128,1024", "--batches", "1",
              "--tree-width", "1-4", "--out", str(out), "--no-progress")
    lines = out.read_text().splitlines()
    # per problem: ar on 2 devices + medusa 4 widths on 2 devices
    assert len(lines) - 1 == 2 * 2 * (2 + 8)
    assert f"{len(lines) - 1} configurations" in proc.stdout


@pytest.mark.parametrize("args,match", [
    (("predict", "--model", "vicuna-7b", "--platform", "a100-80gb-pcie", "--method", "beam"), "unknown method 'beam'"),
    (("predict", "--model", "vicuna-99b", "--platform", "a100-80gb-pcie", "--method", "ar"), "unknown model 'vicuna-99b'"),
    (("predict", "--model", "vicuna-7b", "--platform", "mainframe", "--method", "ar"), "unknown platform 'mainframe'"),
    (("predict", "--model", "vicuna-7b", "--platform", "a100-80gb-pcie", "--method", "medusa", "--acceptance",
      "nope"), "unknown acceptance model 'nope'"),
    (("predict", "--model", "vicuna-7b", "--platform", "a100-80gb-pcie", "--method", "medusa", "--acceptance",
      "ghidorah-mbpp", "--tree-width", "100"), "width 100 is outside"),
    (("predict", "--model", "vicuna-7b", "--platform", "a100-80gb-pcie", "--method", "medusa", "--acceptance",
      "ghidorah-mbpp", "--tree-width", "0"), "--tree-width '0': integers must be >= 1 (got 0)"),
    (("predict", "--model", "vicuna-7b", "--platform", "a100-80gb-pcie", "--method", "medusa", "--acceptance",
      "ghidorah-mbpp", "--ratio", "1.5"), "partition ratio must be in [0, 1]"),
    (("predict", "--model", "vicuna-7b", "--platform", "a100-80gb-pcie", "--method", "ar", "--device", "tpu"),
     "unknown device on platform a100-80gb-pcie: 'tpu'"),
    (("predict", "--model", "vicuna-7b", "--platform", "a100-80gb-pcie", "--method", "chain", "--acceptance",
      "ghidorah-mbpp"), "has no draft_alpha"),
    (("simulate", "--model", "vicuna-7b", "--platform", "a100-80gb-pcie", "--method", "ar", "--trace", "x.txt"),
     "suffix must be .csv, .jsonl or .json"),
    (("sweep", "--models", "vicuna-7b", "--platforms", "a100-80gb-pcie", "--methods", "ar", "--out", "x.xlsx"),
     "suffix must be .csv or .parquet"),
])
def test_bad_input_is_one_line(capsys, args, match):
    one_line_error(capsys, *args, match=match)


def test_bad_input_is_one_line_in_a_real_process():
    proc = run_cli("predict", "--model", "vicuna-7b", "--platform", "a100-80gb-pcie", "--method", "medusa",
                   "--acceptance", "ghidorah-mbpp", "--ratio", "2")
    assert proc.returncode == 2 and proc.stderr.strip() == "hetspec: error: partition ratio must be in [0, 1] (got 2.0)"
