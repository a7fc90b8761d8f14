"""Demo models trained on the Python standard library, cached per user.

:data:`DEMO_PRESETS` is the one table of shapes and budgets. :func:`load_demo` returns the
target, the draft, the Medusa heads and the tokenizer of a preset, training them first when
the cache holds no models of the same recipe (fingerprint of the recipe, the training code's
revision and the Python version, whose stdlib is the corpus).

Cache folder: ``$HETSPEC_CACHE_DIR/demo/<preset>`` when the variable is set, else
``platformdirs.user_cache_dir("hetspec")/demo/<preset>`` (``~/.cache/hetspec/demo/<preset>``
on Linux). Layout: ``tokenizer.json``, ``target/`` and ``draft/`` (Hugging Face
``config.json`` + ``model.safetensors``), ``medusa/`` (``medusa_config.json`` +
``medusa_heads.safetensors``), ``summary.json`` and ``summary.md``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from platformdirs import user_cache_dir
from tqdm.auto import tqdm

from hwmodels.errors import HetSpecError, UnknownNameError
from real import corpus
from real.checkpoint import load_model, save_model
from real.medusa_heads import MedusaHeads
from real.model import Transformer
from real.tokenizer import BPETokenizer, train_tokenizer
from real.train_eval import greedy_agreement, head_topk_accuracy, perplexity, rank_accuracies
from real.train_generate import greedy_continuations
from real.train_timing import ForwardTime, forward_times, heads_time
from real.training import (
    TrainConfig,
    bf16_supported,
    distill_on_continuations,
    init_weights,
    token_stream,
    train_causal_lm,
    train_medusa_heads,
)
from sim.model_spec import ModelSpec

CACHE_ENV = "HETSPEC_CACHE_DIR"

#: Bump when the training code changes what a recipe produces: cached models are retrained.
RECIPE_REVISION = 1

SUMMARY_JSON, SUMMARY_MD, TOKENIZER_FILE = "summary.json", "summary.md", "tokenizer.json"
TARGET_DIR, DRAFT_DIR, MEDUSA_DIR = "target", "draft", "medusa"


@dataclass(frozen=True)
class Shape:
    """A llama-architecture model shape (the vocabulary comes from the tokenizer)."""

    n_layers: int
    hidden: int
    intermediate: int
    n_heads: int
    n_kv_heads: int

    def spec(self, name: str, vocab: int, max_position: int) -> ModelSpec:
        return ModelSpec(name=name, n_layers=self.n_layers, hidden=self.hidden, intermediate=self.intermediate,
                         n_heads=self.n_heads, n_kv_heads=self.n_kv_heads, vocab=vocab, dtype="fp32",
                         arch="llama", max_position=max_position,
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


# One table: shapes and budgets of both presets, sized on the 2-core AMD EPYC (Zen 5) this
# project is developed on (docs/demo-models.md has the measured times). ``small``: the target
# (8 x 384, ~15.7 M parameters = 63 MB fp32) is larger than the 32 MB L3, so a one-token decode
# step streams its weights and a 16-token verification costs only ~1.5x a one-token step; the
# draft (2 x 256) is ~13x cheaper per one-token step. A larger target (8 x 512) decodes equally
# well but trains ~1.5x slower per token, which this budget cannot afford.
DEMO_PRESETS: dict[str, DemoRecipe] = {
    "tiny": DemoRecipe(
        name="tiny", vocab=512, tokenizer_chars=1_000_000, corpus_chars=2_000_000, max_position=1024,
        target=Shape(n_layers=2, hidden=128, intermediate=352, n_heads=4, n_kv_heads=2),
        draft=Shape(n_layers=1, hidden=64, intermediate=176, n_heads=2, n_kv_heads=1),
        target_train=TrainConfig(steps=300, batch=8, seq_len=128, lr=3e-3, warmup_steps=30),
        draft_train=TrainConfig(steps=200, batch=8, seq_len=128, lr=3e-3, warmup_steps=20, seed=1),
        draft_distill=TrainConfig(steps=60, batch=8, seq_len=128, lr=1e-3, warmup_steps=6, seed=2),
        medusa_heads=3,
        heads_train=TrainConfig(steps=150, batch=256, seq_len=0, lr=3e-3, warmup_steps=15,
                                weight_decay=0.0, seed=3),
        distill_prompts=64, distill_prompt_tokens=32, distill_new_tokens=48,
        eval_prompts=16, eval_prompt_tokens=32, eval_new_tokens=32, eval_windows=32,
    ),
    "small": DemoRecipe(
        name="small", vocab=4096, tokenizer_chars=8_000_000, corpus_chars=16_000_000, max_position=2048,
        target=Shape(n_layers=8, hidden=384, intermediate=1024, n_heads=6, n_kv_heads=2),
        draft=Shape(n_layers=2, hidden=256, intermediate=704, n_heads=4, n_kv_heads=2),
        target_train=TrainConfig(steps=2400, batch=4, seq_len=256, lr=2e-3, warmup_steps=100),
        draft_train=TrainConfig(steps=2000, batch=4, seq_len=256, lr=3e-3, warmup_steps=100, seed=1),
        draft_distill=TrainConfig(steps=300, batch=8, seq_len=256, lr=1e-3, warmup_steps=30, seed=2),
        medusa_heads=4,
        heads_train=TrainConfig(steps=800, batch=512, seq_len=0, lr=2e-3, warmup_steps=40,
                                weight_decay=0.0, seed=3),
        distill_prompts=1024, distill_prompt_tokens=64, distill_new_tokens=96,
        eval_prompts=32, eval_prompt_tokens=64, eval_new_tokens=64, eval_windows=64,
    ),
}


def preset_names() -> tuple[str, ...]:
    return tuple(DEMO_PRESETS)


def get_recipe(preset: str | DemoRecipe) -> DemoRecipe:
    if isinstance(preset, DemoRecipe):
        return preset
    if preset not in DEMO_PRESETS:
        raise UnknownNameError("demo preset", preset, DEMO_PRESETS)
    return DEMO_PRESETS[preset]


def cache_root() -> Path:
    """``$HETSPEC_CACHE_DIR`` or the per-user cache folder of hetspec."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path(user_cache_dir("hetspec"))


def cache_folder(preset: str | DemoRecipe) -> Path:
    return cache_root() / "demo" / get_recipe(preset).name


@dataclass(frozen=True)
class DemoModels:
    target: Transformer
    draft: Transformer
    heads: MedusaHeads
    tokenizer: BPETokenizer
    folder: Path
    preset: str
    summary: dict = field(repr=False)


def load_demo(preset: str | DemoRecipe, force: bool = False, progress: bool = True) -> DemoModels:
    """The demo models of ``preset``: from the cache when it holds this recipe's fingerprint,
    otherwise (or with ``force``) trained first and cached."""
    recipe = get_recipe(preset)
    folder = cache_folder(recipe)
    if force or cached_fingerprint(folder) != recipe.fingerprint():
        train_demo(recipe, folder, progress=progress)
    return _load_folder(folder, recipe.name)


def cached_fingerprint(folder: Path) -> str | None:
    try:
        return json.loads((folder / SUMMARY_JSON).read_text()).get("fingerprint")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None


def _load_folder(folder: Path, preset: str) -> DemoModels:
    summary = json.loads((folder / SUMMARY_JSON).read_text())
    target = load_model(folder / TARGET_DIR).requires_grad_(False)
    draft = load_model(folder / DRAFT_DIR).requires_grad_(False)
    heads = MedusaHeads.load(folder / MEDUSA_DIR, target.spec).requires_grad_(False)
    tokenizer = BPETokenizer.load(folder / TOKENIZER_FILE)
    return DemoModels(target, draft, heads, tokenizer, folder, preset, summary)


def train_demo(recipe: DemoRecipe, folder: Path, progress: bool = True) -> dict:
    """Train every model of ``recipe`` into ``folder`` (replaced atomically) and return the summary.

    Files are written to a sibling temporary folder first and renamed at the end, so an
    interrupted run never leaves a half-written cache that would look valid.
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = folder.parent / f".{folder.name}.tmp-{os.getpid()}"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    try:
        summary = _train_into(recipe, work, progress)
        summary["folder"] = str(folder)
        (work / SUMMARY_JSON).write_text(json.dumps(summary, indent=2) + "\n")
        (work / SUMMARY_MD).write_text(summary_markdown(summary))
        old = folder.parent / f".{folder.name}.old-{os.getpid()}"
        if folder.exists():
            folder.rename(old)
        work.rename(folder)
        if old.exists():
            shutil.rmtree(old)
    finally:
        if work.exists():
            shutil.rmtree(work)
    return summary


def _train_into(recipe: DemoRecipe, work: Path, progress: bool) -> dict:
    t_start = time.perf_counter()
    load_start = os.getloadavg()[0]
    timings: dict[str, float] = {}
    torch.manual_seed(recipe.seed)

    def log(msg: str) -> None:
        if progress:
            tqdm.write(f"[train-demo {recipe.name}] {msg}", file=sys.stderr)

    cpu_times: dict[str, float] = {}
    cpu_start = cpu_mark = time.process_time()

    def mark(name: str, since: float) -> float:
        # wall time, and CPU time of all this process's threads (about 2x the wall time on an
        # idle 2-core machine; on a busy one the wall time grows while the CPU time does not)
        nonlocal cpu_mark
        now, cpu = time.perf_counter(), time.process_time()
        timings[name] = round(now - since, 2)
        cpu_times[name] = round(cpu - cpu_mark, 2)
        cpu_mark = cpu
        return now

    t = time.perf_counter()
    log(f"tokenizer: byte-level BPE, vocab {recipe.vocab}, on {recipe.tokenizer_chars / 1e6:.1f} M chars of the train split")
    tokenizer = train_tokenizer(corpus.iter_texts("train", recipe.seed, recipe.tokenizer_chars), recipe.vocab)
    tokenizer.save(work / TOKENIZER_FILE)
    vocab = tokenizer.vocab_size
    train_stream = token_stream(tokenizer, list(corpus.iter_texts("train", recipe.seed, recipe.corpus_chars)))
    eval_stream = token_stream(tokenizer, list(corpus.iter_texts("evaluation", recipe.seed)))
    t = mark("tokenizer_and_corpus_s", t)
    log(f"corpus: {train_stream.numel():,} train tokens, {eval_stream.numel():,} evaluation tokens")

    target = init_weights(Transformer(recipe.target.spec(f"demo-{recipe.name}-target", vocab, recipe.max_position)),
                          recipe.seed)
    draft = init_weights(Transformer(recipe.draft.spec(f"demo-{recipe.name}-draft", vocab, recipe.max_position)),
                         recipe.seed + 1)
    target_result = train_causal_lm(target, train_stream, recipe.target_train, "target", progress)
    t = mark("target_s", t)
    draft_result = train_causal_lm(draft, train_stream, recipe.draft_train, "draft", progress)
    t = mark("draft_s", t)
    target.requires_grad_(False)

    distill_prompts = corpus.prompts(tokenizer, "train", recipe.distill_prompts, recipe.distill_prompt_tokens,
                                     seed=recipe.seed)
    data = greedy_continuations(target, distill_prompts, recipe.distill_new_tokens, progress=progress,
                                desc="target continuations")
    t = mark("generate_s", t)
    eval_prompts = corpus.prompts(tokenizer, "evaluation", recipe.eval_prompts, recipe.eval_prompt_tokens,
                                  seed=recipe.seed)
    eval_data = greedy_continuations(target, eval_prompts, recipe.eval_new_tokens)
    agreement_before = greedy_agreement(draft, eval_data)
    distill_result = None
    if recipe.draft_distill is not None:
        distill_result = distill_on_continuations(draft, data, recipe.draft_distill, train_stream,
                                                  "draft distill", progress)
    t = mark("draft_distill_s", t)

    heads = MedusaHeads.from_target(target, recipe.medusa_heads)
    heads_result = train_medusa_heads(heads, data, recipe.heads_train, "medusa heads", progress)
    t = mark("heads_s", t)

    log("evaluating")
    topk = head_topk_accuracy(heads, eval_data)
    untrained_topk = head_topk_accuracy(MedusaHeads.from_target(target, recipe.medusa_heads), eval_data)
    summary = {
        "preset": recipe.name,
        "fingerprint": recipe.fingerprint(),
        "recipe_revision": RECIPE_REVISION,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "bf16_autocast": bf16_supported(),
        "trained_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "vocab": vocab,
        "params": {
            "target": sum(p.numel() for p in target.parameters()),
            "draft": sum(p.numel() for p in draft.parameters()),
            "medusa_heads": sum(p.numel() for p in heads.parameters()),
        },
        "train_tokens": {"corpus": int(train_stream.numel()), "target_seen": target_result.tokens,
                         "draft_seen": draft_result.tokens,
                         "distill_generated": int(data.tokens.shape[0] * data.new_tokens)},
        "final_train_loss": {"target": target_result.final_loss, "draft": draft_result.final_loss,
                             "draft_distill": distill_result.final_loss if distill_result else None,
                             "medusa_heads": heads_result.final_loss},
        "eval_tokens": int(eval_stream.numel()),
        "target_eval_perplexity": perplexity(target, eval_stream, recipe.target_train.seq_len, recipe.eval_windows),
        "draft_eval_perplexity": perplexity(draft, eval_stream, recipe.target_train.seq_len, recipe.eval_windows),
        "draft_greedy_agreement": greedy_agreement(draft, eval_data),
        "draft_greedy_agreement_before_distill": agreement_before,
        "medusa_topk_accuracy": topk,
        "medusa_rank_accuracy": rank_accuracies(topk),
        "medusa_untrained_top1": [row[0] for row in untrained_topk],
        "eval_continuations": {"prompts": recipe.eval_prompts, "prompt_tokens": recipe.eval_prompt_tokens,
                               "new_tokens": recipe.eval_new_tokens},
    }
    mark("evaluate_s", t)
    timings["total_s"] = round(time.perf_counter() - t_start, 2)
    cpu_times["total_s"] = round(time.process_time() - cpu_start, 2)
    summary["train_time_s"] = timings
    summary["train_cpu_time_s"] = cpu_times
    # Wall times depend on what else runs: record the machine and its load around the run.
    summary["host"] = {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                       "load_avg_1min_start": round(load_start, 2),
                       "load_avg_1min_end": round(os.getloadavg()[0], 2),
                       "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "")}

    save_model(target, work / TARGET_DIR)
    save_model(draft, work / DRAFT_DIR)
    heads.save(work / MEDUSA_DIR)
    return summary


def summary_markdown(s: dict) -> str:
    """The human-readable ``summary.md`` of a trained preset."""
    p, tt = s["params"], s["train_time_s"]
    lines = [
        f"# HetSpec demo models: preset `{s['preset']}`",
        "",
        f"Trained {s['trained_at']} on the Python {s['python']} standard library (torch {s['torch']}, "
        f"bf16 autocast: {s['bf16_autocast']}); fingerprint `{s['fingerprint']}`.",
        "",
        "| model | parameters | eval perplexity |",
        "|---|---:|---:|",
        f"| target | {p['target']:,} | {s['target_eval_perplexity']:.3f} |",
        f"| draft | {p['draft']:,} | {s['draft_eval_perplexity']:.3f} |",
        f"| Medusa heads ({len(s['medusa_topk_accuracy'])}) | {p['medusa_heads']:,} | |",
        "",
        f"Draft greedy agreement with the target (evaluation prompts, along the target's greedy "
        f"continuation): **{s['draft_greedy_agreement']:.3f}** "
        f"(before distillation on target outputs: {s['draft_greedy_agreement_before_distill']:.3f}).",
        "",
        "Medusa head top-i accuracy (head k at t vs the target's token at t+k+1):",
        "",
        "| head | " + " | ".join(f"top-{i + 1}" for i in range(len(s['medusa_topk_accuracy'][0]))) + " |",
        "|---|" + "---:|" * len(s["medusa_topk_accuracy"][0]),
    ]
    for k, row in enumerate(s["medusa_topk_accuracy"], start=1):
        lines.append(f"| {k} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    lines += ["", "Per-rank accuracy (top-i minus top-(i-1)):", "",
              "| head | " + " | ".join(f"rank {i + 1}" for i in range(len(s['medusa_rank_accuracy'][0]))) + " |",
              "|---|" + "---:|" * len(s["medusa_rank_accuracy"][0])]
    for k, row in enumerate(s["medusa_rank_accuracy"], start=1):
        lines.append(f"| {k} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    lines += ["", "Training wall time (s): " + ", ".join(f"{k.removesuffix('_s')} {v:.1f}" for k, v in tt.items())]
    if "train_cpu_time_s" in s:
        lines.append("Training CPU time, all threads (s): "
                     + ", ".join(f"{k.removesuffix('_s')} {v:.1f}" for k, v in s["train_cpu_time_s"].items()))
    if "host" in s:
        h = s["host"]
        lines.append(f"Host: {h['cpus']} CPUs, {h['torch_threads']} torch threads, 1-minute load average "
                     f"{h['load_avg_1min_start']} at the start and {h['load_avg_1min_end']} at the end.")
    lines.append("")
    return "\n".join(lines)


def demo_forward_times(demo: DemoModels, repeats: int = 200) -> list[ForwardTime]:
    """Forward times of the target and the draft at q = 1, 16, 64 over a 128-token cache, and of
    the Medusa heads on one hidden state (see :mod:`real.train_timing`)."""
    return (forward_times(demo.target, name="target", repeats=repeats)
            + forward_times(demo.draft, name="draft", repeats=repeats)
            + [heads_time(demo.heads, repeats=repeats)])


def with_steps(recipe: DemoRecipe, scale: float, name: str | None = None) -> DemoRecipe:
    """``recipe`` with every step count scaled (at least one step): quick variants for tests."""
    def scaled(cfg: TrainConfig) -> TrainConfig:
        steps = max(1, int(cfg.steps * scale))
        return replace(cfg, steps=steps, warmup_steps=min(cfg.warmup_steps, steps))
    return replace(recipe, name=name or recipe.name, target_train=scaled(recipe.target_train),
                   draft_train=scaled(recipe.draft_train),
                   draft_distill=scaled(recipe.draft_distill) if recipe.draft_distill else None,
                   heads_train=scaled(recipe.heads_train))
