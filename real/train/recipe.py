"""Recipes of the demo models: shapes, training budgets, and the fingerprint that names a cache.

A :class:`DemoRecipe` decides the trained weights completely (with the Python version, whose
stdlib is the corpus): :meth:`DemoRecipe.fingerprint` hashes it so a cache trained from another
recipe, other training code (:data:`RECIPE_REVISION`) or another Python is retrained. A recipe
whose target is a pretrained GGUF file (``target_gguf``) is not trained: its fingerprint also holds
the file's identity (:func:`real.train.pretrained.identity`). The presets themselves are the table
in :mod:`real.train.demo`.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from dataclasses import asdict, dataclass, replace

import torch

from hwmodels.errors import HetSpecError
from real.train.loops import TrainConfig
from real.train.pretrained import GGUFTarget, identity
from sim.model_spec import ModelSpec

#: Bump when the training code changes what a recipe produces: cached models are retrained.
RECIPE_REVISION = 1

#: Fields added after the first presets were cached, with their defaults: left out of the fingerprint
#: while at the default, so the caches of recipes that do not use them stay valid.
LATER_FIELDS = {"tie_embeddings": False, "target_gguf": None, "draft_embedding_from_target": False}


@dataclass(frozen=True)
class Shape:
    """A llama-architecture model shape (the vocabulary comes from the tokenizer)."""

    n_layers: int
    hidden: int
    intermediate: int
    n_heads: int
    n_kv_heads: int
    tie_embeddings: bool = False    # the LM head is the embedding (one vocab x hidden matrix, not two)

    def spec(self, name: str, vocab: int, max_position: int, eos_token_id: int | None = None) -> ModelSpec:
        return ModelSpec(name=name, n_layers=self.n_layers, hidden=self.hidden, intermediate=self.intermediate,
                         n_heads=self.n_heads, n_kv_heads=self.n_kv_heads, vocab=vocab, dtype="fp32",
                         arch="llama", max_position=max_position, eos_token_id=eos_token_id,
                         tie_embeddings=self.tie_embeddings,
                         source="trained by hetspec train-demo on the Python standard library")


@dataclass(frozen=True)
class DemoRecipe:
    name: str
    vocab: int                      # BPE vocabulary (tokenizer and models)
    tokenizer_chars: int            # train-split characters the BPE learns from (unused with target_gguf)
    corpus_chars: int               # train-split characters tokenized into the LM training stream
    max_position: int               # positions the models accept (prompt + generated + tree)
    target: Shape                   # with target_gguf: the file's shape (what the profilers price)
    draft: Shape
    target_train: TrainConfig | None   # None: a pretrained target (target_gguf), not trained
    draft_train: TrainConfig        # the draft's next-token training on the corpus (before distillation)
    draft_distill: TrainConfig | None  # sequence-level distillation on the target's continuations,
                                       # mixed with corpus windows of draft_distill.seq_len tokens
    medusa_heads: int
    heads_train: TrainConfig
    distill_prompts: int            # train-split prompts the target continues (heads + draft data)
    distill_prompt_tokens: int
    distill_new_tokens: int
    eval_prompts: int               # evaluation-split prompts for agreement and head accuracy
    eval_prompt_tokens: int
    eval_new_tokens: int
    eval_windows: int               # evaluation-split windows of eval_seq_len tokens for perplexity
    seed: int = 0
    target_gguf: GGUFTarget | None = None   # a pretrained target: its GGUF file (and its tokenizer)
    draft_embedding_from_target: bool = False   # draft embedding = the target's projected on its top
                                                # draft.hidden singular directions (same vocabulary)

    def __post_init__(self) -> None:
        if (self.target_train is None) != (self.target_gguf is not None):
            raise HetSpecError(f"demo recipe {self.name}: a target is either trained (target_train) or "
                             f"pretrained (target_gguf)")

    @property
    def pretrained(self) -> bool:
        """Whether the target is a pretrained file (``target_gguf``), not trained here."""
        return self.target_gguf is not None

    @property
    def eval_seq_len(self) -> int:
        """Tokens per perplexity window: the target's training windows, else the draft's."""
        return (self.target_train or self.draft_train).seq_len

    def fingerprint(self) -> str:
        """Hash of everything that decides the trained weights: the recipe, the training code's
        revision, the Python version (its stdlib is the corpus), torch's major.minor and, for a
        pretrained target, its file's identity (one line naming the install command when it is missing)."""
        payload = {
            "recipe": _without_later_defaults(asdict(self)),
            "revision": RECIPE_REVISION,
            "python": platform.python_version(),
            "implementation": sys.implementation.name,
            "torch": ".".join(torch.__version__.split(".")[:2]),
        }
        if self.target_gguf is not None:
            payload["target_file"] = identity(self.target_gguf)
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _without_later_defaults(value):
    """``value`` (a recipe as nested dicts) without the :data:`LATER_FIELDS` that hold their default."""
    if isinstance(value, dict):
        return {k: _without_later_defaults(v) for k, v in value.items()
                if not (k in LATER_FIELDS and v == LATER_FIELDS[k])}
    return value


def with_steps(recipe: DemoRecipe, scale: float, name: str | None = None) -> DemoRecipe:
    """``recipe`` with every step count scaled (at least one step): quick variants for tests."""
    def scaled(cfg: TrainConfig) -> TrainConfig:
        steps = max(1, int(cfg.steps * scale))
        return replace(cfg, steps=steps, warmup_steps=min(cfg.warmup_steps, steps))
    return replace(recipe, name=name or recipe.name,
                   target_train=scaled(recipe.target_train) if recipe.target_train else None,
                   draft_train=scaled(recipe.draft_train),
                   draft_distill=scaled(recipe.draft_distill) if recipe.draft_distill else None,
                   heads_train=scaled(recipe.heads_train))
