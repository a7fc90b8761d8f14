"""The demo corpus: the ``.py`` files of the running interpreter's standard library.

Every machine with Python has it, so the demo models train on real source code without any
download. Files are split *by file* into ``train`` / ``calibration`` / ``evaluation`` from a
hash of the path relative to the stdlib root, so the split is the same on any machine with the
same Python version and a file never contributes to two splits (a prompt cut from an evaluation
file was never trained on, nor used to calibrate acceptance).
"""

from __future__ import annotations

import hashlib
import random
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Protocol

from hwmodels.errors import HetSpecError, UnknownNameError

SPLITS = ("train", "calibration", "evaluation")

#: Share of files per split, in thousandths of the hash range: 90 % train, 5 % calibration,
#: 5 % evaluation (about 1,600 / 90 / 90 files of CPython 3.11's 1,790).
SPLIT_BOUNDS_PER_MILLE = (("train", 900), ("calibration", 950), ("evaluation", 1000))

#: Installed third-party packages live under the stdlib folder; they are not the stdlib.
EXCLUDED_DIRS = ("site-packages", "dist-packages")

#: A prompt is cut from a window of this many characters per requested token (Python source
#: averages 3–4 characters per token even with a byte-level vocabulary of 512), so one encode
#: of the window almost always yields enough tokens.
PROMPT_WINDOW_CHARS_PER_TOKEN = 12


class Encoder(Protocol):
    def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True)
class CorpusFile:
    relpath: str      # POSIX path relative to the stdlib root, e.g. "json/decoder.py"
    split: str        # one of SPLITS
    size_bytes: int


@dataclass(frozen=True)
class Prompt:
    relpath: str          # file the prompt was cut from
    offset_chars: int     # start of the prompt in that file's text (a line start)
    ids: tuple[int, ...]  # token ids, exactly the requested prompt length


def stdlib_root() -> Path:
    """The running interpreter's standard-library folder."""
    return Path(sysconfig.get_paths()["stdlib"])


def split_of(relpath: str) -> str:
    """The split of a file, from the SHA-256 of its POSIX path relative to the stdlib root."""
    bucket = int.from_bytes(hashlib.sha256(relpath.encode("utf-8")).digest()[:8], "big") % 1000
    for split, bound in SPLIT_BOUNDS_PER_MILLE:
        if bucket < bound:
            return split
    raise AssertionError("unreachable: the last bound is 1000")


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise UnknownNameError("corpus split", split, SPLITS)
    return split


@lru_cache(maxsize=4)
def list_files(root: str | None = None) -> tuple[CorpusFile, ...]:
    """Every stdlib ``.py`` file, sorted by relative path, with its split."""
    base = Path(root) if root is not None else stdlib_root()
    if not base.is_dir():
        raise HetSpecError(f"standard library folder {base} does not exist")
    out = []
    for path in base.rglob("*.py"):
        rel = path.relative_to(base)
        if any(part in EXCLUDED_DIRS for part in rel.parts) or not path.is_file():
            continue
        relpath = rel.as_posix()
        out.append(CorpusFile(relpath, split_of(relpath), path.stat().st_size))
    if not out:
        raise HetSpecError(f"no .py files under {base}")
    return tuple(sorted(out, key=lambda f: f.relpath))


def split_files(split: str, root: str | None = None) -> tuple[CorpusFile, ...]:
    check_split(split)
    return tuple(f for f in list_files(root) if f.split == split)


def read_file(relpath: str, root: str | None = None) -> str:
    """A file's text: UTF-8, or Latin-1 for the few test files in legacy encodings (lossless
    and deterministic, so every machine reads the same characters)."""
    return _read_text((Path(root) if root is not None else stdlib_root()) / relpath)


def shuffled_files(split: str, seed: int = 0, root: str | None = None) -> list[CorpusFile]:
    """The files of a split in a deterministic pseudo-random order."""
    files = list(split_files(split, root))
    random.Random(f"hetspec-corpus:{split}:{seed}").shuffle(files)
    return files


def iter_texts(split: str, seed: int = 0, max_chars: int | None = None,
               root: str | None = None) -> Iterator[str]:
    """File texts of a split in shuffled order, stopping once ``max_chars`` have been yielded
    (the file that crosses the limit is included whole)."""
    total = 0
    for f in shuffled_files(split, seed, root):
        if max_chars is not None and total >= max_chars:
            return
        text = read_file(f.relpath, root)
        if text:
            total += len(text)
            yield text


def _line_starts(text: str) -> list[int]:
    starts = [0]
    pos = text.find("\n")
    while pos != -1:
        if pos + 1 < len(text):
            starts.append(pos + 1)
        pos = text.find("\n", pos + 1)
    return starts


def cut_prompts(tokenizer: Encoder, split: str, n: int, prompt_tokens: int, seed: int = 0,
                root: str | None = None) -> list[Prompt]:
    """``n`` prompts of exactly ``prompt_tokens`` tokens, each starting at a line start of a file
    of ``split``. Files are visited in shuffled order, one prompt per file per round, so prompts
    spread over as many files as possible; the start line is drawn from a generator seeded by
    (seed, file, round), so the result is deterministic."""
    check_split(split)
    _check_prompt_counts(n, prompt_tokens)
    files = shuffled_files(split, seed, root)
    if n > len(files):        # more than one round: the split may not hold that many
        most = max_prompts(tokenizer, split, prompt_tokens, root)
        if n > most:
            raise HetSpecError(f"asked for {n:,} prompts of {prompt_tokens} tokens, but the {split} split holds at "
                               f"most {most:,} (non-overlapping {prompt_tokens}-token windows of its {len(files)} files)")
    texts = [(f.relpath, lambda f=f: read_file(f.relpath, root)) for f in files]
    return _cut(tokenizer, texts, n, prompt_tokens, f"{split}:{seed}", f"the {split} split")


def _check_prompt_counts(n: int, prompt_tokens: int) -> None:
    if n < 0 or prompt_tokens <= 0:
        raise HetSpecError(f"prompts: need n >= 0 and prompt_tokens > 0, got n={n}, prompt_tokens={prompt_tokens}")


def _cut(tokenizer: Encoder, texts, n: int, prompt_tokens: int, key: str, what: str) -> list[Prompt]:
    """The prompts of :func:`cut_prompts` from ``texts`` ((name, reader) pairs in visiting order); ``key``
    seeds the choice of start lines, ``what`` names the files in an error."""
    window = prompt_tokens * PROMPT_WINDOW_CHARS_PER_TOKEN
    out: list[Prompt] = []
    round_ = 0
    while len(out) < n:
        made_this_round = 0
        for relpath, read in texts:
            if len(out) == n:
                break
            text = read()
            starts = _line_starts(text)
            # Lines whose window reaches the end of the file may be too short; prefer earlier ones.
            usable = [s for s in starts if s + window <= len(text)] or starts[:1]
            rng = random.Random(f"hetspec-prompt:{key}:{relpath}:{round_}")
            offset = rng.choice(usable)
            ids = tokenizer.encode(text[offset:offset + window])
            if len(ids) < prompt_tokens and offset:
                offset = 0
                ids = tokenizer.encode(text[:window])
            if len(ids) < prompt_tokens:
                continue  # file too short for a prompt of this length
            out.append(Prompt(relpath, offset, tuple(ids[:prompt_tokens])))
            made_this_round += 1
        if made_this_round == 0:
            raise HetSpecError(f"no file of {what} holds a {prompt_tokens}-token prompt")
        round_ += 1
    return out


def text_files(path: str | Path) -> list[Path]:
    """The text files of ``--prompts-from``: the file itself, or every file under a folder (hidden ones
    and files holding NUL bytes, binary, left out), sorted."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise HetSpecError(f"--prompts-from {path}: no such file or folder")
    files = sorted(p for p in path.rglob("*") if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(path).parts))
    files = [p for p in files if b"\0" not in p.read_bytes()[:8192]]
    if not files:
        raise HetSpecError(f"--prompts-from {path}: the folder holds no text file")
    return files


def _read_text(path: Path) -> str:
    """A file's text: UTF-8, else Latin-1 (lossless for any bytes, the same on every machine)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def prompts_from_files(tokenizer: Encoder, path: str | Path, n: int, prompt_tokens: int,
                       seed: int = 0) -> list[list[int]]:
    """``n`` token-id prompts of ``prompt_tokens`` tokens cut from the text files of ``path`` (a file or a
    folder, :func:`text_files`) as :func:`cut_prompts` cuts them from the corpus."""
    _check_prompt_counts(n, prompt_tokens)
    files = text_files(path)
    random.Random(f"hetspec-corpus:files:{seed}").shuffle(files)
    if n > len(files):
        most = sum(len(tokenizer.encode(_read_text(f))) // prompt_tokens for f in files)
        if n > most:
            raise HetSpecError(f"asked for {n:,} prompts of {prompt_tokens} tokens, but --prompts-from {path} holds "
                               f"at most {most:,} (non-overlapping {prompt_tokens}-token windows of its "
                               f"{len(files)} file(s))")
    texts = [(str(f), lambda f=f: _read_text(f)) for f in files]
    return [list(p.ids) for p in _cut(tokenizer, texts, n, prompt_tokens, f"files:{seed}", f"--prompts-from {path}")]


def max_prompts(tokenizer: Encoder, split: str, prompt_tokens: int, root: str | None = None) -> int:
    """How many prompts of ``prompt_tokens`` tokens ``split`` holds at most: its files'
    non-overlapping windows of that length (a prompt never spans two files)."""
    return sum(len(tokenizer.encode(read_file(f.relpath, root))) // prompt_tokens for f in split_files(split, root))


def prompts(tokenizer: Encoder, split: str, n: int, prompt_tokens: int, seed: int = 0,
            root: str | None = None) -> list[list[int]]:
    """``n`` token-id prompts of ``prompt_tokens`` tokens from files of ``split`` (see
    :func:`cut_prompts`; calibration prompts never come from evaluation files)."""
    return [list(p.ids) for p in cut_prompts(tokenizer, split, n, prompt_tokens, seed, root)]
