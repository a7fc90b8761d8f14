"""``hetspec run`` on a demo preset or on models given by path: choose the single-worker path
(:mod:`real.run.session`) or the heterogeneous one (:mod:`real.hetero.runner`: several workers, or weights
streamed under a memory budget), build the method's config, decode the evaluation prompts, write the trace;
and ``hetspec profile-acceptance`` (:func:`profile_demo`) on the same models."""

from __future__ import annotations

from pathlib import Path

from real.hetero.runner import run_hetero_demo, uses_hetero_runner
from real.model.placement import default_threads
from real.run.checkpoint_models import load_run_models
from real.run.request import RunRequest, check_profile_args, check_trace_path
from real.run.session import (
    RunResult,
    build_config,
    demo_profile,
    evaluation_prompts,
    forward_tokens,
    model_prompts,
    models_fingerprint,
    models_label,
    placement_of,
    run_prompts,
    torch_threads,
)
from sim.acceptance_profile import AcceptanceProfile
from sim.trace_files import write_trace


def request_config(request: RunRequest, models):
    """Build the config, measuring (or loading) head accuracies only when medusa (or hcmp) needs them."""
    accuracy = None
    if request.method in ("medusa", "hcmp") and request.tree_file is None:
        accuracy = demo_profile(models, request.preset).medusa_accuracy
    return build_config(request, accuracy)


#: Characters of the first generation that ``hetspec run`` prints (its repr, so control characters show).
SHOWN_OUTPUT_CHARS = 120


def first_output(models, result: RunResult) -> str:
    """The first prompt's generated text, as a Python literal cut to :data:`SHOWN_OUTPUT_CHARS`."""
    text = models.tokenizer.decode(result.results[0].ids)
    return repr(text[:SHOWN_OUTPUT_CHARS]) + ("..." if len(text) > SHOWN_OUTPUT_CHARS else "")


def run_demo(request: RunRequest, trace: str | None = None, progress: bool = True) -> tuple[RunResult, dict]:
    """``hetspec run``: load the preset's demo models, decode evaluation prompts, optionally write the trace."""
    if uses_hetero_runner(request):   # several workers, or weights streamed under a budget (real/hetero)
        return run_hetero_demo(request, trace, progress)
    check_trace_path(trace)
    placement = placement_of(request)      # one line if --device names a device this machine lacks
    models = load_run_models(request.preset, progress, placement, forward_tokens(request), request.model_paths)
    config = request_config(request, models)
    with torch_threads(request.threads):
        result = run_prompts(models, request.method, config, evaluation_prompts(models, request),
                             request.max_new_tokens, seed=request.seed, progress=progress)
    if trace is not None:
        write_trace(result.records, trace)
    info = {"preset": request.preset, "models": models_label(models), "prompts": request.prompts,
            "prompt_tokens": request.prompt_tokens,
            "max_new_tokens": request.max_new_tokens, "seed": request.seed, "temperature": request.temperature,
            "threads": request.threads or default_threads(), "device": placement.device,
            "dtype": placement.dtype, "graphs": placement.graphs,
            "texts": [models.tokenizer.decode(r.ids) for r in result.results],
            "summary_lines": [f"  device          {placement.describe()}",
                              f"  first output    {first_output(models, result)}"]}
    return result, info


def profile_demo(preset: str, out: str | Path, prompts: int, prompt_tokens: int,
                 max_new_tokens: int, placement=None, draft_tree_widths=(), paths=None,
                 prompts_from: str | None = None) -> AcceptanceProfile:
    """``hetspec profile-acceptance``: measure on calibration prompts and write the profile to ``out``
    (on ``placement``'s device and dtype, :class:`real.model.placement.Placement`; default: the CPU);
    ``draft_tree_widths``: tree budgets whose real draft-tree rounds it also counts; ``paths``: models
    given by path (:class:`real.run.request.ModelPaths`) instead of the preset's; ``prompts_from``: text
    files to cut the prompts from instead of the corpus's calibration split."""
    from real.run.acceptance import measure_profile

    check_profile_args(str(out), prompts, prompt_tokens, max_new_tokens)
    models = load_run_models(preset, placement=placement, paths=paths)
    calibration = model_prompts(models, "calibration", prompts, prompt_tokens, 0, prompts_from)
    where = {"device": placement.device, "dtype": placement.dtype} if placement is not None else {}
    name = f"demo-{preset}" if paths is None else Path(paths.target).stem
    profile = measure_profile(models, calibration, max_new_tokens, name=name,
                              source=f"measured by hetspec profile-acceptance on {prompts} "
                                     f"{'prompts of ' + prompts_from if prompts_from else 'calibration prompts'} "
                                     f"of {models_label(models)}",
                              meta={"preset": preset, "prompt_tokens": prompt_tokens,
                                    "models_fingerprint": models_fingerprint(models), **where},
                              draft_tree_widths=draft_tree_widths)
    profile.save(out)
    return profile
