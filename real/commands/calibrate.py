"""``hetspec calibrate``: micro-benchmark this machine and write the ``host`` platform."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "calibrate", help="measure this machine (torch micro-benchmarks) and write the host platform",
        description="Measure this machine with torch micro-benchmarks: GEMM FLOP/s against the token count "
                    "(weights in the cache and streamed from DRAM), stream bandwidth beyond and inside the "
                    "last-level cache, the real path's fixed cost per operator, 1 thread vs all threads, and "
                    "two workers streaming at once. Writes a platform file (every number with the measurement "
                    "as its source) so that --platform host works afterwards.")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="platform file to write (default: host.toml in $HETSPEC_PLATFORMS_DIR or the user "
                        "platform folder)")
    p.add_argument("--quick", action="store_true", help="fewer sizes and repeats (about 20 s instead of 1-2 min)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from hwmodels.errors import HetSpecError

    if args.out is not None and not args.out.endswith(".toml"):
        raise HetSpecError(f"--out {args.out}: a platform file ends in .toml")
    from real.calibrate import calibrate, raw_path, summary_lines

    platform, path, cal = calibrate(args.out, quick=args.quick, progress=True)
    for line in summary_lines(platform, cal):
        print(line)
    print(f"wrote {path} (measurements: {raw_path(path)})")
    return 0
