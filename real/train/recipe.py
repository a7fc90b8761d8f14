"""Recipes of the demo models: shapes, training budgets, and the fingerprint that names a cache.

A :class:`DemoRecipe` decides the trained weights completely (with the Python version, whose
stdlib is the corpus): :meth:`DemoRecipe.fingerprint` hashes it so a cache trained from another
recipe, other training code (:data:`RECIPE_REVISION`) or another Python is retrained. The
presets themselves are the table in :mod:`real.train.demo`.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from dataclasses import asdict, dataclass, replace

import torch

from real.train.loops import TrainConfig
from sim.model_spec import ModelSpec

#: Bump when the training code changes what a recipe produces: cached models are retrained.
RECIPE_REVISION = 1


@dataclass(frozen=True)
class Shape:
    """A llama-architecture model shape (the vocabulary comes from the tokenizer)."""

    n_layers: int
    hidden: int
    intermediate: int
    n_heads: int
    n_kv_heads: int

    def spec(self, name: str, vocab: int, max_position: int, eos_token_id: int | None = None) -> ModelSpec:
        return ModelSpec(name=name, n_layers=self.n_layers, hidden=self.hidden, intermediate=self.intermediate,
                         n_heads=self.n_heads, n_kv_heads=self.n_kv_heads, vocab=vocab, dtype="fp32",
                         arch="llama", max_position=max_position, eos_token_id=eos_token_id,
                         source="trained by hetspec train-demo on the Python standard library")


@dataclass(frozen=True)
class DemoRecipe:
    name: str
    vocab: int                      # BPE vocabulary (tokenizer and models)
    tokenizer_chars: int            # train-split characters the BPE learns from
    corpus_chars: int               # train-split characters tokenized into the LM training stream
    max_position: int               # positions the models accept (prompt + generated + tree)
    target: Shape
    draft: Shape
    target_train: TrainConfig
    draft_train: TrainConfig
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
    eval_windows: int               # evaluation-split windows of target_train.seq_len for perplexity
    seed: int = 0

    def fingerprint(self) -> str:
        """Hash of everything that decides the trained weights: the recipe, the training code's
        revision, the Python version (its stdlib is the corpus) and torch's major.minor."""
        payload = {
            "recipe": asdict(self),
            "revision": RECIPE_REVISION,
            "python": platform.python_version(),
            "implementation": sys.implementation.name,
            "torch": ".".join(torch.__version__.split(".")[:2]),
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def with_steps(recipe: DemoRecipe, scale: float, name: str | None = None) -> DemoRecipe:
    """``recipe`` with every step count scaled (at least one step): quick variants for tests."""
    def scaled(cfg: TrainConfig) -> TrainConfig:
        steps = max(1, int(cfg.steps * scale))
        return replace(cfg, steps=steps, warmup_steps=min(cfg.warmup_steps, steps))
    return replace(recipe, name=name or recipe.name, target_train=scaled(recipe.target_train),
                   draft_train=scaled(recipe.draft_train),
                   draft_distill=scaled(recipe.draft_distill) if recipe.draft_distill else None,
                   heads_train=scaled(recipe.heads_train))
