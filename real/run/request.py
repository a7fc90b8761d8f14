"""The knobs of ``hetspec run`` / ``hetspec profile-acceptance``, validated without torch.

Bad command-line values fail here, in milliseconds and before any model is loaded; the runner
(:mod:`real.run.session`) turns a valid :class:`RunRequest` into a decoder config.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hwmodels.errors import HetSpecError
from real.decode import check_method
from real.decode.sampling import Sampling
from real.model.placement import check_device_name, check_dtype_name, check_graphs
from sim.cli_numbers import check_seed
from sim.knobs import KNOBS, check_applies, flag
from sim.tree import TokenTree

TRACE_SUFFIXES = (".csv", ".jsonl", ".json")


@dataclass(frozen=True)
class RunRequest:
    """The knobs of ``hetspec run`` (None = the method's default)."""

    method: str
    preset: str = "tiny"
    # the method's knobs (names of sim.knobs; None = the method's default)
    tree_width: int | None = None
    draft_depth: int | None = None
    tree_file: str | None = None
    partition_ratio: float | None = None    # hcmp: share of every split operator on the primary worker
    workers: str | None = None              # hcmp / dovetail / alspec: "cpu0,cpu1"
    top_k: int | None = None                # dovetail: nodes expanded per level
    drafter: str | None = None              # dovetail: draft | dgf
    lam: float | None = None                # alspec: lambda of the norm check
    window: int | None = None               # alspec: sink / window size S
    memory_budget: str | None = None        # draft-tree: stream the target's weights under this budget
    # sampling and the run
    temperature: float = 0.0
    top_p: float = 1.0
    prompts: int = 4
    prompt_tokens: int = 64
    max_new_tokens: int = 64
    seed: int = 0
    threads: int | None = None    # torch intra-op threads while decoding (None: torch's default)
    # where a single-device method runs (real.model.placement; None: the default)
    device: str | None = None     # cpu, cuda or cuda:N (default cuda:0 where CUDA exists, else cpu)
    dtype: str | None = None      # fp32 (default), fp16 (CUDA), bf16
    graphs: str = "auto"          # CUDA graphs: auto (on for a CUDA device), on, off
    # models from disk instead of the demo preset (real.run.checkpoint_models), and prompts from text files
    target: str | None = None     # a Hugging Face folder or a GGUF file
    draft: str | None = None
    heads: str | None = None      # a Medusa heads folder
    prompts_from: str | None = None

    def __post_init__(self) -> None:
        check_method(self.method)
        check_model_paths(self.method, self.target, self.draft, self.heads, self.drafter)
        if self.memory_budget is not None and self.target is not None and Path(self.target).suffix.lower() == ".gguf":
            raise HetSpecError(f"--memory-budget streams the target's layers from a safetensors folder; --target "
                               f"{self.target} is a GGUF file (save it as a Hugging Face folder first)")
        check_prompts_from(self.prompts_from)
        object.__setattr__(self, "device", check_device_name(self.device))
        check_dtype_name(self.dtype)
        check_graphs(self.graphs)
        from real.hetero import HETERO_DECODER_MODULES

        placed = [f for f, v in (("--device", self.device), ("--dtype", self.dtype)) if v is not None]
        if self.method in HETERO_DECODER_MODULES and (placed or self.graphs != "auto"):
            raise HetSpecError(f"{self.method} places its work with --workers (e.g. cuda:0,cpu), not "
                               f"{', '.join(placed) or '--graphs'}")
        if self.memory_budget is not None and (placed or self.graphs == "on"):
            raise HetSpecError("--memory-budget streams the target's layers into CPU memory; it takes no "
                               f"{', '.join(placed) or '--graphs'}")
        if self.threads is not None and self.threads < 1:
            raise HetSpecError(f"--threads must be >= 1, got {self.threads}")
        for name in ("tree_width", "draft_depth", "top_k"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise HetSpecError(f"{flag(name)} must be >= 1, got {value}")
        for name in ("prompts", "prompt_tokens", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise HetSpecError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        Sampling(self.temperature, self.top_p)
        if self.temperature == 0.0 and self.top_p != 1.0:
            raise HetSpecError(f"--top-p {self.top_p:g} has no effect under greedy decoding (--temperature 0): "
                               "give --temperature > 0 to sample, or leave --top-p out")
        check_seed(self.seed)
        check_applies(self.method, self.knobs())
        from real.hetero.request import check_knobs

        check_knobs(self.method, self.partition_ratio, self.workers, self.lam, self.window, self.memory_budget, self.drafter,
                    self.temperature)
        if self.tree_file is not None and self.tree_width is not None:
            raise HetSpecError(f"give either --tree or --tree-width for {self.method}, not both")
        if self.method == "draft-tree" and self.temperature > 0:
            raise HetSpecError("draft-tree verifies greedily (LLMCad); run it with --temperature 0")
        if self.method == "draft-tree" and self.tree_width is not None and self.tree_width < 2:
            raise HetSpecError(f"draft-tree needs --tree-width >= 2 (the root and one draft token), got {self.tree_width}")
        if self.method in ("medusa", "hcmp") and self.top_p != 1.0:
            raise HetSpecError(f"{self.method}'s typical acceptance uses --temperature only, not --top-p")
        if self.tree_file is not None:
            tree = load_tree_file(self.tree_file)
            if self.draft_depth is not None and tree.depth > self.draft_depth:
                raise HetSpecError(f"tree file {self.tree_file} is {tree.depth} deep, more than --draft-depth "
                                   f"{self.draft_depth}")

    @property
    def model_paths(self) -> "ModelPaths | None":
        """The models named on the command line (None: the demo preset's)."""
        return ModelPaths(self.target, self.draft, self.heads) if self.target is not None else None

    def knobs(self) -> dict:
        """The method's knobs given (not None), by their names in :data:`sim.knobs.KNOBS`."""
        return {k: getattr(self, k) for k in KNOBS if getattr(self, k) is not None}


@dataclass(frozen=True)
class ModelPaths:
    """The models of a real-path command given by path: a target (Hugging Face folder or GGUF file), an
    optional draft (the same kinds) and optional Medusa heads (a folder)."""

    target: str
    draft: str | None = None
    heads: str | None = None


#: What each method needs besides the target: a draft model, Medusa heads (dovetail: a draft unless
#: its drafter is the DGF one, which is trained for a demo preset only).
METHOD_NEEDS = {"chain": "draft", "draft-tree": "draft", "dovetail": "draft", "medusa": "heads", "hcmp": "heads"}


def check_model_path(path: str, flag: str, heads: bool = False) -> None:
    """A model path that exists and is of a kind the loaders read (one line otherwise)."""
    p = Path(path)
    if not p.exists():
        raise HetSpecError(f"{flag} {path}: no such file or folder")
    if heads:
        if not p.is_dir():
            raise HetSpecError(f"{flag} {path}: Medusa heads are a folder (medusa_config.json + weights)")
    elif not (p.is_dir() and (p / "config.json").is_file()) and not (p.is_file() and p.suffix.lower() == ".gguf"):
        raise HetSpecError(f"{flag} {path}: expected a Hugging Face folder (config.json + safetensors) or a "
                           f".gguf file")


def check_model_paths(method: str, target: str | None, draft: str | None, heads: str | None,
                      drafter: str | None = None) -> None:
    """The paths of ``--target`` / ``--draft`` / ``--heads`` for ``method``: each readable, and what the method
    needs given (one line naming the flag otherwise)."""
    if target is None:
        given = [f for f, v in (("--draft", draft), ("--heads", heads)) if v is not None]
        if given:
            raise HetSpecError(f"{', '.join(given)} needs --target (the demo presets bring their own)")
        return
    check_model_path(target, "--target")
    if draft is not None:
        check_model_path(draft, "--draft")
    if heads is not None:
        check_model_path(heads, "--heads", heads=True)
    need = METHOD_NEEDS.get(method)
    if method == "dovetail" and drafter == "dgf":
        raise HetSpecError("dovetail --drafter dgf is trained for a demo preset; with --target give --draft")
    if need == "draft" and draft is None:
        raise HetSpecError(f"{method} needs a draft model: give --draft PATH (a Hugging Face folder or a .gguf file "
                           f"sharing the target's vocabulary)")
    if need == "heads" and heads is None:
        raise HetSpecError(f"{method} needs Medusa heads: give --heads FOLDER (heads trained for the target)")


def check_prompts_from(path: str | None) -> None:
    if path is not None and not Path(path).exists():
        raise HetSpecError(f"--prompts-from {path}: no such file or folder")


def load_tree_file(path: str | Path) -> TokenTree:
    """A tree from a JSON file of Medusa choice paths (:meth:`sim.tree.TokenTree.from_file`, which checks it)."""
    return TokenTree.from_file(path)


def check_trace_path(trace: str | None) -> None:
    if trace is not None and Path(trace).suffix.lower() not in TRACE_SUFFIXES:
        raise HetSpecError(f"trace file {trace}: suffix must be .csv, .jsonl or .json (Chrome trace)")


def parse_methods(text: str) -> tuple[str, ...]:
    """The methods of ``--compare M1,M2,...`` (at least two, no repeats)."""
    methods = tuple(m.strip() for m in text.split(",") if m.strip())
    if len(methods) < 2:
        raise HetSpecError(f"--compare needs at least two methods separated by commas, got {text!r}")
    if len(set(methods)) != len(methods):
        raise HetSpecError(f"--compare lists a method twice: {text!r}")
    for m in methods:
        check_method(m)
    return methods


def check_profile_args(out: str, prompts: int, prompt_tokens: int, max_new_tokens: int) -> None:
    for name, value in (("prompts", prompts), ("prompt-tokens", prompt_tokens)):
        if value < 1:
            raise HetSpecError(f"--{name} must be >= 1, got {value}")
    if max_new_tokens < 2:
        raise HetSpecError(f"--max-new-tokens must be >= 2, got {max_new_tokens}")
    if Path(out).suffix.lower() != ".json":
        raise HetSpecError(f"--out {out}: an acceptance profile is a .json file")


def parse_draft_tree_widths(text: str | None) -> tuple[int, ...]:
    """``--draft-tree-widths 4,8,16``: tree budgets (>= 2: the root and one draft token) whose real
    draft-tree rounds a profile counts."""
    from sim.cli_numbers import int_list

    if text is None:
        return ()
    return tuple(sorted(int_list(text, "--draft-tree-widths", 2, what="tree budgets", example="4,8,16")))
