"""``hetspec run`` (decode with one method, or compare several) and ``hetspec profile-acceptance``."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from real.train.commands import add_preset_flags, resolve_preset


def register(subparsers) -> None:
    register_run(subparsers)
    register_profile(subparsers)
    register_bench(subparsers)


# ---------------------------------------------------------------------------- hetspec run
METHODS = ("ar", "chain", "draft-tree", "medusa", "hcmp", "dovetail", "alspec")
#: Repeats of ``run --compare`` when none are asked, and the most it takes: the medians settle long before,
#: and a larger count is refused with this bound (each repeat decodes every prompt with every method).
COMPARE_REPEATS, MAX_COMPARE_REPEATS = 3, 100


def register_run(subparsers) -> None:
    p = subparsers.add_parser(
        "run", help="decode evaluation prompts with a method on the demo models or any --target",
        description="Decode held-out evaluation prompts of the demo corpus (or --prompts-from text files) with one "
                    "decode method (greedy unless --temperature > 0), on a demo preset's models or on any model "
                    "given by --target (a Hugging Face folder or a GGUF file), and report tokens/s and tokens "
                    "per step; --compare times several methods in one interleaved run.")
    p.add_argument("--method", default=None, metavar="M",
                   help=f"decode method: {', '.join(METHODS)} (required unless --compare)")
    p.add_argument("--compare", default=None, metavar="M1,M2,...",
                   help="time these methods on the same prompts in interleaved repeats; speedups "
                        "are ratios of median tokens/s against the first")
    p.add_argument("--repeats", type=int, default=None, metavar="N",
                   help=f"repeats per method with --compare (default {COMPARE_REPEATS}, at most {MAX_COMPARE_REPEATS}); each repeat "
                        "decodes every prompt with every method, and a progress bar counts the decodes")
    add_preset_flags(p)
    add_model_flags(p)
    add_knob_flags(p)
    p.add_argument("--temperature", type=float, default=0.0,
                   help="0 = greedy (default); > 0 samples (ar, chain: lossless; medusa: typical acceptance)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling for ar and chain (default 1)")
    p.add_argument("--prompts", type=int, default=4,
                   help="evaluation prompts (default 4; the evaluation split holds about 14,000 prompts of "
                        "64 tokens at most, a larger count is refused with the exact bound)")
    p.add_argument("--prompt-tokens", type=int, default=64, help="tokens per prompt (default 64)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens generated per prompt (default 64)")
    p.add_argument("--seed", type=int, default=0, help="prompt selection and sampling seed (default 0)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads while decoding (default: $OMP_NUM_THREADS, else every core this process may "
                        "use; use 1 on a machine shared with other jobs)")
    add_placement_flags(p)
    p.add_argument("--trace", default=None, metavar="FILE", help="write the per-step trace (.csv, .jsonl, .json)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a summary")
    p.set_defaults(func=handle_run)


#: What each knob means for ``hetspec run`` (type, metavar, help with the real path's default).
RUN_KNOB_ARGS = {
    "tree_width": (int, "N", "medusa / hcmp: tokens verified per step (greedy tree from measured head accuracies, "
                             "default 8); draft-tree: tree budget (default 8); dovetail: verified tokens (default 16)"),
    "draft_depth": (int, "N", "chain: draft tokens per step, gamma (default 3); draft-tree / medusa / hcmp: max tree "
                              "depth; dovetail: drafter passes after the first (default 7)"),
    "tree_file": (str, "FILE", "medusa / hcmp: JSON file of choice paths, e.g. [[0], [0, 0], [1]]"),
    "partition_ratio": (float, "R", "hcmp: share of every split operator on the first worker, 0..1 (default 0.5)"),
    "workers": (str, "W1,W2", "hcmp: primary,secondary; dovetail: drafter,verifier; alspec: sender,receiver "
                              "(cpu0, cpu1, ...: one pinned single-thread worker; cpu: all cores; cuda:0 where CUDA "
                              "exists; default cpu0,cpu1)"),
    "top_k": (int, "K", "dovetail: nodes expanded per level, children scored per node (default 10)"),
    "drafter": (str, "D", "dovetail: draft, the demo draft model (default), or dgf (hetspec train-demo --dgf)"),
    "lam": (float, "L", "alspec: threshold of the norm check ||A~ - A|| < lambda ||A|| (default 0.1; 0 = exact)"),
    "window": (int, "S", "alspec: sink and window size S of the approximate attention (default 16)"),
    "memory_budget": (str, "SIZE", "draft-tree: stream the target's layers from disk under this budget, e.g. 60MB "
                                   "(LLMCad; a bare number is MB)"),
}


def add_model_flags(parser) -> None:
    """``--target`` / ``--draft`` / ``--heads`` / ``--prompts-from``: any model on disk instead of a demo preset."""
    parser.add_argument("--target", default=None, metavar="PATH",
                        help="the target model instead of a demo preset's: a Hugging Face folder (config.json + "
                             "safetensors + tokenizer.json) or a .gguf file (dequantized on load)")
    parser.add_argument("--draft", default=None, metavar="PATH",
                        help="with --target: a draft model sharing its vocabulary (chain, draft-tree, dovetail)")
    parser.add_argument("--heads", default=None, metavar="FOLDER",
                        help="with --target: Medusa heads trained for it (medusa, hcmp)")
    parser.add_argument("--prompts-from", default=None, metavar="FILE|DIR",
                        help="cut the prompts from these text files (a file, or every file under a folder) "
                             "instead of the standard library's split")


def resolve_models(args) -> str:
    """The preset of a command: the demo preset (trained if needed, :func:`resolve_preset`), or
    ``checkpoint`` when ``--target`` names the models."""
    from hwmodels.errors import HetSpecError

    if args.target is None:
        return resolve_preset(args)
    if args.preset is not None or args.train:
        raise HetSpecError(f"--target names the models; it does not combine with "
                           f"{'--preset' if args.preset is not None else '--train'}")
    return "checkpoint"


def add_placement_flags(parser, graphs: bool = True) -> None:
    """``--device``, ``--dtype`` (and ``--graphs``) of the single-device methods (real.model.placement)."""
    parser.add_argument("--device", default=None, metavar="D",
                        help="torch device of the single-device methods: cpu, cuda or cuda:N (default cuda:0 where "
                             "CUDA exists, else cpu); the heterogeneous methods take --workers")
    parser.add_argument("--dtype", default=None, choices=("fp32", "fp16", "bf16"),
                        help="weights and activations: fp32 (default), fp16 (CUDA only), bf16")
    if graphs:
        parser.add_argument("--graphs", default="auto", choices=("auto", "on", "off"),
                            help="replay each step's forward as a captured CUDA graph per token-count bucket "
                                 "(auto: on for a CUDA device, off on the CPU; off = the eager reference)")


def add_knob_flags(parser) -> None:
    """One flag per knob of :data:`sim.knobs.KNOBS`, named as there (short aliases accepted)."""
    from sim.knobs import KNOBS

    for name, (kind, metavar, text) in RUN_KNOB_ARGS.items():
        info = KNOBS[name]
        parser.add_argument(info.flag, *info.aliases, dest=name, type=kind, default=None, metavar=metavar, help=text)


def _request(args, method: str, only_applicable: bool):
    from real.run.request import RunRequest, check_trace_path
    from sim.knobs import RUN_KNOBS

    check_trace_path(args.trace)
    knobs = {k: getattr(args, k) for k in RUN_KNOB_ARGS}
    if only_applicable:
        knobs = {k: v for k, v in knobs.items() if k in RUN_KNOBS[method]}
    return RunRequest(method=method, preset=args.preset, temperature=args.temperature, top_p=args.top_p,
                      prompts=args.prompts, prompt_tokens=args.prompt_tokens,
                      max_new_tokens=args.max_new_tokens, seed=args.seed, threads=args.threads,
                      device=args.device, dtype=args.dtype, graphs=args.graphs, target=args.target,
                      draft=args.draft, heads=args.heads, prompts_from=args.prompts_from, **knobs)


def _check_placement(request) -> None:
    """A device this machine lacks (or fp16 on the CPU) fails before any model is loaded or trained."""
    from real.hetero.runner import uses_hetero_runner

    if not uses_hetero_runner(request):
        from real.model.placement import resolve

        resolve(request.device, request.dtype, request.graphs)


def handle_run(args: argparse.Namespace) -> int:
    from hwmodels.errors import HetSpecError

    if (args.method is None) == (args.compare is None):
        raise HetSpecError("give exactly one of --method M or --compare M1,M2,...")
    if args.compare is not None:
        return _handle_compare(args)
    if args.repeats is not None:
        raise HetSpecError(f"--repeats {args.repeats} times the methods of --compare; one --method decodes "
                           "its prompts once")
    request = _request(args, args.method, only_applicable=False)   # validated before torch loads
    _check_placement(request)
    args.preset = resolve_models(args)
    request = replace(request, preset=args.preset)
    from real.run.demo_run import run_demo

    result, info = run_demo(request, trace=args.trace, progress=not args.json)
    if args.json:
        info.pop("summary_lines", None)
        print(json.dumps({**info, **result.to_json()}))
        return 0
    where = f"prompts of {args.prompts_from}" if args.prompts_from else "evaluation prompts"
    print(f"{result.method} on {info['prompts']} {where}, {info['models']}, {info['max_new_tokens']} new tokens each")
    print(f"  tokens/s        {result.tokens_per_s:.1f}  (decode {result.decode_s:.3f} s, "
          f"prefill {result.prefill_s:.3f} s)")
    print(f"  tokens/step     {result.mean_accepted_per_step:.2f}  ({result.steps} steps)")
    for line in info.get("summary_lines", ()):
        print(line)
    if args.trace:
        print(f"  trace           {args.trace}")
    return 0


def _handle_compare(args: argparse.Namespace) -> int:
    from hwmodels.errors import HetSpecError
    from real.run.request import parse_methods

    if args.trace:
        raise HetSpecError("--trace records one method; it does not combine with --compare")
    import sys

    from sim.cli_numbers import check_int
    from sim.knobs import check_applies_to_any, flag

    args.repeats = COMPARE_REPEATS if args.repeats is None else \
        check_int(args.repeats, "--repeats", 1, MAX_COMPARE_REPEATS)          # before any model is loaded
    methods = parse_methods(args.compare)
    for knob, without in check_applies_to_any(methods, {k: getattr(args, k) for k in RUN_KNOB_ARGS}).items():
        print(f"hetspec: note: {flag(knob)} does not apply to {', '.join(without)}: they run with their own "
              "defaults", file=sys.stderr)
    requests = [_request(args, m, only_applicable=True) for m in methods]
    for r in requests:
        _check_placement(r)
    args.preset = resolve_models(args)
    requests = [replace(r, preset=args.preset) for r in requests]
    from real.run.compare import compare

    comparison = compare(requests, repeats=args.repeats, progress=not args.json)
    if args.json:
        print(json.dumps({"preset": args.preset, "prompts": args.prompts, "prompt_tokens": args.prompt_tokens,
                          "max_new_tokens": args.max_new_tokens, "seed": args.seed, "threads": args.threads,
                          **comparison.to_json()}))
    else:
        from real.model.placement import default_threads

        threads = f"{args.threads or default_threads()} thread(s)"
        models = f"the target {args.target}" if args.target else f"{args.preset} demo models"
        print(f"{args.prompts} evaluation prompts x {args.max_new_tokens} new tokens, {models}, "
              f"{comparison.placement}, {threads}, median of {args.repeats} interleaved repeats")
        print(comparison.table())
    return 0


# ---------------------------------------------------------------------------- hetspec profile-acceptance
def register_profile(subparsers) -> None:
    p = subparsers.add_parser(
        "profile-acceptance", help="measure Medusa head accuracies and draft acceptance on calibration prompts",
        description="Measure, on calibration prompts of the demo corpus (or --prompts-from text files), for a "
                    "demo preset or the models given by --target / --draft / --heads, the Medusa heads' per-depth x "
                    "per-rank accuracies, the draft's per-token acceptance (overall and by confidence) "
                    "and the acceptance length of greedy Medusa trees of widths 1..64; write an "
                    "acceptance-profile JSON for the simulator.")
    add_preset_flags(p)
    add_model_flags(p)
    p.add_argument("--out", required=True, metavar="FILE", help="profile JSON to write")
    p.add_argument("--prompts", type=int, default=16, help="calibration prompts (default 16)")
    p.add_argument("--prompt-tokens", type=int, default=64, help="tokens per prompt (default 64)")
    p.add_argument("--max-new-tokens", type=int, default=64,
                   help="greedy target tokens scored per prompt (default 64)")
    p.add_argument("--draft-tree-widths", default=None, metavar="M1,M2",
                   help="also decode the prompts with the real draft-tree decoder at these tree budgets and keep "
                        "its rounds (draft passes, tokens verified and emitted), which the simulator's draft-tree "
                        "strategy then prices at those budgets (default: none)")
    add_placement_flags(p)
    p.set_defaults(func=handle_profile)


def handle_profile(args: argparse.Namespace) -> int:
    from real.model.placement import check_device_name, check_dtype_name
    from real.run.request import check_profile_args, parse_draft_tree_widths

    check_profile_args(args.out, args.prompts, args.prompt_tokens, args.max_new_tokens)
    widths = parse_draft_tree_widths(args.draft_tree_widths)
    check_device_name(args.device)
    check_dtype_name(args.dtype)
    from real.run.request import ModelPaths, check_model_paths, check_prompts_from

    check_model_paths("ar", args.target, args.draft, args.heads)     # profiles measure what is given
    check_prompts_from(args.prompts_from)
    from real.model.placement import resolve

    placement = resolve(args.device, args.dtype, args.graphs)     # before any model is loaded or trained
    args.preset = resolve_models(args)
    from real.run.demo_run import profile_demo

    paths = ModelPaths(args.target, args.draft, args.heads) if args.target is not None else None
    profile = profile_demo(args.preset, args.out, args.prompts, args.prompt_tokens, args.max_new_tokens, placement,
                           draft_tree_widths=widths, paths=paths, prompts_from=args.prompts_from)
    print(f"wrote {args.out}: {profile.name}, {profile.meta.get('positions', 0)} positions")
    if profile.medusa_accuracy is not None:
        top1 = ", ".join(f"{row[0]:.3f}" for row in profile.medusa_accuracy)
        print(f"  medusa top-1 accuracy by head   {top1}")
        widths = [w for w in (1, 4, 8, 16, 32, 64) if w in (profile.acceptance_length or {})]
        lengths = ", ".join(f"{w}: {profile.acceptance_length[w]:.2f}" for w in widths)
        print(f"  tokens/step by width            {lengths}")
    if profile.draft_alpha is not None:
        print(f"  draft per-token acceptance      {profile.draft_alpha:.3f}")
    chain = profile.meta.get("chain_rounds") or {}
    if chain:
        passes = ", ".join(f"{g}: {sum(k * w for k, w in chain[g]):.2f}" for g in sorted(chain, key=int))
        print(f"  chain draft passes per round    {passes} (by gamma; a generation's last rounds draft fewer)")
    for key, table in (profile.meta.get("draft_tree_rounds") or {}).items():
        passes = sum(w * p for p, _, w, _ in table["kinds"])
        verified = sum(w * n for _, n, w, _ in table["kinds"])
        tokens = sum(w * t for _, _, w, t in table["kinds"])
        print(f"  draft-tree budget {table['tree_width']:<3d} rounds   {table['rounds']} rounds: {passes:.2f} draft passes, "
              f"{verified:.2f} tokens verified, {tokens:.2f} emitted per round")
    return 0


# ---------------------------------------------------------------------------- hetspec bench
def register_bench(subparsers) -> None:
    p = subparsers.add_parser(
        "bench", help="step time per token count of a random-weight model on a torch device, eager vs CUDA graph",
        description="Time one forward of q tokens (1 to 256) of a random-weight model of a real checkpoint's shape "
                    "on one torch device, eager and (on CUDA) replayed as a CUDA graph, and an ar decode; print "
                    "the rate the weights stream at as a fraction of the device's copy bandwidth measured in the "
                    "same run (python -m real.run.bench is the same command).")
    from real.run.bench import add_arguments, handle

    add_arguments(p)
    p.set_defaults(func=handle)
