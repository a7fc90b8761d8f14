"""Caches are checked: the demo cache's files carry content hashes (written at training, checked at
load), so damage that keeps a file readable is found, named, and retrained or refused with the command
to run; a Medusa config that disagrees with its heads names the file."""

from __future__ import annotations

import json
import shutil

import pytest

from hwmodels.errors import HetSpecError

pytestmark = pytest.mark.slow


class Retrained(Exception):
    """Raised by the stand-in for training: the cache was found damaged and would be retrained."""


@pytest.fixture
def cache_copy(tiny_demo, tmp_path, monkeypatch):
    """A copy of the trained tiny cache, which ``HETSPEC_CACHE_DIR`` points at for the test."""
    from real.train.demo import CACHE_ENV

    folder = tmp_path / "cache" / "demo" / "tiny"
    shutil.copytree(tiny_demo.folder, folder)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return folder


def _flip_weight_bytes(path, count: int = 4096) -> None:
    """Overwrite ``count`` bytes of tensor data with 0xFF; the safetensors header stays intact."""
    data = bytearray(path.read_bytes())
    start = 8 + int.from_bytes(data[:8], "little") + 64          # past the 8-byte length and the JSON header
    assert start + count < len(data)
    data[start:start + count] = b"\xff" * count
    path.write_bytes(bytes(data))


def _swap_tokenizer_entries(path) -> None:
    doc = json.loads(path.read_text())
    vocab = doc["model"]["vocab"]
    a, b = list(vocab)[300:302]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    path.write_text(json.dumps(doc))


def _damage(folder, what):
    if what == "weights":
        path = folder / "target" / "model.safetensors"
        _flip_weight_bytes(path)
    else:
        path = folder / "tokenizer.json"
        _swap_tokenizer_entries(path)
    return path


@pytest.mark.parametrize("what", ["weights", "tokenizer"])
def test_damage_that_keeps_the_file_readable_is_refused_with_the_command(cache_copy, what):
    from real.train.demo import load_demo

    path = _damage(cache_copy, what)
    with pytest.raises(HetSpecError) as err:
        load_demo("tiny", progress=False, train=False)
    message = str(err.value)
    assert f"{path} does not match the content hash recorded when it was trained" in message
    assert "run `hetspec train-demo --preset tiny` first" in message


@pytest.mark.parametrize("what", ["weights", "tokenizer"])
def test_damage_that_keeps_the_file_readable_is_retrained(cache_copy, monkeypatch, capsys, what):
    import real.train.demo as demo

    def train(recipe, folder, **_kw):
        raise Retrained(folder)

    monkeypatch.setattr(demo, "train_demo", train)
    path = _damage(cache_copy, what)
    with pytest.raises(Retrained):
        demo.load_demo("tiny", progress=False, train=True)
    assert f"{path} does not match the content hash" in capsys.readouterr().err


def test_a_medusa_config_that_disagrees_with_its_heads_names_the_file(tiny_demo, tmp_path):
    from real.model.medusa_heads import CONFIG_FILE, MedusaHeads

    folder = tmp_path / "medusa"
    tiny_demo.heads.save(folder)
    config = json.loads((folder / CONFIG_FILE).read_text())
    config["medusa_num_heads"] = tiny_demo.heads.n_heads - 1
    (folder / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(HetSpecError, match=f"{folder / CONFIG_FILE}: medusa_num_heads {config['medusa_num_heads']} "
                                           f"disagrees with .*holds {tiny_demo.heads.n_heads} heads"):
        MedusaHeads.load(folder, tiny_demo.target.spec)
    config["medusa_num_heads"], config["hidden_size"] = tiny_demo.heads.n_heads, 999
    (folder / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(HetSpecError, match=f"{folder / CONFIG_FILE}: hidden_size 999 disagrees with the target"):
        MedusaHeads.load(folder, tiny_demo.target.spec)


# ---------------------------------------------------------------------- Dovetail's DGF drafter
@pytest.fixture
def dgf_cache(tiny_demo, tmp_path):
    """An untrained DGF drafter of the tiny target saved as ensure_dgf caches one, in a demo folder of its own."""
    from types import SimpleNamespace

    import real.hetero.dgf_drafter as dgf

    demo = SimpleNamespace(preset="tiny", folder=tmp_path, target=tiny_demo.target, tokenizer=tiny_demo.tokenizer,
                           summary=tiny_demo.summary)
    recipe = dgf.get_dgf_recipe("tiny")
    key = {"demo_fingerprint": demo.summary.get("fingerprint"), "recipe": recipe.key()}
    drafter = dgf.DgfDrafter.for_target(tiny_demo.target, recipe.blocks, seed=0)
    summary = dgf.save_dgf(drafter, dgf.dgf_folder(demo), key, {"blocks": recipe.blocks})
    assert set(summary["files"]) == {dgf.CONFIG_FILE, dgf.WEIGHTS_FILE}
    return demo


def _damage_dgf(folder, what):
    from real.hetero.dgf_drafter import CONFIG_FILE, WEIGHTS_FILE

    if what == "weights":
        path = folder / WEIGHTS_FILE
        _flip_weight_bytes(path, count=256)
    else:                               # an edit that keeps the file valid JSON and the cache key intact
        path = folder / CONFIG_FILE
        config = json.loads(path.read_text())
        config["hidden_size"] += 1
        path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("what", ["weights", "config"])
def test_a_damaged_dgf_file_is_named(dgf_cache, what):
    from real.hetero.dgf_drafter import dgf_folder, load_cached_dgf

    folder = dgf_folder(dgf_cache)
    load_cached_dgf(folder, dgf_cache.target)                 # intact: loads
    path = _damage_dgf(folder, what)
    with pytest.raises(HetSpecError, match=f"{path} does not match the content hash recorded when it was trained"):
        load_cached_dgf(folder, dgf_cache.target)


@pytest.mark.parametrize("what", ["weights", "config"])
def test_a_damaged_dgf_cache_is_retrained_saying_which_file(dgf_cache, monkeypatch, capsys, what):
    import real.hetero.dgf_drafter as dgf
    import real.train.generate as generate

    monkeypatch.setattr(dgf, "train_dgf", lambda *a, **k: pytest.fail("trained before the damage was found"))
    dgf.ensure_dgf(dgf_cache, progress=False)                 # intact: reused, not retrained
    path = _damage_dgf(dgf.dgf_folder(dgf_cache), what)

    def continuations(*_a, **_kw):
        raise Retrained()

    monkeypatch.setattr(generate, "greedy_continuations", continuations)
    with pytest.raises(Retrained):
        dgf.ensure_dgf(dgf_cache, progress=False)
    assert f"{path} does not match the content hash" in capsys.readouterr().err


def test_a_dgf_cache_without_hashes_is_retrained(dgf_cache, monkeypatch, capsys):
    import real.hetero.dgf_drafter as dgf
    import real.train.generate as generate

    summary = dgf.dgf_folder(dgf_cache) / dgf.SUMMARY_FILE
    summary.write_text(json.dumps({"blocks": 1}))            # written before the files were hashed
    monkeypatch.setattr(generate, "greedy_continuations", lambda *a, **k: (_ for _ in ()).throw(Retrained()))
    with pytest.raises(Retrained):
        dgf.ensure_dgf(dgf_cache, progress=False)
    assert "records no content hashes" in capsys.readouterr().err
