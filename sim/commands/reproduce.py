"""``hetspec reproduce {medusa,ghidorah,dovetail,llmcad,alspec,all}``: paper vs HetSpec reports."""

from __future__ import annotations

import argparse
import json
import time

from hwmodels.datafile import output_folder
from hwmodels.env_folders import REPORTS_DIR_ENV, env_folder
from sim.reproduce import DEFAULT_OUT, paper_names, run
from sim.reproduce.report import write_summary


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("reproduce", help="reproduce the papers' published results with the presets; write reports")
    p.add_argument("paper", choices=(*paper_names(), "all"), help="which paper (or all)")
    p.add_argument("--out", default=None,
                   help=f"output folder (default: $HETSPEC_REPORTS_DIR/papers when set, else {DEFAULT_OUT})")
    p.add_argument("--json", action="store_true", help="print the summaries as JSON")
    p.set_defaults(func=cmd_reproduce)


def cmd_reproduce(args: argparse.Namespace) -> int:
    papers = paper_names() if args.paper == "all" else (args.paper,)
    if args.out is None:
        root = env_folder(REPORTS_DIR_ENV, writable=True)
        args.out = str(root / "papers" if root is not None else DEFAULT_OUT)
    output_folder(args.out, "report folder")    # before the first paper: a folder that cannot be written fails at once
    summaries = []
    for paper in papers:
        start = time.perf_counter()
        if not args.json:
            print(f"reproducing {paper} ...", flush=True)
        report, path = run(paper, args.out)
        summary = report.summary() | {"report": str(path), "seconds": round(time.perf_counter() - start, 2)}
        summaries.append(summary)
        if not args.json:
            med = summary["median_abs_rel_error"]
            med_txt = "n/a" if med is None else f"{100 * med:.1f} %"
            print(f"  {path}: choices reproduced from independent data {summary['choices_reproduced']}/"
                  f"{summary['choices']}, {summary['fit_rows']} fit rows, consistency checks "
                  f"{summary['consistency_matched']}/{summary['consistency_checks']}; {summary['predictions']} "
                  f"predictions, median |error| {med_txt} ({summary['seconds']} s)")
    if args.paper == "all":
        path = write_summary(summaries, args.out)
        if not args.json:
            print(f"  {path}: the three counts of every paper")
    if args.json:
        print(json.dumps(summaries if len(summaries) > 1 else summaries[0], indent=2))
    return 0
