"""The draft passes behind a CPU profile's ``draft_pass_chain`` rows, timed as ``hetspec calibrate`` times them,
beside the same draft's passes in the real chain decode of the trained demo models, interleaved in one process:
does the protocol (random weights, every draft accepted or every draft rejected, set by a logit lift:
:mod:`real.validation.draft_loop`) time what a decode on evaluation prompts runs?

The rounds of the real decode are told apart as the protocol's are: after a round that rejected a draft token,
and after one that accepted all of them (its first pass feeds two tokens). A ratio near 1 says the rows
measure what the decode runs: a prediction that then misses the decode's passes by more owes it to the
machine's speed between the calibration and the run, not to the protocol.

On a machine whose speed swings from one minute to the next, few rounds do not tell a 10 % difference from the
swings (on the 2-core Intel Xeon of docs/validation.md, its cores slowed from outside, runs of 8 rounds gave
ratios of 0.91-1.28 within minutes of each other): take the default 24 or more.

    python -m real.validation.loop_pass_check [--preset small] [--rounds 24] [--threads 2] [--train]
"""

from __future__ import annotations

import argparse
import sys

import torch

from real.run.repeats import median
from real.validation.draft_loop import PASSES, passes_by_round, time_loop_passes
from real.validation.validate import FULL

#: New tokens of each real decode and its prompt's tokens: as ``hetspec validate`` decodes.
NEW_TOKENS = FULL.max_new_tokens
PROMPT_TOKENS = FULL.prompt_tokens
KINDS = ("after a rejection", "after all accepted")


def decode_passes(models, prompt: list[int]) -> dict[str, list[list[float]]]:
    """Seconds of each draft pass of every round of the real chain decode of ``prompt`` (``PASSES`` drafts a
    round) that drafted all of them, by the kind of the round before it (:data:`KINDS`); the first round (after
    the prefill) left out, as the protocol leaves it out."""
    from real.decode import chain
    from real.decode.common import Clock

    clock = Clock()
    result = chain.generate(models, prompt, NEW_TOKENS, chain.ChainConfig(draft_depth=PASSES), clock)
    by_step = passes_by_round(clock)
    out: dict[str, list[list[float]]] = {kind: [] for kind in KINDS}
    for step, times in sorted(by_step.items()):
        if step >= 1 and len(times) == PASSES:
            out[KINDS[result.accepted_per_step[step - 1] == PASSES + 1]].append(times)
    return out


def compare(demo, prompts: list[list[int]], rounds: int) -> dict[str, dict[str, list[list[float]]]]:
    """``{"protocol" | "decode": {kind: [seconds of passes 1..PASSES] per round}}``: ``rounds`` times, in turn,
    the protocol's two kinds of decode on random-weight models of ``demo``'s shapes and the real chain decode
    of the trained ``demo`` models on the next of ``prompts``."""
    from real.decode.common import DecodeModels
    from real.model.transformer import Transformer

    torch.manual_seed(0)
    random = DecodeModels(Transformer(demo.target.spec).eval(), Transformer(demo.draft.spec).eval())
    trained = DecodeModels(demo.target.eval(), demo.draft.eval())
    got = {side: {kind: [] for kind in KINDS} for side in ("protocol", "decode")}
    with torch.inference_mode():
        decode_passes(trained, prompts[0])                                 # allocations, first calls
        for i in range(rounds):
            for kind, full in zip(KINDS, (False, True)):
                got["protocol"][kind] += [times for _, times in time_loop_passes(random, "chain", full, 1)]
            for kind, times in decode_passes(trained, prompts[i % len(prompts)]).items():
                got["decode"][kind] += times
    return got


def table_lines(got, name: str) -> list[str]:
    """The medians by pass index of :func:`compare`'s result, and the decode-to-protocol ratio per kind."""
    lines = [f"{name} passes inside the chain decode loop, ms by pass of a round (median over rounds; the real "
             "decode on evaluation prompts):",
             f"  {'':<38}" + "".join(f"{j + 1:>7}" for j in range(PASSES)) + "  rounds"]
    ratios = {}
    for kind in KINDS:
        meds = {}
        for side, label in (("protocol", "calibrate's probe"), ("decode", "real decode")):
            rows = got[side][kind]
            if rows:
                meds[side] = [median([r[j] for r in rows]) for j in range(PASSES)]
                lines.append(f"  {label + ', ' + kind:<38}" + "".join(f"{1e3 * t:>7.2f}" for t in meds[side])
                             + f"  {len(rows):>6}")
        if len(meds) == 2:
            ratios[kind] = median([d / p for d, p in zip(meds["decode"], meds["protocol"])])
    lines.append("  real decode / probe (median over pass indices): "
                 + (", ".join(f"{kind} {r:.3f}" for kind, r in ratios.items()) or "no round of both kinds"))
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m real.validation.loop_pass_check``: the draft-pass probe beside the real chain decode."""
    from hwmodels.errors import HetSpecError
    from real.train.corpus import prompts as corpus_prompts
    from real.train.demo import load_demo
    from real.validation.microbench import torch_threads

    parser = argparse.ArgumentParser(prog="python -m real.validation.loop_pass_check",
                                     description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--preset", default="small", help="the cached demo preset (default small)")
    parser.add_argument("--rounds", type=int, default=24, help="turns of the three decodes (default 24)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--train", action="store_true", help="train the demo models first if they are not cached")
    args = parser.parse_args(argv)
    try:
        if min(args.rounds, args.threads) < 1:
            raise HetSpecError("--rounds and --threads must be at least 1")
        demo = load_demo(args.preset, train=args.train, progress=args.train)
        prompts = [list(p) for p in corpus_prompts(demo.tokenizer, "evaluation", args.rounds, PROMPT_TOKENS, seed=0)]
        with torch_threads(args.threads):
            got = compare(demo, prompts, args.rounds)
    except HetSpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    threads = f"{args.threads} torch thread" + ("s" if args.threads > 1 else "")
    print("\n".join(table_lines(got, f"{demo.draft.spec.name} ({threads})")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
