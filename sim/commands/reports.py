"""``hetspec reports index [--root DIR] [--check]``: the index of the committed run records."""

from __future__ import annotations

import argparse
import sys

from sim.records.index import DEFAULT_ROOT, INDEX_FILE, index_is_current, write_index


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("reports", help="the committed run records: regenerate their index")
    inner = p.add_subparsers(dest="reports_command", metavar="ACTION", required=True)
    idx = inner.add_parser("index", help=f"write {DEFAULT_ROOT}/{INDEX_FILE} from every run folder's "
                                         "results.json and machine.json")
    idx.add_argument("--root", default=str(DEFAULT_ROOT), help=f"the run folders' root (default {DEFAULT_ROOT})")
    idx.add_argument("--check", action="store_true",
                     help="write nothing; exit 1 when the index is not what the folders give")
    idx.set_defaults(func=cmd_index)


def cmd_index(args: argparse.Namespace) -> int:
    if args.check:
        if index_is_current(args.root):
            print(f"{args.root}/{INDEX_FILE} is current")
            return 0
        print(f"hetspec: {args.root}/{INDEX_FILE} is out of date: run `hetspec reports index --root {args.root}`",
              file=sys.stderr)
        return 1
    path = write_index(args.root)
    print(f"wrote {path}")
    return 0
