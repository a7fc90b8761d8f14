"""The demo cache as a user meets it: damaged files are retrained (saying which), two processes
train a preset once (a lock), a slow preset is trained only with consent, every demo command
picks its preset by one rule, and huge prompt counts are refused with the split's bound.

Training is stubbed by copying the session's trained ``tiny`` models (the ``tiny_demo`` fixture),
so nothing here trains; every run points ``HETSPEC_CACHE_DIR`` at a temporary folder.
"""

from __future__ import annotations

import inspect
import io
import json
import shutil
import subprocess
import sys
import threading
import time

import pytest
from cli_runner import run_cli

from hetspec.cli import main
from hwmodels.errors import HetSpecError
from real.train import demo
from real.train.demo import DEMO_PRESETS, cache_folder, check_training_consent, load_demo, lock_path


@pytest.fixture()
def cache(tiny_demo, tmp_path, monkeypatch):
    """An empty cache root, and ``train_demo`` stubbed: it copies the session's trained tiny models
    (slowly, when asked) and counts the calls."""
    root = tmp_path / "cache"
    monkeypatch.setenv("HETSPEC_CACHE_DIR", str(root))
    pristine = tiny_demo.folder
    calls = []

    def fake_train(recipe, folder, progress=True, device="cpu"):
        calls.append(recipe.name)
        time.sleep(fake_train.delay)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(pristine, folder)
        return json.loads((folder / "summary.json").read_text())

    fake_train.delay = 0.0
    monkeypatch.setattr(demo, "train_demo", fake_train)
    return {"root": root, "calls": calls, "pristine": pristine, "train": fake_train}


def _cached_tiny(cache) -> object:
    """A valid tiny cache in the temporary root (copied, not trained)."""
    folder = cache_folder("tiny")
    folder.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(cache["pristine"], folder)
    return folder


# ---------------------------------------------------------------------- a damaged cache
def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garble(path):
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not a json header" + b"\0" * 64)


def _empty(path):
    path.write_bytes(b"")


@pytest.mark.parametrize("damage", [_truncate, _garble, _empty], ids=["truncated", "garbage-header", "empty"])
@pytest.mark.parametrize("rel", ["target/model.safetensors", "medusa/medusa_heads.safetensors", "draft/config.json"])
def test_a_damaged_cache_is_retrained_naming_the_file(cache, capsys, damage, rel):
    folder = _cached_tiny(cache)
    damage(folder / rel)
    models = load_demo("tiny", progress=False)
    assert cache["calls"] == ["tiny"]                                   # retrained (no --force needed)
    err = capsys.readouterr().err
    assert "damaged" in err and str(folder / rel) in err
    assert models.target.spec.vocab == models.tokenizer.vocab_size
    load_demo("tiny", progress=False)
    assert cache["calls"] == ["tiny"]                                   # and reused afterwards


def test_train_demo_and_run_retrain_a_damaged_cache(cache, capsys):
    """The CLI, in process (training stubbed): no SafetensorError traceback, no refusal without --force."""
    folder = _cached_tiny(cache)
    _truncate(folder / "target" / "model.safetensors")
    assert main(["train-demo", "--preset", "tiny", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["preset"] == "tiny"
    assert "target/model.safetensors" in out.err and "damaged" in out.err
    _garble(folder / "draft" / "model.safetensors")
    assert main(["run", "--method", "ar", "--preset", "tiny", "--prompts", "1", "--prompt-tokens", "8",
                 "--max-new-tokens", "4", "--json"]) == 0
    assert cache["calls"] == ["tiny", "tiny"]
    assert "draft/model.safetensors" in capsys.readouterr().err


# ---------------------------------------------------------------------- one training at a time
def test_two_threads_train_once(cache, capsys):
    cache["train"].delay = 3.0                                          # the first "trains" for 3 s
    results = []
    threads = [threading.Thread(target=lambda: results.append(load_demo("tiny", progress=False))) for _ in range(2)]
    for t in threads:
        t.start()
        time.sleep(0.3)
    for t in threads:
        t.join()
    assert cache["calls"] == ["tiny"]                                   # the second used the first's models
    assert len(results) == 2
    assert "waiting for it to finish" in capsys.readouterr().err


def test_a_process_holding_the_lock_is_waited_for(cache, capsys):
    """Another process trains (holds the lock, then puts the models in place): this one waits, then loads them."""
    folder = cache_folder("tiny")
    lock = lock_path(folder)
    lock.parent.mkdir(parents=True, exist_ok=True)
    script = ("import fcntl, shutil, sys, time\n"
              "f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX); f.write('process 1 (test)'); f.flush()\n"
              "print('locked', flush=True); time.sleep(3); shutil.copytree(sys.argv[2], sys.argv[3])\n")
    other = subprocess.Popen([sys.executable, "-c", script, str(lock), str(cache["pristine"]), str(folder)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "locked"
        models = load_demo("tiny", progress=False)
    finally:
        other.wait(timeout=60)
    assert cache["calls"] == []                                         # nothing trained here
    assert models.folder == folder
    err = capsys.readouterr().err
    assert "is training the tiny demo models" in err and "waiting" in err


# ---------------------------------------------------------------------- consent for a slow preset
def test_a_slow_preset_trains_only_with_consent(monkeypatch):
    small = DEMO_PRESETS["small"]
    with pytest.raises(HetSpecError, match=r"run `hetspec train-demo --preset small` first, or pass --train"):
        check_training_consent(small, None, "not cached")               # no terminal: refused
    with pytest.raises(HetSpecError, match="hetspec train-demo --preset tiny"):
        check_training_consent(DEMO_PRESETS["tiny"], False, "not cached")
    check_training_consent(DEMO_PRESETS["tiny"], None, "not cached")   # a quick preset trains unasked
    check_training_consent(small, True, "not cached")                  # --train
    monkeypatch.setattr(sys, "stdin", type("Tty", (io.StringIO,), {"isatty": lambda self: True})())
    monkeypatch.setattr(sys, "stderr", type("Tty", (io.StringIO,), {"isatty": lambda self: True})())
    answers = iter(["y", "", "no"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    check_training_consent(small, None, "not cached")                  # asked: y
    for _ in range(2):                                                  # asked: enter / no
        with pytest.raises(HetSpecError, match="--train"):
            check_training_consent(small, None, "not cached")
    assert "15-30 minutes" in sys.stderr.getvalue()


def test_run_small_without_a_terminal_says_what_to_run(tmp_path):
    proc = run_cli("run", "--compare", "ar,medusa", "--preset", "small", "--prompts", "1",
                   env={"HETSPEC_CACHE_DIR": str(tmp_path)}, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "small demo models are not cached" in lines[0] and "hetspec train-demo --preset small" in lines[0]
    assert not (tmp_path / "demo" / "small").exists()


# ---------------------------------------------------------------------- one rule for the preset
@pytest.mark.parametrize("argv", [["run", "--method", "ar"], ["profile-acceptance", "--out", "p.json"],
                                  ["validate"], ["demo"]])
def test_every_demo_command_chooses_the_preset_by_one_rule(cache, monkeypatch, argv):
    from hetspec.cli import build_parser

    assert build_parser().parse_args(argv).preset is None             # no command hard-codes a default
    loaded = []
    monkeypatch.setattr(demo, "load_demo", lambda preset, **kw: loaded.append(preset))
    assert demo.prepare_demo(None) == "tiny"                            # small not cached
    small = cache_folder("small")
    small.mkdir(parents=True)
    (small / "summary.json").write_text(json.dumps({"fingerprint": DEMO_PRESETS["small"].fingerprint()}))
    assert demo.prepare_demo(None) == "small"                           # small cached: small, as demo/validate
    assert loaded == ["tiny", "small"]


# ---------------------------------------------------------------------- a huge prompt count
def test_more_prompts_than_the_split_holds_are_refused_with_the_bound(tiny_demo):
    from real.train import corpus

    most = corpus.max_prompts(tiny_demo.tokenizer, "evaluation", 64)
    assert 100 < most < 100_000
    start = time.perf_counter()
    with pytest.raises(HetSpecError, match=f"holds at most {most:,} ") as err:
        corpus.prompts(tiny_demo.tokenizer, "evaluation", 100_000, 64)
    assert time.perf_counter() - start < 30 and "\n" not in str(err.value)
    assert len(corpus.prompts(tiny_demo.tokenizer, "evaluation", 3, 64)) == 3


def test_run_refuses_a_huge_prompt_count_in_one_line(cache, capsys):
    _cached_tiny(cache)
    assert main(["run", "--method", "ar", "--preset", "tiny", "--prompts", "100000", "--json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hetspec: error: asked for 100,000 prompts") and "at most" in err[0]


def test_decoding_shows_progress_on_a_terminal_only(tiny_demo, monkeypatch):
    from real.decode.ar import ArConfig
    from real.run.session import run_prompts

    prompts = [[1, 2, 3, 4]] * 3
    tty = type("Tty", (io.StringIO,), {"isatty": lambda self: True})()
    monkeypatch.setattr(sys, "stderr", tty)
    run_prompts(tiny_demo, "ar", ArConfig(), prompts, 4, warmup=False, progress=True)
    assert "ar:" in tty.getvalue() and "/3" in tty.getvalue()
    pipe = io.StringIO()                                                # not a terminal: no bar
    monkeypatch.setattr(sys, "stderr", pipe)
    run_prompts(tiny_demo, "ar", ArConfig(), prompts, 4, warmup=False, progress=True)
    assert pipe.getvalue() == ""


# ---------------------------------------------------------------------- where user runs write
@pytest.mark.parametrize("command, kind", [("validate", "validation"), ("demo", "demo")])
def test_user_runs_write_to_the_user_report_folder(monkeypatch, tmp_path, command, kind):
    """validate / demo without --out write under $HETSPEC_REPORTS_DIR (default: the user data folder),
    never into the repository's committed reports/."""
    from real.validation import demo_job, validate
    from real.validation.validate import default_out

    monkeypatch.setenv("HETSPEC_REPORTS_DIR", str(tmp_path / "reports"))
    assert default_out(kind) == tmp_path / "reports" / kind
    monkeypatch.delenv("HETSPEC_REPORTS_DIR")
    assert default_out(kind).parts[-3:] == ("hetspec", "reports", kind)
    monkeypatch.setenv("HETSPEC_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setattr(demo, "prepare_demo", lambda preset, **kw: preset or "tiny")
    seen = {}

    def fake_validate(out=None, **kw):
        seen["out"] = out
        return {"preset": "tiny", "platform": {"device": "cpu"}, "command": kw.get("command"), "verdicts": [],
                "record": {"kind": "validate", "headline": {}, "verdict": ""}, "random_weight": []}

    def fake_run_demo(preset=None, recalibrate=False, out=None, device="cpu", **placement):
        seen["out"] = out
        return {"preset": preset, "predictions": [], "record": {}, "report": ""}

    real_default = inspect.signature(demo_job.run_demo).parameters["out"].default
    monkeypatch.setattr(validate, "validate", fake_validate)
    monkeypatch.setattr(demo_job, "run_demo", fake_run_demo)
    assert main([command] + (["--json"] if command == "validate" else [])) == 0
    if command == "validate":
        assert str(seen["out"]) == str(tmp_path / "reports" / kind)
    else:                          # run_demo resolves None to default_out("demo")
        assert seen["out"] is None and real_default is None


def test_stale_outputs_of_an_earlier_run_are_removed(tmp_path):
    from real.validation.commands import remove_stale_outputs

    names = ("hetero.md", "hetero.json", "hetero_ratio.png", "hetero_placement.png", "random_weight_timing.png",
             "report.md")
    for name in names:
        (tmp_path / name).write_text("x")
    assert remove_stale_outputs(tmp_path, []) == []
    assert sorted(remove_stale_outputs(tmp_path, names[:-1])) == sorted(names[:-1])
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]
