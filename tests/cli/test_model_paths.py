"""The real path's commands on models given by path: ``hetspec run`` and ``hetspec profile-acceptance`` with
``--target`` (a Hugging Face folder or a GGUF file), ``--draft``, ``--heads`` and ``--prompts-from``; what a
method needs and was not given, and mismatched vocabularies, in one line."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import pytest

from gguf_files import write_tiny_llama

from hetspec.cli import main

from cli_runner import one_line_error

TEXTWRAP = Path(sysconfig.get_paths()["stdlib"]) / "textwrap.py"
SHORT = ("--prompts", "2", "--prompt-tokens", "16", "--max-new-tokens", "8", "--threads", "1")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A tiny GGUF target with a tokenizer in its metadata, a GGUF draft sharing it, one of another vocabulary,
    the target saved as a Hugging Face folder (with tokenizer.json) and untrained Medusa heads."""
    from real.model.checkpoint import save_model
    from real.model.gguf import load_gguf
    from real.model.medusa_heads import MedusaHeads
    from real.model.tokenizer import train_tokenizer

    folder = tmp_path_factory.mktemp("models")
    bpe = train_tokenizer([TEXTWRAP.read_text()], vocab_size=300)
    data = json.loads(bpe._tok.to_str())["model"]
    tokens = [t for t, _ in sorted(data["vocab"].items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["merges"]]
    shape = {"vocab": len(tokens)}
    write_tiny_llama(folder / "target.gguf", "Q8_0", shape=shape, tokens=tokens, merges=merges)
    write_tiny_llama(folder / "draft.gguf", "F16", shape={**shape, "n_layers": 1}, seed=1, tokens=tokens, merges=merges)
    write_tiny_llama(folder / "other.gguf", "F16", shape={"vocab": 256, "n_layers": 1}, seed=2)
    target = load_gguf(folder / "target.gguf")
    save_model(target, folder / "hf")
    bpe.save(folder / "hf")
    MedusaHeads.from_target(target, 2).save(folder / "heads")
    (folder / "tree.json").write_text("[[0], [1], [0, 0]]")
    return {Path(name).stem: str(folder / name)
            for name in ("target.gguf", "draft.gguf", "other.gguf", "hf", "heads", "tree.json")}


def _run_json(capsys, *args) -> dict:
    assert main(["run", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("method", ["ar", "chain", "draft-tree", "medusa", "hcmp", "dovetail", "alspec"])
def test_every_method_runs_on_a_gguf_target_and_equals_ar(models, capsys, demo_cache_dir, method):
    given = ("--target", models["target"], "--draft", models["draft"], "--heads", models["heads"],
             "--prompts-from", str(TEXTWRAP), *SHORT)
    ar = _run_json(capsys, "--method", "ar", *given)
    tree = ("--tree", models["tree"]) if method in ("medusa", "hcmp") else ()
    out = _run_json(capsys, "--method", method, *given, *tree)
    assert out["tokens"] == ar["tokens"] and len(out["tokens"]) == 2
    assert out["models"] == f"the target {models['target']}"
    assert out["texts"] and all(isinstance(t, str) for t in out["texts"])


def test_a_hugging_face_folder_target_runs_with_its_tokenizer(models, capsys):
    assert main(["run", "--method", "ar", "--target", models["hf"], *SHORT]) == 0
    out = capsys.readouterr().out
    assert f"the target {models['hf']}" in out and "first output" in out


def test_prompts_from_a_folder_are_cut_from_its_text_files(models, capsys, tmp_path):
    (tmp_path / "a.py").write_text(TEXTWRAP.read_text()[:3000])
    (tmp_path / "b.txt").write_text(TEXTWRAP.read_text()[3000:6000])
    (tmp_path / "blob.bin").write_bytes(b"\0\1\2" * 100)
    out = _run_json(capsys, "--method", "ar", "--target", models["target"], "--prompts-from", str(tmp_path),
                    *SHORT)
    assert len(out["tokens"]) == 2


def test_profile_acceptance_on_a_gguf_target(models, capsys, tmp_path):
    out = tmp_path / "profile.json"
    assert main(["profile-acceptance", "--target", models["target"], "--heads", models["heads"],
                 "--out", str(out), "--prompts", "2", "--prompt-tokens", "16", "--max-new-tokens", "8"]) == 0
    profile = json.loads(out.read_text())
    assert len(profile["medusa_accuracy"]) == 2
    assert models["target"] in profile["source"]


@pytest.mark.parametrize("args,match", [
    (("--method", "chain", "--target", "{target}"), "chain needs a draft model: give --draft PATH"),
    (("--method", "draft-tree", "--target", "{hf}"), "draft-tree needs a draft model"),
    (("--method", "medusa", "--target", "{target}"), "medusa needs Medusa heads: give --heads FOLDER"),
    (("--method", "ar", "--draft", "{draft}"), "--draft needs --target"),
    (("--method", "chain", "--target", "{target}", "--draft", "{other}"),
     "has a vocabulary of 256 tokens, the target {target} one of 300"),
    (("--method", "ar", "--target", "{heads}"), "expected a Hugging Face folder (config.json + safetensors) or a "
                                                ".gguf file"),
    (("--method", "ar", "--target", "{target}", "--preset", "tiny"), "does not combine with --preset"),
    (("--method", "ar", "--target", "{target}", "--prompts-from", "/no/such/prompts"),
     "--prompts-from /no/such/prompts: no such file or folder"),
    (("--method", "ar", "--target", "{other}"), "tokenizer.ggml.model: missing field"),
    (("--method", "draft-tree", "--target", "{target}", "--draft", "{draft}", "--memory-budget", "1MB"),
     "--target {target} is a GGUF file (save it as a Hugging Face folder first)"),
    (("--method", "dovetail", "--target", "{target}", "--drafter", "dgf"), "dovetail --drafter dgf is trained for"),
])
def test_what_a_method_lacks_is_one_line(models, capsys, args, match):
    one_line_error(capsys, "run", *(a.format(**models) for a in args), *SHORT, match=match.format(**models))


def test_smollm2_run_decodes_readable_text(smollm2_gguf, capsys):
    """``hetspec run --target <the wheel's GGUF> --method ar --prompts-from textwrap.py``: the generation
    continues Python source (words, spaces, line breaks), not byte soup."""
    out = _run_json(capsys, "--target", str(smollm2_gguf), "--method", "ar", "--prompts-from", str(TEXTWRAP),
                    "--prompts", "1", "--max-new-tokens", "32")
    text = out["texts"][0]
    words = [w for w in text.split() if w.isascii() and w.strip(".,:()'\"").isalpha()]
    assert len(out["tokens"][0]) == 32 and len(text) > 60
    assert all(c.isprintable() or c in "\n\t" for c in text), text
    assert len(words) >= 8, text
