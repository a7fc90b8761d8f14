"""The stdlib corpus: deterministic, disjoint split by file; deterministic prompts."""

from __future__ import annotations

import pytest

from hwmodels.errors import HetSpecError, UnknownNameError
from real.train import corpus


class CharTokenizer:
    """One id per character: enough to cut prompts without training a BPE."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]


def test_every_file_has_exactly_one_split_and_splits_are_disjoint():
    files = corpus.list_files()
    assert len(files) > 100                                    # the stdlib, not a stub
    assert all(not f.relpath.startswith(("site-packages", "dist-packages")) for f in files)
    by_split = {s: {f.relpath for f in corpus.split_files(s)} for s in corpus.SPLITS}
    assert set().union(*by_split.values()) == {f.relpath for f in files}
    assert sum(len(v) for v in by_split.values()) == len(files)
    for a in corpus.SPLITS:
        for b in corpus.SPLITS:
            if a != b:
                assert not by_split[a] & by_split[b]


def test_split_fractions_are_about_90_5_5():
    files = corpus.list_files()
    share = {s: len(corpus.split_files(s)) / len(files) for s in corpus.SPLITS}
    assert 0.85 < share["train"] < 0.95
    assert 0.02 < share["calibration"] < 0.09
    assert 0.02 < share["evaluation"] < 0.09


def test_split_is_a_pure_function_of_the_relative_path():
    # Fixed expectations: a change of the hashing would silently move files between splits.
    assert corpus.split_of("json/decoder.py") == corpus.split_of("json/decoder.py")
    assert [corpus.split_of(p) for p in ("a.py", "b.py", "c.py", "os.py", "json/__init__.py")] == \
        [corpus.split_of(p) for p in ("a.py", "b.py", "c.py", "os.py", "json/__init__.py")]
    assert {corpus.split_of(f"pkg/m{i}.py") for i in range(200)} == set(corpus.SPLITS)


def test_listing_a_folder_tree(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("x = 1\n")
    (tmp_path / "top.py").write_text("y = 2\n")
    (tmp_path / "site-packages").mkdir()
    (tmp_path / "site-packages" / "thirdparty.py").write_text("z = 3\n")
    (tmp_path / "notes.txt").write_text("not python")
    files = corpus.list_files(str(tmp_path))
    assert [f.relpath for f in files] == ["pkg/mod.py", "top.py"]
    assert all(f.split == corpus.split_of(f.relpath) for f in files)


def test_legacy_encoded_file_is_read_deterministically(tmp_path):
    (tmp_path / "latin.py").write_bytes("s = 'caf\xe9'\n".encode("latin-1"))
    assert corpus.read_file("latin.py", str(tmp_path)) == "s = 'caf\xe9'\n"


def test_prompts_are_deterministic_and_exact_length():
    tok = CharTokenizer()
    a = corpus.prompts(tok, "evaluation", 12, 40, seed=3)
    b = corpus.prompts(tok, "evaluation", 12, 40, seed=3)
    c = corpus.prompts(tok, "evaluation", 12, 40, seed=4)
    assert a == b
    assert a != c
    assert len(a) == 12 and all(len(p) == 40 for p in a)


def test_prompts_come_from_their_split_only_and_calibration_never_touches_evaluation():
    tok = CharTokenizer()
    evaluation = {f.relpath for f in corpus.split_files("evaluation")}
    calibration = {f.relpath for f in corpus.split_files("calibration")}
    cal = corpus.cut_prompts(tok, "calibration", 150, 32)     # more prompts than files: several rounds
    ev = corpus.cut_prompts(tok, "evaluation", 150, 32)
    assert {p.relpath for p in cal} <= calibration
    assert {p.relpath for p in ev} <= evaluation
    assert not {p.relpath for p in cal} & {p.relpath for p in ev}
    # each prompt is the text of its file at its offset
    for p in cal[:20]:
        text = corpus.read_file(p.relpath)
        assert "".join(map(chr, p.ids)) == text[p.offset_chars:p.offset_chars + 32]
        assert p.offset_chars == 0 or text[p.offset_chars - 1] == "\n"


def test_prompts_spread_over_files_before_repeating_one():
    tok = CharTokenizer()
    n_files = len(corpus.split_files("evaluation"))
    ps = corpus.cut_prompts(tok, "evaluation", n_files // 2, 16)
    assert len({p.relpath for p in ps}) == len(ps)


def test_bad_split_and_bad_sizes_fail_with_one_line():
    tok = CharTokenizer()
    with pytest.raises(UnknownNameError, match="unknown corpus split 'test'; valid: calibration, evaluation, train"):
        corpus.prompts(tok, "test", 1, 8)
    with pytest.raises(HetSpecError, match="prompt_tokens"):
        corpus.prompts(tok, "train", 1, 0)
    with pytest.raises(HetSpecError, match="holds a 100000000-token prompt"):
        corpus.prompts(tok, "calibration", 1, 100_000_000)


def test_iter_texts_respects_the_character_budget():
    texts = list(corpus.iter_texts("train", max_chars=50_000))
    total = sum(map(len, texts))
    assert total >= 50_000
    assert total - len(texts[-1]) < 50_000
