"""``hetspec train-demo``: train (or reuse) the demo models of a preset and print their summary."""

from __future__ import annotations

import argparse
import json


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train-demo", help="train the demo models on the Python standard library (cached)",
        description="Train the demo target, draft and Medusa heads of a preset on this Python's "
                    "standard library, or reuse them from the cache ($HETSPEC_CACHE_DIR/demo/<preset>, "
                    "default: the per-user cache folder), then print the cache folder and the summary.")
    p.add_argument("--preset", default="small", help="demo preset: tiny or small (default small)")
    p.add_argument("--force", action="store_true", help="retrain even when the cache is valid")
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

    get_recipe(args.preset)  # an unknown preset fails before torch starts any work
    demo = load_demo(args.preset, force=args.force, progress=True)
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
