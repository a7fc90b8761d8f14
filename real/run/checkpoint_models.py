"""The models of a real-path command given by path (``--target``, ``--draft``, ``--heads``), loaded into the
bundle the decoders take (``target``, ``draft``, ``heads``, ``tokenizer``), as the demo presets' are
(:class:`real.train.demo.DemoModels`). The draft and the heads must share the target's vocabulary."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from hwmodels.errors import HetSpecError
from real.model.medusa_heads import CONFIG_FILE as HEADS_CONFIG
from real.model.medusa_heads import MedusaHeads
from real.model.sources import load_any, load_tokenizer
from real.model.tokenizer import BPETokenizer
from real.model.transformer import Transformer
from real.run.request import ModelPaths


@dataclass(frozen=True)
class CheckpointModels:
    target: Transformer
    draft: Transformer | None
    heads: MedusaHeads | None
    tokenizer: BPETokenizer
    folder: Path                    # where measurements about these models are cached
    preset: str = "checkpoint"
    summary: dict = field(repr=False, default_factory=dict)

    def describe(self) -> str:
        return f"the target {self.summary['paths']['target']}"

    @property
    def stream_folder(self) -> Path:
        """The safetensors folder ``draft-tree --memory-budget`` streams the target's layers from (the request
        refuses a GGUF target there, real.run.request.check_model_paths)."""
        return Path(self.summary["paths"]["target"])


def paths_fingerprint(paths: ModelPaths) -> str:
    """Identity of the files named: their resolved paths, sizes and modification times."""
    digest = hashlib.sha256()
    for path in (paths.target, paths.draft, paths.heads):
        if path is None:
            digest.update(b"-;")
            continue
        root = Path(path).resolve()
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for f in files:
            stat = f.stat()
            digest.update(f"{f}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]


def check_vocabularies(paths: ModelPaths, target: Transformer, draft: Transformer | None) -> None:
    """A draft or heads of another vocabulary than the target's fail in one line."""
    vocab = target.spec.vocab
    if draft is not None and draft.spec.vocab != vocab:
        raise HetSpecError(f"--draft {paths.draft} has a vocabulary of {draft.spec.vocab:,} tokens, the target "
                           f"{paths.target} one of {vocab:,}: a draft must share the target's vocabulary")
    if paths.heads is not None:
        config = Path(paths.heads) / HEADS_CONFIG
        try:
            heads = json.loads(config.read_text())
        except (OSError, json.JSONDecodeError):
            raise HetSpecError(f"--heads {paths.heads}: {HEADS_CONFIG} is missing or not JSON") from None
        for key, want in (("vocab_size", vocab), ("hidden_size", target.spec.hidden)):
            if heads.get(key) != want:
                raise HetSpecError(f"--heads {paths.heads}: {key} {heads.get(key)!r} does not match the target "
                                   f"{paths.target} ({want:,})")


def load_checkpoint_models(paths: ModelPaths, dtype: str | torch.dtype = torch.float32) -> CheckpointModels:
    """The target, draft and heads of ``paths`` on the CPU at ``dtype``, the target's tokenizer, in eval mode."""
    from real.train.demo import cache_root

    target = load_any(paths.target, dtype)
    draft = load_any(paths.draft, dtype) if paths.draft is not None else None
    check_vocabularies(paths, target, draft)
    heads = MedusaHeads.load(paths.heads, target.spec, dtype=target.lm_head.weight.dtype).requires_grad_(False) \
        if paths.heads is not None else None
    eos = target.spec.eos_token_id
    tokenizer = load_tokenizer(paths.target, eos if isinstance(eos, int) else None)
    if tokenizer.vocab_size > target.spec.vocab:
        raise HetSpecError(f"--target {paths.target}: its tokenizer has {tokenizer.vocab_size:,} tokens, the model "
                           f"{target.spec.vocab:,}")
    fingerprint = paths_fingerprint(paths)
    summary = {"fingerprint": fingerprint, "trained_at": "checkpoint",
               "paths": {"target": paths.target, "draft": paths.draft, "heads": paths.heads}}
    return CheckpointModels(target, draft, heads, tokenizer, cache_root() / "checkpoints" / fingerprint,
                            summary=summary)


def load_run_models(preset: str, progress: bool = True, placement=None, target_tokens: int | None = None,
                    paths: ModelPaths | None = None):
    """The models of a real-path command: those of ``paths`` where given (:func:`load_checkpoint_models`), else
    the demo models of ``preset`` (:func:`real.run.session.load_models`); either made ready alike
    (:func:`real.run.session.ready_models`: eval mode, and placed where ``placement`` says)."""
    from real.run.session import load_models, ready_models

    if paths is None:
        return load_models(preset, progress, placement, target_tokens)
    models = load_checkpoint_models(paths, placement.torch_dtype() if placement is not None else torch.float32)
    return ready_models(models, placement, target_tokens)
