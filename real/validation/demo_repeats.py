"""The main job's acceptance run: ``hetspec demo`` several times in a row, each from nothing (a fresh demo cache,
platforms folder and report folder), optionally with one core held busy, gathered into one run record.

``python -m real.validation.demo_repeats --runs 5 --out DIR [--busy-core]`` runs the demo as a user would (the
CLI in a subprocess), and writes into ``DIR``: each run's report folder (``run-1/`` ...), its printed output
(``run-N.txt``), and ``results.json`` and ``report.md`` with, per run, the exit status, the wall time, every
method's predicted best configuration and the verdict's headline; and whether the predicted best of each method
agrees across the runs, or differs only between configurations predicted within :data:`SAME_WITHIN` of each
other (each run's best looked up in the other run's ranking).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from hwmodels import atomic_files
from sim.records import write_machine_json

#: Two predicted best configurations count as the same answer when each predicts the other within this share.
SAME_WITHIN = 0.02
#: Wall-time bounds of one demo run (seconds): quiet, and with one core held busy.
WALL_BOUND_S = {False: 360.0, True: 540.0}
SPECULATIVE = ("chain", "draft-tree", "medusa")


def run_once(index: int, out: Path, busy: bool, timeout_s: float) -> dict:
    """One ``hetspec demo`` from nothing; its exit status, wall time, predictions and record."""
    scratch = Path(tempfile.mkdtemp(prefix=f"hetspec-demo-{index}-"))
    env = {**os.environ, "HETSPEC_CACHE_DIR": str(scratch / "cache"),
           "HETSPEC_PLATFORMS_DIR": str(scratch / "platforms"), "HETSPEC_REPORTS_DIR": str(scratch / "reports")}
    folder = out / f"run-{index}"
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "hetspec", "demo", "--out", str(folder)], env=env,
                              capture_output=True, text=True, timeout=timeout_s)
        status, text = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        status, text = None, f"{exc.stdout or ''}{exc.stderr or ''}\nstopped after {timeout_s:.0f} s"
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    wall = time.perf_counter() - start
    atomic_files.write_text(out / f"run-{index}.txt", text if isinstance(text, str) else text.decode())
    row = {"run": index, "exit_status": status, "wall_s": round(wall, 1), "busy_core": busy}
    if (folder / "predictions.json").is_file():
        row["predictions"] = json.loads((folder / "predictions.json").read_text())
    if (folder / "results.json").is_file():
        row["record"] = json.loads((folder / "results.json").read_text()).get("record")
    return row


def _best(row: dict, method: str) -> dict | None:
    for p in row.get("predictions", ()):
        if p.get("method") == method and "error" not in p:
            return p
    return None


def _predicted(row: dict, method: str, config: tuple[int, int]) -> float | None:
    """The tokens/s ``row``'s prediction gives ``config`` (width, depth), if it ranks among its kept rows."""
    best = _best(row, method)
    for r in (best or {}).get("top", ()):
        if (r["tree_width"], r["draft_depth"]) == config:
            return r["tokens_per_s"]
    return None


def agreement(rows: list[dict]) -> dict[str, dict]:
    """Per method: the predicted best (width, depth) of each run, and whether they agree (or differ only between
    configurations each run predicts within :data:`SAME_WITHIN` of its own best)."""
    out = {}
    for method in ("ar", *SPECULATIVE):
        bests = [(b["tree_width"], b["draft_depth"]) if (b := _best(r, method)) else None for r in rows]
        ok = all(b is not None for b in bests)
        if ok:
            for row, own in zip(rows, bests):
                top = _best(row, method)["tokens_per_s"]
                for other in set(bests) - {own}:
                    value = _predicted(row, method, other)
                    ok = ok and value is not None and value >= (1.0 - SAME_WITHIN) * top
        out[method] = {"bests": [list(b) if b else None for b in bests], "agrees": ok}
    return out


def _headline(record: dict | None) -> str:
    return (record or {}).get("verdict", "no record")


def summarize(rows: list[dict], busy: bool) -> dict:
    bound = WALL_BOUND_S[busy]
    agree = agreement(rows)
    ran = [r for r in rows if r["exit_status"] == 0]
    within = [r for r in ran if r["wall_s"] <= bound]
    headline = {"runs": len(rows), "exit 0": len(ran), f"within {bound:.0f} s": len(within),
                "median wall s": sorted(r["wall_s"] for r in rows)[len(rows) // 2]}
    headline |= {f"{m} best agrees": agree[m]["agrees"] for m in SPECULATIVE}
    verdict = (f"{len(ran)} of {len(rows)} runs exited 0, {len(within)} within {bound:.0f} s"
               + ("; one core held busy" if busy else "") + "; predicted best "
               + ("agrees across runs for every method" if all(a["agrees"] for a in agree.values())
                  else "differs for " + ", ".join(m for m, a in agree.items() if not a["agrees"])))
    return {"format": "hetspec-demo-repeats/1", "busy_core": busy, "wall_bound_s": bound, "same_within": SAME_WITHIN,
            "runs": rows, "agreement": agree, "record": {"kind": "demo", "headline": headline, "verdict": verdict}}


def report(doc: dict, command: str) -> str:
    lines = ["# `hetspec demo`, repeated from nothing", "",
             f"Generated by `{command}`; do not edit. Each run had a fresh demo cache, platforms folder and report "
             "folder" + (", and one core held busy by `python -c \"while True: pass\"`" if doc["busy_core"] else "")
             + ".", "", f"**{doc['record']['verdict']}.**", "",
             "| run | exit | wall s | chain best | draft-tree best | medusa best | verdict headline |",
             "|---:|---:|---:|---|---|---|---|"]
    for r in doc["runs"]:
        bests = []
        for m in SPECULATIVE:
            b = _best(r, m)
            bests.append(f"w={b['tree_width']} d={b['draft_depth']} ({b['tokens_per_s']:.0f} tok/s)" if b else "—")
        lines.append(f"| {r['run']} | {r['exit_status']} | {r['wall_s']:.0f} | " + " | ".join(bests)
                     + f" | {_headline(r.get('record')).replace('|', '/')} |")
    lines += ["", "Agreement of the predicted best across runs (width, depth per run): "
              + "; ".join(f"{m}: {'agrees' if a['agrees'] else 'differs'} {a['bests']}"
                          for m, a in doc["agreement"].items()), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m real.validation.demo_repeats", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="demo runs in a row (default 5)")
    parser.add_argument("--out", type=Path, required=True, help="the run record's folder")
    parser.add_argument("--busy-core", action="store_true", help="hold one core busy during every run")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds after which a run is stopped")
    args = parser.parse_args(argv)
    if args.runs < 1:
        print("demo_repeats: --runs must be at least 1", file=sys.stderr)
        return 2
    command = "python -m real.validation.demo_repeats " + " ".join(argv if argv is not None else sys.argv[1:])
    started = datetime.now(timezone.utc)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(1, args.runs + 1):
        print(f"run {i} of {args.runs} ...", file=sys.stderr, flush=True)
        rows.append(run_once(i, args.out, args.busy_core, args.timeout))
        print(f"  exit {rows[-1]['exit_status']} in {rows[-1]['wall_s']:.0f} s: {_headline(rows[-1].get('record'))}",
              file=sys.stderr, flush=True)
    doc = summarize(rows, args.busy_core)
    atomic_files.write_text(args.out / "results.json", json.dumps(doc, indent=1) + "\n")
    atomic_files.write_text(args.out / "report.md", report(doc, command))
    write_machine_json(args.out, command=command, started=started)
    print(doc["record"]["verdict"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
