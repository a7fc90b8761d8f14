"""A model named by path, whichever format it is in: a Hugging Face folder (``config.json`` + safetensors,
:mod:`real.model.checkpoint`) or a GGUF file (:mod:`real.model.gguf`), with its tokenizer."""

from __future__ import annotations

from pathlib import Path

import torch

from hwmodels.errors import HetSpecError
from real.model.tokenizer import BPETokenizer
from real.model.transformer import Transformer


def is_gguf(path: str | Path) -> bool:
    return Path(path).suffix.lower() == ".gguf"


def load_any(path: str | Path, dtype: str | torch.dtype = torch.float32,
             device: str | torch.device = "cpu") -> Transformer:
    """The model at ``path`` (a GGUF file, dequantized to ``dtype``, or a Hugging Face folder), in eval mode."""
    if is_gguf(path):
        from real.model.gguf import load_gguf

        return load_gguf(path, dtype, device)
    from real.model.checkpoint import load_model

    return load_model(path, dtype, device).requires_grad_(False)


def load_tokenizer(path: str | Path, eos_id: int | None = None) -> BPETokenizer:
    """The tokenizer of the model at ``path``: a GGUF file's metadata, or a folder's ``tokenizer.json``
    (``eos_id``: its end-of-sequence token, from the config)."""
    if is_gguf(path):
        from real.model.gguf import gguf_tokenizer

        return gguf_tokenizer(path)
    file = Path(path) / "tokenizer.json"
    if not file.is_file():
        raise HetSpecError(f"{path}: no tokenizer.json (the real path tokenizes with the target's own)")
    return BPETokenizer.load(file, eos_id)
