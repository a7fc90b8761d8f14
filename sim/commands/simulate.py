"""``hetspec simulate``: run a configuration on the engine for N steps, write the trace, and print
how far the closed form is from the engine (overlap and contention are what separate them)."""

from __future__ import annotations

import argparse
import json

from sim.cli_numbers import check_int, check_seed
from sim.commands.predict import (add_knob_args, add_problem_args, describe_config, problem_from_args, space_from_args,
                                  warn_placement)

#: Most steps one ``simulate`` plays: the engine keeps every task's record in memory (tens per step, about
#: 2,000 steps a second); 10,000 steps stay within seconds and megabytes.
MAX_STEPS = 10_000
#: With ``--per-layer`` each step holds one task per layer and operator (tens of times more records).
MAX_STEPS_PER_LAYER = 1_000


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="play N decode steps on the SimPy engine and write the trace",
                       description="Knobs you do not fix are chosen by the optimizer (as `hetspec predict` would).")
    add_problem_args(p)
    add_knob_args(p)
    p.add_argument("--steps", type=int, default=20,
                   help=f"decode steps to play (default 20; at most {MAX_STEPS:,}, "
                        f"{MAX_STEPS_PER_LAYER:,} with --per-layer)")
    p.add_argument("--seed", type=int, help="draw each step's acceptance with this seed, 0 to 2**32-1 "
                                            "(default: the expectation)")
    p.add_argument("--per-layer", action="store_true", help="one task per layer and operator (readable traces)")
    p.add_argument("--no-op-records", action="store_true", help="trace only the per-step phase records")
    p.add_argument("--trace", metavar="FILE", help="write the trace: .csv, .jsonl or .json (Chrome trace)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_simulate)


def cmd_simulate(args: argparse.Namespace) -> int:
    from sim.engine import simulate
    from sim.optimizer import optimize
    from sim.trace_files import check_trace_path, write_trace

    check_int(args.steps, "--steps", 1, MAX_STEPS_PER_LAYER if args.per_layer else MAX_STEPS)
    check_seed(args.seed)
    if args.trace:
        check_trace_path(args.trace)        # before the run: a trace that cannot be written fails at once
    problem = problem_from_args(args)
    chosen = optimize(problem, args.method, space_from_args(args))
    if args.method != "offload":
        warn_placement(problem, chosen.best)
    sim = simulate(problem, args.method, chosen.best_config, steps=args.steps, seed=args.seed,
                   per_layer=args.per_layer, op_records=not args.no_op_records)
    path = write_trace(sim.run.records, args.trace) if args.trace else None
    summary = {"model": problem.model.name, "platform": problem.platform.name,
               "acceptance": problem.acceptance.name if problem.acceptance else None, "context": problem.context,
               "batch": problem.batch, "config": {k: v for k, v in chosen.to_json(False)["best"].items()
                                                 if k not in ("step_s", "tokens_per_s", "tokens_per_step",
                                                              "proposed_per_step", "speedup_vs_ar", "refined")},
               **sim.summary(), "seed": args.seed, "trace": str(path) if path else None,
               "records": len(sim.run.records)}
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    print(f"{problem.model.name} on {problem.platform.name}, method {args.method}: {describe_config(chosen.best)}")
    mode = f"acceptance drawn with seed {args.seed}" if args.seed is not None else "expected acceptance"
    print(f"{summary['steps']} steps ({mode}): {summary['tokens']} tokens, "
          f"{summary['mean_tokens_per_step']:.3f} tokens/step (expected {summary['expected_tokens_per_step']:.3f})")
    print(f"step time: engine {summary['engine_step_s'] * 1e3:.4f} ms, closed form "
          f"{summary['closed_form_step_s'] * 1e3:.4f} ms, difference {round(summary['step_diff_pct'], 3) + 0.0:+.3f} %")
    print(f"tokens/s:  engine {summary['engine_tokens_per_s']:.3f}, closed form "
          f"{summary['closed_form_tokens_per_s']:.3f}")
    if path:
        print(f"trace: {path} ({summary['records']} records)")
    return 0
