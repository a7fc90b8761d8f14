"""How a draft re-warms the cache after a target step, by the step's token count: the draft's one-token passes
timed one by one right after a step of the target (random weights, the demo preset's shapes) of each token
count asked for, and each pass's share of the draft's cold-to-warm gap.

``python -m real.validation.rewarm_trace [--preset small] [--tokens 1,4] [--passes 8] [--rounds 9] [--threads 2]``

The calibration's streaming probe re-times a draft-sized model's passes after a step that evicted it
(:mod:`real.validation.stream_step_probe`); this trace shows why that step is a several-token one, as a
verification is: what comes before the passes changes how fast they recover, not only the bytes it streams.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import torch

from real.validation.microbench import PROBE_CONTEXT, _probe_step, median_time, torch_threads
from real.validation.stream_step_probe import gap_shares as probe_gap_shares
from real.validation.stream_step_probe import rewarm_series


def gap_shares(series: list[float], warm: float) -> list[float]:
    """Each pass after the first: its share of the first pass's gap to ``warm`` (1: still cold, 0: warm)."""
    return list(probe_gap_shares(series, warm)[1:])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m real.validation.rewarm_trace", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="small", help="demo preset whose target and draft shapes are timed")
    parser.add_argument("--tokens", default="1,4", help="token counts of the target step before the passes")
    parser.add_argument("--passes", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    from hwmodels.errors import HetSpecError
    from real.model.random_models import random_transformer
    from real.train.demo import get_recipe

    try:
        try:
            tokens = [int(t) for t in args.tokens.split(",")]
        except ValueError:
            raise HetSpecError(f"--tokens {args.tokens!r}: give token counts such as 1,4") from None
        if min(tokens) < 1 or args.passes < 2 or args.rounds < 1 or args.threads < 1:
            raise HetSpecError("--tokens >= 1, --passes >= 2, --rounds >= 1 and --threads >= 1")
        if max(tokens) > PROBE_CONTEXT:
            raise HetSpecError(f"--tokens up to {PROBE_CONTEXT} (the cache past its {PROBE_CONTEXT} cached tokens)")
        recipe = get_recipe(args.preset)
    except HetSpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    position = 4 * PROBE_CONTEXT
    target_spec = replace(recipe.target.spec(f"{recipe.name}-target", recipe.vocab, position), max_position=position)
    draft_spec = replace(recipe.draft.spec(f"{recipe.name}-draft", recipe.vocab, position), max_position=position)
    torch.manual_seed(0)
    target, draft = random_transformer(target_spec), random_transformer(draft_spec)
    with torch_threads(args.threads), torch.inference_mode():
        draft_pass = _probe_step(draft, False)
        warm = median_time(draft_pass, 5, 30, inner=10)
        print(f"{draft_spec.name} ({draft_spec.weight_bytes() / 1e6:.0f} MB) one-token pass in a loop of its own: "
              f"{warm * 1e3:.3f} ms; after a step of {target_spec.name} ({target_spec.weight_bytes() / 1e6:.0f} MB), "
              f"{args.threads} threads, median of {args.rounds}:")
        for q in tokens:
            series = rewarm_series(_probe_step(target, q > 1, q), draft_pass, args.rounds, args.passes)
            print(f"  {q:3d}-token step: passes " + " ".join(f"{s * 1e3:.3f}" for s in series) + " ms; shares of the gap "
                  + " ".join(f"{g:.2f}" for g in gap_shares(series, warm)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
