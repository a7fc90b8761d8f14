"""Dovetail's verification on the all-core ``cpu`` worker with its OpenMP team bound one thread a core, and
unbound: ``python -m real.hetero.binding_bench [--preset P] [--repeats N] [--prompts N]``.

Drafter and verifier take turns. While a single-thread worker drafts, the verifier's OpenMP helper thread
sleeps, and an unpinned helper woken for the verification was at times run on its waker's core
(:func:`real.hetero.workers.bind_team`). This decodes the same evaluation prompts with Dovetail placed
``cpuN -> cpu`` (drafting on the first core, verifying on every core), the session's team binding on and off
in interleaved repeats, and prints each repeat's verification times: median, mean and how many took more
than 1.5x the median of the bound runs (the tail the binding removes).
"""

from __future__ import annotations

import argparse
import statistics
import sys

SLOW = 1.5     # a verification slower than this many times the bound runs' median is counted as the tail


def verify_times_ms(models, prompts, workers: tuple[str, str], bind: bool, new_tokens: int) -> list[float]:
    """Every verification's milliseconds of one Dovetail decode of ``prompts`` (team binding ``bind``)."""
    import torch

    from real.hetero import dovetail
    from real.hetero.runner import run_runtime

    config = dovetail.DovetailConfig(workers=workers, bind_team=bind)
    with torch.inference_mode(), dovetail.prepare(models, config) as rt:
        res = run_runtime(rt, "dovetail", config, prompts, new_tokens, workers[1])
    return [1e3 * r.duration_s for r in res.records if r.phase == "verify"]


def main(argv: list[str] | None = None) -> int:
    from hwmodels.errors import HetSpecError
    from real.run.worker import allowed_cores, can_pin
    from real.run.session import load_models
    from real.train.corpus import prompts as corpus_prompts

    p = argparse.ArgumentParser(prog="python -m real.hetero.binding_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="small", help="demo preset (default small)")
    p.add_argument("--repeats", type=int, default=6, help="interleaved repeats of each mode (default 6)")
    p.add_argument("--prompts", type=int, default=4, help="evaluation prompts per decode (default 4)")
    p.add_argument("--max-new-tokens", type=int, default=96, help="tokens per prompt (default 96)")
    args = p.parse_args(argv)
    try:
        if args.repeats < 1 or args.prompts < 1 or args.max_new_tokens < 1:
            raise HetSpecError("--repeats, --prompts and --max-new-tokens must be at least 1")
        cores = allowed_cores()
        if len(cores) < 2 or not can_pin():
            raise HetSpecError("the binding needs two cores and per-thread affinity (Linux)")
        models = load_models(args.preset, progress=True)
        prompts = [list(q) for q in corpus_prompts(models.tokenizer, "evaluation", args.prompts, 64, seed=0)]
        workers = (f"cpu{cores[0]}", "cpu")
        runs: dict[bool, list[list[float]]] = {True: [], False: []}
        for rep in range(args.repeats):
            for bind in (False, True):
                runs[bind].append(verify_times_ms(models, prompts, workers, bind, args.max_new_tokens))
                print(f"repeat {rep + 1}/{args.repeats} {'bound' if bind else 'unbound'}", file=sys.stderr, flush=True)
    except HetSpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    slow = SLOW * statistics.median(t for r in runs[True] for t in r)
    print(f"dovetail {workers[0]} -> {workers[1]}, preset {args.preset}, {args.prompts} prompts x "
          f"{args.max_new_tokens} tokens; verification ms per repeat (tail: > {slow:.2f} ms)")
    print("| repeat | unbound median / mean / tail | bound median / mean / tail |")
    print("|---:|---|---|")
    for rep in range(args.repeats):
        cells = [f"{statistics.median(r):.2f} / {statistics.fmean(r):.2f} / {sum(t > slow for t in r)} of {len(r)}"
                 for r in (runs[False][rep], runs[True][rep])]
        print(f"| {rep + 1} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
