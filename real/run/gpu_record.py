"""The run record of ``scripts/gpu_report.sh``: ``results.json`` (each step's file and exit status, the quick
validation's headline when it ran) and ``machine.json`` (the host, and the GPU as torch sees it).

Run by the script as its last step: ``python -m real.run.gpu_record OUT_DIR --started ISO_TIME``.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

from hwmodels import atomic_files
from real.model.placement import gpu_facts
from sim.records import RESULTS_FILE, write_machine_json

SPECULATIVE = ("chain", "draft-tree", "medusa")


def step_status(path: Path) -> int | None:
    """The exit status the script appended to a step's file (``exit status N``), ``None`` if absent."""
    lines = path.read_text(errors="replace").strip().splitlines()
    if lines and lines[-1].startswith("exit status "):
        return int(lines[-1].split()[-1])
    return None


def build_results(out: Path) -> dict:
    steps = []
    for path in sorted(out.glob("*.txt")):
        if path.name in ("machine.txt", "skipped.txt"):
            continue
        steps.append({"file": path.name, "exit_status": step_status(path)})
    skipped = (out / "skipped.txt").read_text().splitlines() if (out / "skipped.txt").is_file() else []
    failed = [s["file"] for s in steps if s["exit_status"] not in (0, None)]
    headline: dict = {"steps run": len(steps), "steps skipped": len(skipped), "steps failed": len(failed)}
    validation = out / "validation" / RESULTS_FILE
    if validation.is_file():
        methods = {m["method"]: m for m in json.loads(validation.read_text()).get("methods", [])}
        for name in SPECULATIVE:
            if name in methods:
                headline[f"{name} step err %"] = round(100 * methods[name]["median_step_error"], 1)
                headline[f"{name} regret %"] = round(100 * methods[name]["regret"], 1)
    verdict = (f"{len(steps)} steps ran, {len(failed)} failed ({', '.join(failed)})" if failed
               else f"{len(steps)} steps ran, none failed")
    if skipped:
        verdict += f"; {len(skipped)} skipped for time (skipped.txt)"
    return {"format": "hetspec-gpu-report/1", "steps": steps, "skipped": skipped,
            "record": {"kind": "gpu-report", "headline": headline, "verdict": verdict}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m real.run.gpu_record", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the script's output folder")
    parser.add_argument("--started", required=True, help="when the script started (ISO 8601, with its zone)")
    args = parser.parse_args(argv)
    if not args.out.is_dir():
        print(f"gpu_record: no folder {args.out}", file=sys.stderr)
        return 2
    started = datetime.fromisoformat(args.started)
    atomic_files.write_text(args.out / RESULTS_FILE, json.dumps(build_results(args.out), indent=2) + "\n")
    write_machine_json(args.out, command="bash scripts/gpu_report.sh " + " ".join(sys.argv[2:3]), started=started,
                       extra={"gpu": gpu_facts()})
    print(f"wrote {args.out / RESULTS_FILE} and {args.out / 'machine.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
