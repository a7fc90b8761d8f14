"""Byte-level BPE tokenizer of the demo models, trained with Hugging Face ``tokenizers``.

Byte-level (GPT-2 style): every string encodes, nothing maps to "unknown", and decoding the
ids of a string gives the string back. One special token, ``<|endoftext|>``, separates files
in the training stream. Saved as a standard ``tokenizer.json``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from hwmodels.atomic_files import atomic_path
from hwmodels.errors import HetSpecError

EOS = "<|endoftext|>"

#: Merges seen fewer times than this are noise in a corpus of a few MB (and would make the
#: vocabulary depend on single files).
MIN_PAIR_FREQUENCY = 2

#: 256 byte symbols + the end-of-text token: the smallest vocabulary a byte-level BPE can have.
MIN_VOCAB = 257


class BPETokenizer:
    """Thin wrapper over a ``tokenizers.Tokenizer``: ``encode``, ``decode``, ``vocab_size``."""

    def __init__(self, tokenizer: Tokenizer, eos_id: int | None = None):
        """``eos_id``: the end-of-sequence token (a pretrained model's, e.g. from its GGUF metadata);
        None: the demo vocabulary's :data:`EOS`."""
        self._tok = tokenizer
        eos = tokenizer.token_to_id(EOS) if eos_id is None else eos_id
        if eos is None:
            raise HetSpecError(f"tokenizer has no {EOS} token")
        self.eos_id: int = eos

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def save(self, path: str | Path) -> Path:
        """Write ``tokenizer.json`` (``path`` may be the file or its folder)."""
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        with atomic_path(path) as temp:
            self._tok.save(str(temp))
        return path

    @classmethod
    def load(cls, path: str | Path, eos_id: int | None = None) -> "BPETokenizer":
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        if not path.exists():
            raise HetSpecError(f"tokenizer file {path} does not exist")
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception on malformed files
            raise HetSpecError(f"{path}: not a tokenizer.json ({str(exc).splitlines()[0]})") from None
        return cls(tok, eos_id)


def train_tokenizer(texts: Iterable[str], vocab_size: int, progress: bool = False) -> BPETokenizer:
    """Train a byte-level BPE of ``vocab_size`` tokens (fewer if the text has too few merges)."""
    if vocab_size < MIN_VOCAB:
        raise HetSpecError(f"tokenizer vocab_size must be >= {MIN_VOCAB} (bytes + end-of-text), got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=MIN_PAIR_FREQUENCY,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=progress,
    )
    tok.train_from_iterator(texts, trainer)
    return BPETokenizer(tok)
