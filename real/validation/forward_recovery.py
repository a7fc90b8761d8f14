"""A forward's first calls right after another, larger forward, timed call by call: how long the caches take to
come back to its own working set, which the warm-up before each timed sample of the ``forward_rest`` rows waits
out (:data:`real.validation.forward_launch.WARM_S`).

    python -m real.validation.forward_recovery [--model demo:small] [--which draft] [--tokens 1] [--after 512]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from real.run.repeats import median
from real.validation.forward_launch import REST_CONTEXT, WARM_CALLS, WARM_S, warm_up
from real.validation.microbench import forward_step, prefilled_cache


def recovery_ms(spec, tokens: int, after: int, calls: int, rounds: int) -> list[list[float]]:
    """Milliseconds of each of ``calls`` back-to-back ``tokens``-token forwards of a random-weight ``spec`` model
    (CPU, :data:`REST_CONTEXT` cached tokens), right after one ``after``-token forward; ``rounds`` times, after a
    steady warm-up: how many calls the caches take to come back to the forward's own working set."""
    from real.model.transformer import Transformer

    torch.manual_seed(0)
    model = Transformer(spec).eval()
    out = []
    with torch.inference_mode():
        cache = prefilled_cache(model, REST_CONTEXT, REST_CONTEXT + max(tokens, after))
        step, other = forward_step(model, cache, tokens), forward_step(model, cache, after)
        warm_up(step, min_s=0.2)
        for _ in range(rounds):
            other()
            times = []
            for _ in range(calls):
                t0 = time.perf_counter()
                step()
                times.append((time.perf_counter() - t0) * 1e3)
            out.append(times)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m real.validation.forward_recovery``: a forward's first calls after another, larger one."""
    from hwmodels.errors import HetSpecError
    from real.validation.microbench import torch_threads
    from real.validation.profile_device import resolve_models

    parser = argparse.ArgumentParser(prog="python -m real.validation.forward_recovery",
                                     description="Time a model's forward call by call right after a larger forward: "
                                                 "the re-warming that the forward_rest rows' warm-up waits out.")
    parser.add_argument("--model", default="demo:small", help="a preset, config.json or demo:<preset> "
                                                              "(default demo:small)")
    parser.add_argument("--which", choices=("target", "draft"), default="draft",
                        help="of a demo preset: its target or its draft (default draft)")
    parser.add_argument("--tokens", type=int, default=1, help="tokens of the forward timed (default 1)")
    parser.add_argument("--after", type=int, default=512, help="tokens of the forward before it (default 512)")
    parser.add_argument("--calls", type=int, default=16, help="calls timed after it (default 16)")
    parser.add_argument("--rounds", type=int, default=3, help="how many times (default 3)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    args = parser.parse_args(argv)
    try:
        if min(args.tokens, args.after, args.calls, args.rounds, args.threads) < 1:
            raise HetSpecError("--tokens, --after, --calls, --rounds and --threads must be at least 1")
        specs = resolve_models([args.model])
        spec = specs[1] if args.model.startswith("demo:") and args.which == "draft" else specs[0]
        if REST_CONTEXT + max(args.tokens, args.after) > spec.max_position:
            raise HetSpecError(f"{spec.name} has {spec.max_position} positions: {REST_CONTEXT} cached + "
                               f"{max(args.tokens, args.after)} tokens do not fit")
        with torch_threads(args.threads):
            rounds = recovery_ms(spec, args.tokens, args.after, args.calls, args.rounds)
    except HetSpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{spec.name}: {args.tokens}-token forward, ms per call right after a {args.after}-token one "
          f"({args.threads} torch threads, {REST_CONTEXT} cached tokens)")
    for times in rounds:
        print("  " + " ".join(f"{t:.2f}" for t in times))
    steady = median([t for times in rounds for t in times[len(times) // 2:]])
    print(f"  steady (median of the later half): {steady:.2f} ms; "
          f"the warm-up before each timed sample: at least {WARM_CALLS} calls and {WARM_S * 1e3:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
