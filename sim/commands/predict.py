"""``hetspec predict``: the fastest configuration of a method on a platform, and every one evaluated.

Also holds the argument helpers that ``simulate`` and ``sweep`` share (problem and knob flags).
"""

from __future__ import annotations

import argparse
import json

from hwmodels.dtypes import DTYPE_BYTES
from hwmodels.errors import HetSpecError
from sim.cli_numbers import check_int


# ---------------------------------------------------------------------- shared argument helpers
def add_problem_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="target model preset, or path to a config.json or a .gguf "
                                                       "file (its weights priced as stored, e.g. Q4_1)")
    p.add_argument("--platform", required=True, help="platform preset or path to a platform .toml")
    p.add_argument("--method", required=True, help="decode method (ar, chain, medusa, hcmp, ...)")
    add_context_args(p)


def add_context_args(p: argparse.ArgumentParser, many: bool = False) -> None:
    p.add_argument("--acceptance", nargs="+" if many else None, metavar="NAME|FILE|alpha:A",
                   help="acceptance model: a paper table by name (e.g. ghidorah-mbpp, medusa-log), a profile "
                        "JSON written by the real path, or alpha:<a> for a draft chain")
    if many:
        p.add_argument("--contexts", default="256", help="KV context lengths, e.g. 256,1024 or 128-130")
        p.add_argument("--batches", default="1", help="batch sizes, e.g. 1,2,4")
    else:
        p.add_argument("--context", type=int, default=256, help="KV-cache length the step is priced at (default 256)")
        p.add_argument("--batch", type=int, default=1, help="sequences per batch (default 1)")
    p.add_argument("--dtype", choices=sorted(DTYPE_BYTES), help="compute dtype of the target (default: the model's)")


def add_knob_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("knobs (fix or narrow the search; default: the method's search space)")
    g.add_argument("--tree-width", "--width", dest="tree_width",
                   help="tokens verified per step, root included: N, a list or a range (1-64)")
    g.add_argument("--draft-depth", "--depth", "--gamma", dest="draft_depth",
                   help="gamma / tree depth / drafter depth: N, a list or a range")
    g.add_argument("--partition-ratio", "--ratio", dest="ratio",
                   help="partition ratio in [0, 1], or LOW:HIGH to search a range")
    g.add_argument("--device", help="device(s) for the target, comma-separated")
    g.add_argument("--draft-device", help="device(s) for the draft model, comma-separated")
    g.add_argument("--draft-model", help="draft model preset (chain, draft-tree)")
    g.add_argument("--tree-shape", help="greedy, dp, medusa-list, cartesian, chain (comma-separated)")
    g.add_argument("--tree-choices", metavar="FILE",
                   help='JSON list of Medusa choice paths, e.g. [[0],[1],[0,0]] (or {"choices": [...]})')
    g.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="method-specific knob (repeatable), e.g. cartesian_sizes=2,3")


def _parse_value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    if "," in text:
        parts = [p.strip() for p in text.split(",")]
        try:
            return tuple(int(p) for p in parts)
        except ValueError:
            return tuple(parts)
    return text


def space_from_args(args: argparse.Namespace) -> dict:
    """Knob overrides for :func:`sim.optimizer.optimize` from the knob flags (checked by
    :mod:`sim.cli_numbers`: a flag given empty, a list out of range or an option out of its range is one line)."""
    from sim.cli_numbers import check_text, int_list, ratio
    from sim.options import check_option
    from sim.tree import TokenTree

    for name in ("tree_width", "draft_depth", "ratio", "device", "draft_device", "tree_shape", "draft_model",
                 "tree_choices"):
        check_text(getattr(args, name), "--" + {"ratio": "partition-ratio"}.get(name, name.replace("_", "-")))
    space: dict = {}
    if args.tree_width is not None:
        space["tree_width"] = int_list(args.tree_width, "--tree-width", 1)
    if args.draft_depth is not None:
        space["draft_depth"] = int_list(args.draft_depth, "--draft-depth", 0)
    if args.ratio is not None:
        space["partition_ratio"] = ratio(args.ratio)
    for flag, key in (("device", "device"), ("draft_device", "draft_device"), ("tree_shape", "tree_shape")):
        value = getattr(args, flag)
        if value is not None:
            space[key] = tuple(v.strip() for v in value.split(",") if v.strip())
    if args.draft_model is not None:
        space["draft_model"] = (args.draft_model,)
    if args.tree_choices is not None:
        if args.tree_width is not None:     # the file fixes the width: two answers to one question
            raise HetSpecError(f"give either --tree-choices or --tree-width, not both (the tree file fixes the "
                               f"width: {TokenTree.from_file(args.tree_choices).size} tokens)")
        tree = TokenTree.from_file(args.tree_choices)
        space["tree"] = (tree,)
        space["tree_width"] = (tree.size,)
    for item in args.option:
        if "=" not in item:
            raise HetSpecError(f"--option expects KEY=VALUE (got {item!r})")
        key, value = (part.strip() for part in item.split("=", 1))
        if not key or not value:
            raise HetSpecError(f"--option expects KEY=VALUE with both given (got {item!r})")
        space[key] = (check_option(key, _parse_value(value)),)
    return space


def problem_from_args(args: argparse.Namespace, acceptance: str | None = None):
    from hwmodels.loader import get_platform
    from sim.acceptance_loader import load_acceptance
    from sim.model_spec import get_model
    from sim.strategies.base import Problem

    spec = acceptance if acceptance is not None else args.acceptance
    check_int(args.context, "--context", 0)
    check_int(args.batch, "--batch", 1)
    model = get_model(args.model)
    check_positions(model, args.context)
    return Problem(model=model, platform=get_platform(args.platform),
                   acceptance=load_acceptance(spec) if spec else None, context=args.context, batch=args.batch,
                   dtype=args.dtype)


def describe_config(row: dict) -> str:
    parts = [f"width {row['tree_width']}", f"depth {row['draft_depth']}"]
    if row.get("partition_ratio") is not None and row["partition_ratio"] == row["partition_ratio"]:
        parts.append(f"ratio {row['partition_ratio']:.3f}")
    parts.append(f"device {row['device']}")
    if row.get("draft_device"):
        parts.append(f"draft {row.get('draft_model') or ''}@{row['draft_device']}")
    if row.get("tree_shape"):
        parts.append(f"tree {row['tree_shape']}")
    return ", ".join(parts)


# ---------------------------------------------------------------------- the command
def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("predict", help="best tree width / depth / partition ratio of a method, and the full table")
    add_problem_args(p)
    add_knob_args(p)
    p.add_argument("--no-refine", action="store_true", help="partition ratio on the coarse grid only")
    p.add_argument("--no-table", action="store_true", help="leave the table out of the JSON")
    p.add_argument("--top", type=int, default=10, help="rows of the table to print (text output)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_predict)


def cmd_predict(args: argparse.Namespace) -> int:
    from sim.optimizer import optimize

    check_int(args.top, "--top", 1)
    problem = problem_from_args(args)
    result = optimize(problem, args.method, space_from_args(args), refine=not args.no_refine)
    if args.method != "offload":                # offload streams what does not fit, by design
        warn_placement(problem, result.best)
    header = {"model": problem.model.name, "platform": problem.platform.name, "method": args.method,
              "acceptance": problem.acceptance.name if problem.acceptance else None, "context": problem.context,
              "batch": problem.batch, "dtype": problem.model.dtype}
    note = best_fallback_note(problem, result.best, args.model)
    if args.json:
        print(json.dumps({**header, **result.to_json(with_table=not args.no_table), "fallback": note}, indent=1))
        return 0
    best = result.best
    print(f"{problem.model.name} on {problem.platform.name}, method {args.method}, acceptance "
          f"{header['acceptance'] or '-'}, context {problem.context}, batch {problem.batch}")
    print(f"best: {describe_config(best)}")
    versus = (f"{best['speedup_vs_ar']:.2f}x vs ar ({result.ar_tokens_per_s:.2f} tok/s)"
              if result.ar_tokens_per_s == result.ar_tokens_per_s else
              f"no speedup vs ar: ar fits no single device of {problem.platform.name}")
    print(f"      {best['tokens_per_s']:.2f} tok/s, step {best['step_s'] * 1e3:.3f} ms, "
          f"{best['tokens_per_step']:.3f} tokens/step, {versus}")
    print(f"evaluated {result.rows} configurations ({result.skipped} skipped)")
    cols = [c for c in ("tree_width", "draft_depth", "partition_ratio", "device", "draft_device", "tree_shape",
                        "step_s", "tokens_per_step", "tokens_per_s", "speedup_vs_ar") if c in result.columns]
    order = sorted(range(result.rows), key=lambda i: -result.columns["tokens_per_s"][i])[: args.top]
    print(format_rows(cols, [[result.columns[c][i] for c in cols] for i in order]))
    if note:
        print(note)
    return 0


def best_fallback_note(problem, best: dict, model: str) -> str | None:
    """:func:`sim.step_timing.fallback_note` of the target's step of the best configuration on its device (one
    line where a measured profile prices it and does not cover every operator; None otherwise)."""
    from sim.op_timing import is_profiled
    from sim.step_graph import build_step_graph
    from sim.step_timing import fallback_note, price_step

    device = best.get("device")
    if device not in problem.platform.devices or not is_profiled(problem.platform.device(device)):
        return None
    width = best.get("tree_width") or 1
    width = int(width) if width == width else 1      # NaN: a method without a width
    graph = build_step_graph(problem.model, width, problem.context, problem.batch, problem.dtype)
    return fallback_note(price_step(graph, problem.platform.device(device)), model)


def format_rows(names: list[str], rows: list[list], left: tuple[int, ...] = (), sep: str = " ") -> str:
    """A plain text table (4 significant digits for floats), right-aligned except the ``left`` columns;
    each column as wide as its widest cell, so neighbouring values never run together."""
    def cell(v) -> str:
        if isinstance(v, float):
            return f"{v:.4g}" if v == v else "-"        # NaN: no value (e.g. no ar baseline to divide by)
        return "-" if v is None else str(v)

    def line(values) -> str:
        cells = (v.ljust(w) if j in left else v.rjust(w) for j, (v, w) in enumerate(zip(values, widths)))
        return sep.join(cells).rstrip()

    text = [[cell(v) for v in row] for row in rows]
    widths = [max(len(n), *(len(r[j]) for r in text)) for j, n in enumerate(names)]
    return "\n".join([line(names)] + [line(r) for r in text])


def warn_placement(problem, best: dict) -> None:
    """One stderr line if the chosen configuration's target does not fit its device (sim.sanity)."""
    from sim.sanity import warn_memory

    device = best.get("device")
    if device in problem.platform.devices:
        warn_memory(problem.model, problem.platform.device(device), problem.context, problem.batch,
                    int(best.get("tree_width") or 1), problem.dtype)


def check_positions(model, context: int, tokens: int = 1,
                    names: tuple[str, str] = ("--context", "new tokens")) -> None:
    """One line if ``tokens`` new tokens after ``context`` cached ones need positions beyond the model's
    ``max_position`` (as ``hetspec run`` refuses a prompt + new tokens + one tree beyond it)."""
    if context + tokens > model.max_position:
        raise HetSpecError(f"{names[0]} {context} + {names[1]} {tokens} = {context + tokens} positions exceed "
                           f"model {model.name}'s max_position {model.max_position}")
