"""``hetspec profile-acceptance``: measure the demo models' acceptance profile on calibration prompts."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "profile-acceptance", help="measure Medusa head accuracies and draft acceptance on calibration prompts",
        description="Measure, on calibration prompts of the demo corpus, the Medusa heads' per-depth x "
                    "per-rank accuracies, the draft's per-token acceptance (overall and by confidence) "
                    "and the acceptance length of greedy Medusa trees of widths 1..64; write an "
                    "acceptance-profile JSON for the simulator.")
    p.add_argument("--preset", default="tiny", help="demo model preset: tiny or small (default tiny)")
    p.add_argument("--out", required=True, metavar="FILE", help="profile JSON to write")
    p.add_argument("--prompts", type=int, default=16, help="calibration prompts (default 16)")
    p.add_argument("--prompt-tokens", type=int, default=64, help="tokens per prompt (default 64)")
    p.add_argument("--max-new-tokens", type=int, default=64,
                   help="greedy target tokens scored per prompt (default 64)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from real.run_request import check_profile_args

    check_profile_args(args.out, args.prompts, args.prompt_tokens, args.max_new_tokens)
    from real.run import profile_demo

    profile = profile_demo(args.preset, args.out, args.prompts, args.prompt_tokens, args.max_new_tokens)
    print(f"wrote {args.out}: {profile.name}, {profile.meta.get('positions', 0)} positions")
    if profile.medusa_accuracy is not None:
        top1 = ", ".join(f"{row[0]:.3f}" for row in profile.medusa_accuracy)
        print(f"  medusa top-1 accuracy by head   {top1}")
        widths = [w for w in (1, 4, 8, 16, 32, 64) if w in (profile.acceptance_length or {})]
        lengths = ", ".join(f"{w}: {profile.acceptance_length[w]:.2f}" for w in widths)
        print(f"  tokens/step by width            {lengths}")
    if profile.draft_alpha is not None:
        print(f"  draft per-token acceptance      {profile.draft_alpha:.3f}")
    return 0
