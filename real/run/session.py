"""Run one decode method over prompts and aggregate: what ``hetspec run`` does.

:class:`RunRequest` holds the command-line knobs and validates them before anything is loaded;
:func:`build_config` turns them into a method's config; :func:`run_prompts` decodes every prompt
(after an untimed warm-up) and returns a :class:`RunResult`, whose :meth:`RunResult.to_json` is
the ``--json`` output; :func:`phase_breakdown` splits its steps by traced phase. :func:`load_models` loads
the demo models of a preset (models given by path: :mod:`real.run.checkpoint_models`); the ``run`` command
is :mod:`real.run.demo_run`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path

import torch

from hwmodels.errors import HetSpecError
from real.decode import decoder
from real.decode.common import Clock, DecodeResult, Sampling, traced_phase_seconds
from real.run.request import RunRequest, load_tree_file
from sim.acceptance_profile import AcceptanceProfile
from sim.trace import TraceRecord
from sim.tree import TokenTree

#: Tokens decoded by the untimed warm-up run (first calls of torch kernels allocate and dispatch
#: slowly; 8 tokens exercise every code path of every method once).
WARMUP_TOKENS = 8
#: Medusa's tree when ``--width`` and ``--tree`` are not given: the greedy tree of this many tokens
#: from the measured head accuracies. Measured on the small demo models, one thread: widths
#: 6/8/12 gave 1.80/1.75/1.61x over ar (docs/decode-methods.md). The paper's 64-token tree suits a
#: GPU, where 64 tokens cost about one token's pass; on this CPU the verify pass grows with the width.
DEFAULT_MEDUSA_WIDTH = 8
#: Calibration run used when ``medusa --width`` needs head accuracies and none are cached.
PROFILE_PROMPTS = 8
PROFILE_PROMPT_TOKENS = 64
PROFILE_NEW_TOKENS = 64
PROFILE_FILE = "acceptance-profile.json"

def build_config(request: RunRequest, head_accuracy=None, trace_ops: bool = False):
    """The decoder config of ``request``: its knobs, by their one name (:mod:`sim.knobs`), are the
    fields of the method's config class (defaults where not given); medusa and hcmp verify the tree
    of :func:`verification_tree` (``head_accuracy``: depth x rank, for the greedy tree); sampling and
    per-operation tracing where the config takes them."""
    config_type = decoder(request.method).config_type
    knobs = {k: v for k, v in request.knobs().items() if k != "memory_budget"}   # the runner streams, not the config
    if request.method in ("medusa", "hcmp"):
        knobs = {k: v for k, v in knobs.items() if k not in ("tree_width", "draft_depth", "tree_file")}
        knobs["tree"] = verification_tree(request, head_accuracy)
    if "workers" in knobs:
        knobs["workers"] = tuple(knobs["workers"].split(","))
    takes = {f.name for f in fields(config_type)}
    extras = {"sampling": Sampling(request.temperature, request.top_p), "temperature": request.temperature,
              "trace_ops": trace_ops}
    return config_type(**knobs, **{k: v for k, v in extras.items() if k in takes})


def verification_tree(request: RunRequest, head_accuracy=None) -> TokenTree:
    """The Medusa-head tree of a medusa or hcmp request: ``--tree``'s file, else the greedy tree of
    ``--width`` tokens (default :data:`DEFAULT_MEDUSA_WIDTH`) from the measured head accuracies."""
    if request.tree_file is not None:
        return load_tree_file(request.tree_file)
    if head_accuracy is None:
        raise HetSpecError(f"{request.method} needs measured head accuracies to build its greedy tree")
    return TokenTree.greedy(head_accuracy, request.tree_width or DEFAULT_MEDUSA_WIDTH, max_depth=request.draft_depth)


def config_summary(config) -> dict:
    """A JSON-able view of a decoder config (a tree as its size, depth and choice paths)."""
    out = {}
    for f in fields(config):
        value = getattr(config, f.name)
        if isinstance(value, TokenTree):
            out[f.name] = {"width": value.size, "depth": value.depth, "choices": [list(c) for c in value.choices]}
        elif is_dataclass(value):
            out.update(asdict(value))
        else:
            out[f.name] = value
    return out


@dataclass(frozen=True)
class RunResult:
    method: str
    config: dict
    results: tuple[DecodeResult, ...]
    records: tuple[TraceRecord, ...] = field(repr=False, default=())

    @property
    def steps(self) -> int:
        return sum(r.steps for r in self.results)

    @property
    def decode_tokens(self) -> int:
        return sum(r.decode_tokens for r in self.results)

    @property
    def decode_s(self) -> float:
        return sum(r.decode_s for r in self.results)

    @property
    def prefill_s(self) -> float:
        return sum(r.prefill_s for r in self.results)

    @property
    def tokens_per_s(self) -> float:
        """Decode throughput: tokens after each prompt's first, over the decode seconds."""
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def mean_accepted_per_step(self) -> float:
        return self.decode_tokens / self.steps if self.steps else 0.0

    def to_json(self) -> dict:
        return {
            "method": self.method, "config": self.config,
            "tokens_per_s": self.tokens_per_s, "mean_accepted_per_step": self.mean_accepted_per_step,
            "steps": self.steps, "decode_tokens": self.decode_tokens,
            "decode_s": self.decode_s, "prefill_s": self.prefill_s,
            "draft_passes": sum(r.draft_passes for r in self.results),
            "tokens": [list(r.ids) for r in self.results],
            "accepted_per_step": [list(r.accepted_per_step) for r in self.results],
        }


def phase_breakdown(run: RunResult) -> dict[str, float]:
    """Milliseconds per decode step spent in each traced phase; ``other`` is the rest of the step
    (Python bookkeeping between the traced intervals). ``ar``'s whole step is its ``decode`` record,
    reported under ``verify`` (the target pass)."""
    per = traced_phase_seconds(run.records)
    steps = max(run.steps, 1)
    out = {k: v * 1e3 / steps for k, v in per.items()}
    out["other"] = run.decode_s * 1e3 / steps - sum(out.values())
    return out


def run_prompts(models, method: str, config, prompts, max_new_tokens: int, seed: int = 0,
                warmup: bool = True, worker: str = "cpu", progress: bool = False) -> RunResult:
    """Decode every prompt with ``method``; prompt i samples with seed ``seed + i``. ``progress``:
    a bar of prompts on stderr (only where stderr is a terminal)."""
    from tqdm.auto import tqdm

    dec = decoder(method)
    prompts = [list(p) for p in prompts]
    if not prompts:
        raise HetSpecError("no prompts to decode")
    if warmup:
        dec.generate(models, prompts[0], min(WARMUP_TOKENS, max_new_tokens), config, Clock(worker),
                     generator(models, seed))
        from real.model.executor import prepare_buckets

        prepare_buckets(models.target, getattr(models, "draft", None))   # no CUDA-graph capture while timed
    clock = Clock(worker)
    bar = tqdm(prompts, desc=method, unit="prompt", disable=None if progress else True, leave=False)
    results = tuple(dec.generate(models, p, max_new_tokens, config, clock, generator(models, seed + i))
                    for i, p in enumerate(bar))
    return RunResult(method=method, config=config_summary(config), results=results, records=tuple(clock.records))


# ---------------------------------------------------------------------------- demo presets
def models_fingerprint(models) -> str:
    """Identity of a set of demo models: the recipe fingerprint and training time from their
    summary (a retrained cache gets a new one), else the names, sizes and mtimes of the folder's files."""
    summary = getattr(models, "summary", None) or {}
    if summary.get("fingerprint") and summary.get("trained_at"):
        return f"{summary['fingerprint']}@{summary['trained_at']}"
    digest = hashlib.sha256()
    for path in sorted(Path(models.folder).rglob("*")):
        if path.is_file() and path.name != PROFILE_FILE:
            stat = path.stat()
            digest.update(f"{path.relative_to(models.folder)}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]


def models_label(models) -> str:
    """The models in words: ``the demo small models``, or the target's path."""
    describe = getattr(models, "describe", None)
    return describe() if describe is not None else f"the demo {models.preset} models"


def demo_profile(models, preset: str) -> AcceptanceProfile:
    """The acceptance profile cached next to the demo models (or in the cache folder of models given by
    path), measured on calibration prompts of the corpus if absent/stale."""
    from real.run.acceptance import measure_profile
    from real.train.corpus import prompts as corpus_prompts

    path = Path(models.folder) / PROFILE_FILE
    fingerprint = models_fingerprint(models)
    if path.exists():
        profile = AcceptanceProfile.load(path)
        if profile.meta.get("models_fingerprint") == fingerprint and profile.medusa_accuracy is not None:
            return profile
    prompts = corpus_prompts(models.tokenizer, "calibration", PROFILE_PROMPTS, PROFILE_PROMPT_TOKENS, seed=0)
    profile = measure_profile(models, prompts, PROFILE_NEW_TOKENS, name=f"demo-{preset}",
                              source=f"measured by hetspec on {PROFILE_PROMPTS} calibration prompts of "
                                     f"{models_label(models)}",
                              meta={"preset": preset, "prompt_tokens": PROFILE_PROMPT_TOKENS,
                                    "models_fingerprint": fingerprint})
    profile.save(path)
    return profile


def load_models(preset: str, progress: bool = True, placement=None, target_tokens: int | None = None):
    """The demo models of ``preset``, trained first where not cached, made ready as :func:`ready_models` says
    (models given by path: :func:`real.run.checkpoint_models.load_run_models`)."""
    from real.train.demo import load_demo

    return ready_models(load_demo(preset, progress=progress), placement, target_tokens)


def ready_models(models, placement=None, target_tokens: int | None = None):
    """``models`` in eval mode; with a :class:`real.model.placement.Placement`, moved to its device and dtype,
    weights in the layout for ``target_tokens`` per verification (None: as loaded) and CUDA graphs attached
    where it says (:func:`real.model.placement.place_models`)."""
    for model in (models.target, models.draft, models.heads):
        if model is not None:
            model.eval()
    if placement is not None:
        from real.model.placement import place_models

        models = place_models(models, placement, in_place=True, target_tokens=target_tokens)
    return models


def forward_tokens(request: RunRequest) -> int:
    """The most tokens one forward of the request's target runs after the prompt (its weight layout is
    chosen for it): 1 for ar, gamma + 1 for chain, the tree's width for medusa and draft-tree."""
    if request.method == "ar":
        return 1
    if request.method == "chain":
        from real.decode.chain import DEFAULT_GAMMA

        return (request.draft_depth or DEFAULT_GAMMA) + 1
    if request.tree_file is not None:
        return load_tree_file(request.tree_file).size
    if request.method == "draft-tree":
        from real.decode.draft_tree import DEFAULT_MAX_TOKENS

        return request.tree_width or DEFAULT_MAX_TOKENS
    return request.tree_width or DEFAULT_MEDUSA_WIDTH


def placement_of(request: RunRequest):
    """The :class:`real.model.placement.Placement` of a single-device request on this machine (one line
    if its device is not here)."""
    from real.model.placement import resolve

    return resolve(request.device, request.dtype, request.graphs)


def generator(models, seed: int) -> torch.Generator:
    """A seeded generator on the target's device (sampling on a GPU draws there)."""
    device = next(models.target.parameters()).device
    return torch.Generator(device=device).manual_seed(seed)


def evaluation_prompts(models, request: RunRequest) -> list[list[int]]:
    """The request's prompts: cut from ``--prompts-from`` where given, else from the corpus's evaluation split."""
    return model_prompts(models, "evaluation", request.prompts, request.prompt_tokens, request.seed,
                       request.prompts_from)


def model_prompts(models, split: str, n: int, prompt_tokens: int, seed: int, prompts_from: str | None = None):
    """``n`` prompts in the models' tokens: from the text files of ``prompts_from``, else from ``split`` of the
    corpus (:mod:`real.train.corpus`)."""
    from real.train.corpus import prompts as corpus_prompts
    from real.train.corpus import prompts_from_files

    if prompts_from is not None:
        return prompts_from_files(models.tokenizer, prompts_from, n, prompt_tokens, seed)
    return [list(p) for p in corpus_prompts(models.tokenizer, split, n, prompt_tokens, seed=seed)]


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Run the block with ``threads`` torch intra-op threads (None:
    :func:`real.model.placement.default_threads`, set explicitly), then restore.

    On a machine shared with other busy processes, every multi-threaded operator waits for a
    descheduled worker thread (measured here: one SDPA call 8 us with 1 thread, ~12 ms median with
    2 threads under a load of 6 on 2 cores), so timings are taken with ``--threads 1`` there.
    """
    from real.model.placement import default_threads

    before = torch.get_num_threads()
    torch.set_num_threads(threads if threads is not None else default_threads())
    try:
        yield
    finally:
        torch.set_num_threads(before)
