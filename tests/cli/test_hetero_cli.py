"""``hetspec run`` with the heterogeneous methods, end to end on the tiny demo models; one-line errors;
``train-demo --dgf``'s cache."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from cli_runner import run_cli

from real.run.worker import allowed_cores

CORES = allowed_cores()
WORKERS = f"cpu{CORES[0]},cpu{CORES[-1]}" if len(CORES) > 1 else f"cpu,cpu{CORES[0]}"
COMMON = ["--preset", "tiny", "--prompts", "2", "--prompt-tokens", "32", "--max-new-tokens", "16", "--threads", "1",
          "--json"]


def _run_json(cache_dir, *args):
    proc = run_cli("run", *args, *COMMON, env={"HETSPEC_CACHE_DIR": cache_dir})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def ar_tokens(tiny_demo, demo_cache_dir):
    return _run_json(demo_cache_dir, "--method", "ar")["tokens"]


@pytest.mark.parametrize("args", [
    ["--method", "hcmp", "--ratio", "0.3", "--tree", "TREE", "--workers", WORKERS],
    ["--method", "dovetail", "--width", "6", "--depth", "3", "--workers", WORKERS],
    ["--method", "alspec", "--lambda", "0", "--window", "4", "--workers", WORKERS],
    ["--method", "draft-tree", "--memory-budget", "1.9MB"],
])
def test_lossless_hetero_runs_match_ar(demo_cache_dir, ar_tokens, args, tmp_path):
    trace = tmp_path / "trace.csv"
    if "TREE" in args:   # a fixed tree: no acceptance profile to measure first
        (tmp_path / "tree.json").write_text("[[0], [1], [0, 0], [0, 1], [0, 0, 0]]")
        args = [str(tmp_path / "tree.json") if a == "TREE" else a for a in args]
    out = _run_json(demo_cache_dir, *args, "--trace", str(trace))
    assert out["tokens"] == ar_tokens
    assert out["tokens_per_s"] > 0 and out["steps"] > 0
    rows = trace.read_text().splitlines()
    assert rows[0].startswith("step,phase,device") and len(rows) > 2
    if args[1] != "draft-tree":
        devices = {r.split(",")[2] for r in rows[1:]}
        assert set(WORKERS.split(",")) <= devices                      # both workers appear in the trace
        assert out["hetero"]["workers"] == WORKERS.split(",")
    else:
        assert out["hetero"]["memory_plan"]["streamed_layers"] and out["hetero"]["streaming"]["layer_loads"] > 0


def test_alspec_reports_hits_and_agreement(demo_cache_dir):
    out = _run_json(demo_cache_dir, "--method", "alspec", "--lambda", "1e9", "--window", "4", "--workers", WORKERS)
    assert out["hetero"]["hit_rate"] == 1.0
    assert 0.0 <= out["hetero"]["agreement_with_exact"]["positionwise"] <= 1.0


@pytest.mark.parametrize("args,message", [
    (["--method", "ar", "--ratio", "0.5"], "--partition-ratio does not apply to method ar"),
    (["--method", "medusa", "--workers", "cpu0,cpu1"], "--workers does not apply to method medusa"),
    (["--method", "hcmp", "--ratio", "-0.1"], "--partition-ratio must be in [0, 1], got -0.1"),
    (["--method", "hcmp", "--workers", "cpu0,cpu0"], "--workers for hcmp needs two different workers"),
    (["--method", "dovetail", "--workers", "cpu0"], "--workers for dovetail takes 2 workers"),
    (["--method", "alspec", "--lambda", "-1"], "--lambda must be >= 0, got -1.0"),
    (["--method", "alspec", "--window", "0"], "--window must be >= 1, got 0"),
    (["--method", "alspec", "--temperature", "0.8"], "alspec decodes greedily on the real path"),
    (["--method", "dovetail", "--drafter", "eagle"], "--drafter must be one of draft, dgf"),
    (["--method", "draft-tree", "--memory-budget", "lots"], "memory budget 'lots': give a size like 60MB"),
    (["--method", "chain", "--memory-budget", "60MB"], "--memory-budget does not apply to method chain"),
    (["--method", "hcmp", "--workers", "npu0,cpu1"], "--workers: unknown worker 'npu0'"),
])
def test_bad_hetero_values_fail_with_one_clear_line(args, message):
    proc = run_cli("run", *args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("hetspec: error:")


def test_a_budget_too_small_is_one_line(demo_cache_dir):
    proc = run_cli("run", "--method", "draft-tree", "--memory-budget", "0.5MB", "--preset", "tiny", "--prompts", "1",
                   "--max-new-tokens", "4", env={"HETSPEC_CACHE_DIR": demo_cache_dir})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("hetspec: error: memory budget 0.50 MB is too small")


def test_ensure_dgf_trains_once_and_reuses_its_cache(tiny_demo, tmp_path, monkeypatch):
    from dataclasses import replace

    import real.hetero.dgf_drafter as dgf

    quick = replace(dgf.DGF_RECIPES["tiny"], prompts=4, new_tokens=8, eval_prompts=2,
                    train=replace(dgf.DGF_RECIPES["tiny"].train, steps=3, warmup_steps=1, batch=2))
    monkeypatch.setitem(dgf.DGF_RECIPES, "tiny", quick)
    demo = SimpleNamespace(preset="tiny", folder=tmp_path, target=tiny_demo.target, tokenizer=tiny_demo.tokenizer,
                           summary=tiny_demo.summary)
    drafter, summary = dgf.ensure_dgf(demo, progress=False)
    assert (tmp_path / "dgf" / "dgf.safetensors").exists() and summary["blocks"] == quick.blocks
    monkeypatch.setattr(dgf, "train_dgf", lambda *a, **k: pytest.fail("retrained a valid cache"))
    again, _ = dgf.ensure_dgf(demo, progress=False)
    assert again.w1.weight.equal(drafter.w1.weight)
    # another recipe (or other demo models) invalidates the cache
    monkeypatch.setitem(dgf.DGF_RECIPES, "tiny", replace(quick, blocks=2))
    with pytest.raises(BaseException):
        dgf.ensure_dgf(demo, progress=False)


@pytest.mark.parametrize("args,match", [
    (("--hetero-only", "--alspec-agreement", "1.5"), "--alspec-agreement must be in [0, 1]"),
    (("--hetero", "--alspec-agreement", "nan"), "--alspec-agreement must be a finite number"),
    (("--alspec-agreement", "0.9"), "--alspec-agreement goes with --hetero or --hetero-only"),
    (("--hetero-only", "--device", "cpu0"), "--device, --dtype and --graphs apply to the grid"),
])
def test_the_heterogeneous_flags_are_checked(capsys, monkeypatch, args, match):
    from cli_runner import one_line_error

    import real.train.demo

    # refused before the demo models are prepared: a bad flag trains nothing
    monkeypatch.setattr(real.train.demo, "prepare_demo", lambda *a, **k: pytest.fail("prepared the models first"))
    one_line_error(capsys, "validate", "--preset", "tiny", *args, match=match)


@pytest.mark.skipif(len(CORES) < 2 or not hasattr(__import__("os"), "sched_setaffinity"), reason="needs two cores to pin")
def test_dovetail_says_whose_team_is_bound(demo_cache_dir, ar_tokens):
    out = _run_json(demo_cache_dir, "--method", "dovetail", "--width", "6", "--depth", "3",
                    "--workers", f"cpu{CORES[0]},cpu")
    assert out["tokens"] == ar_tokens and out["hetero"]["team_bound"] == "cpu"
    pair = _run_json(demo_cache_dir, "--method", "dovetail", "--width", "6", "--depth", "3", "--workers", WORKERS)
    assert pair["hetero"]["team_bound"] is None             # single-thread workers: no team to bind
