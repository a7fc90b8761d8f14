"""The trace of the cores' speed over time: its samples, its summary and its bad input."""

from __future__ import annotations

import csv

import pytest

from real.validation.contention_trace import main, summary, trace


def test_a_short_trace_times_both_linears_and_the_probe():
    lines = []
    rows = trace(0.2, 1, pause_s=0.0, echo=lines.append)
    assert rows and len(lines) == len(rows)
    for r in rows:
        assert r["compute_us"] > r["bandwidth_us"] > 0 and r["probe_gflops"] > 0
    assert "64-token linear" in lines[0] and "guard probe" in lines[0]


def test_the_summary_gives_each_columns_quantiles():
    rows = [{"time": "t", "compute_us": float(c), "bandwidth_us": 100.0, "probe_gflops": 200.0 - c / 10}
            for c in range(280, 300)]
    out = summary(rows)
    assert len(out) == 3
    assert out[0].startswith("64-token linear, us: min 280.0,") and out[0].endswith("max 299.0 (20 samples)")
    assert "median 100.0" in out[1]


def test_the_samples_go_to_a_csv_when_asked(tmp_path, capsys):
    path = tmp_path / "trace.csv"
    assert main(["--seconds", "0.2", "--threads", "1", "--out", str(path)]) == 0
    with open(path) as f:
        rows = list(csv.DictReader(f))
    assert rows and set(rows[0]) == {"time", "compute_us", "bandwidth_us", "probe_gflops"}
    assert "guard probe, GFLOP/s: min" in capsys.readouterr().out


@pytest.mark.parametrize("args", [["--seconds", "0"], ["--threads", "0"]])
def test_bad_input_is_one_line_and_exit_2(args, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
