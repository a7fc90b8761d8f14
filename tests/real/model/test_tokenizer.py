"""Byte-level BPE: round trips, size, save/load, clear errors."""

from __future__ import annotations

import pytest

from hwmodels.errors import HetSpecError
from real.model.tokenizer import EOS, BPETokenizer, train_tokenizer
from real.train import corpus


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(corpus.iter_texts("train", max_chars=300_000), vocab_size=400)


def test_vocab_size_and_eos(tok):
    assert tok.vocab_size == 400
    assert tok.decode([tok.eos_id]) == EOS


@pytest.mark.parametrize("text", [
    "def f(x):\n    return x + 1\n",
    "    \t\n\n  trailing spaces   \n",
    "unicode: café, 東京, emoji 🐍, \x00 control",
    "",
])
def test_round_trip(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_round_trip_of_an_evaluation_file(tok):
    text = corpus.read_file(corpus.split_files("evaluation")[0].relpath)
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert len(ids) < len(text.encode("utf-8"))     # merges compress source code


def test_save_load_gives_the_same_ids(tok, tmp_path):
    path = tok.save(tmp_path)
    assert path.name == "tokenizer.json"
    again = BPETokenizer.load(tmp_path)
    text = "import os\nfor name in os.listdir('.'):\n    print(name)\n"
    assert again.encode(text) == tok.encode(text)
    assert again.vocab_size == tok.vocab_size


def test_training_is_deterministic(tok):
    again = train_tokenizer(corpus.iter_texts("train", max_chars=300_000), vocab_size=400)
    text = corpus.read_file("json/decoder.py")
    assert again.encode(text) == tok.encode(text)


def test_errors(tmp_path):
    with pytest.raises(HetSpecError, match="vocab_size must be >= 257"):
        train_tokenizer(["x"], vocab_size=100)
    with pytest.raises(HetSpecError, match="does not exist"):
        BPETokenizer.load(tmp_path / "missing.json")
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    with pytest.raises(HetSpecError, match="not a tokenizer.json"):
        BPETokenizer.load(bad)
