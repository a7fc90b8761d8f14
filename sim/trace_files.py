"""Trace files of :class:`sim.trace.TraceRecord`: ``.csv`` (one row per record), ``.jsonl`` (one JSON object per
line) and ``.json`` (Chrome trace-event format: open it in chrome://tracing or https://ui.perfetto.dev to look
at a step), chosen by the suffix; ``hetspec simulate --trace`` and ``hetspec run --trace`` write them."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path

from hwmodels.atomic_files import atomic_write, write_text
from hwmodels.datafile import output_path, writing
from hwmodels.errors import HetSpecError
from sim.trace import TRACE_COLUMNS, TraceRecord


def write_trace(records: Iterable[TraceRecord], path: str | Path) -> Path:
    """Write records as ``.csv``, ``.jsonl`` or Chrome-trace ``.json`` (chosen by the suffix)."""
    path = check_trace_path(path)
    records = list(records)
    suffix = path.suffix.lower()
    with writing(path, "trace file"):
        _write_records(records, path, suffix)
    return path


def check_trace_path(path: str | Path) -> Path:
    """``path`` checked before a run: a trace suffix, and a place that can be written (one line otherwise)."""
    path = Path(path)
    if path.suffix.lower() not in (".csv", ".jsonl", ".json"):
        raise HetSpecError(f"trace file {path}: suffix must be .csv, .jsonl or .json (Chrome trace)")
    return output_path(path, "trace file")


def _write_records(records: list[TraceRecord], path: Path, suffix: str) -> None:
    if suffix == ".csv":
        with atomic_write(path, newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=TRACE_COLUMNS)
            writer.writeheader()
            writer.writerows(asdict(r) for r in records)
    elif suffix == ".jsonl":
        with atomic_write(path) as fh:
            for r in records:
                fh.write(json.dumps(asdict(r)) + "\n")
    else:
        write_text(path, json.dumps(to_chrome_trace(records), indent=1))


def read_trace(path: str | Path) -> list[TraceRecord]:
    """Read a ``.csv`` or ``.jsonl`` trace written by :func:`write_trace`."""
    path = Path(path)
    if not path.exists():
        raise HetSpecError(f"trace file {path} does not exist")
    if path.suffix.lower() == ".csv":
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    elif path.suffix.lower() == ".jsonl":
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    else:
        raise HetSpecError(f"trace file {path}: can read .csv or .jsonl")
    return [_record_from_row(row, path, i) for i, row in enumerate(rows)]


def _record_from_row(row: dict, path: Path, index: int) -> TraceRecord:
    missing = [c for c in TRACE_COLUMNS if c not in row]
    if missing:
        raise HetSpecError(f"trace file {path}: row {index}: missing column {missing[0]}")
    try:
        return TraceRecord(
            step=int(row["step"]), phase=str(row["phase"]), device=str(row["device"]),
            start_s=float(row["start_s"]), end_s=float(row["end_s"]),
            tokens_proposed=int(row["tokens_proposed"]), tokens_accepted=int(row["tokens_accepted"]),
            op=str(row["op"] or ""),
        )
    except (TypeError, ValueError) as exc:
        raise HetSpecError(f"trace file {path}: row {index}: {exc}") from None


def to_chrome_trace(records: Sequence[TraceRecord]) -> dict:
    """Chrome trace-event JSON: one complete event ("ph": "X") per record, one row per device."""
    devices = sorted({r.device for r in records})
    tid = {d: i for i, d in enumerate(devices)}
    events = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": tid[d], "args": {"name": d}} for d in devices]
    for r in records:
        events.append({
            "name": r.op or r.phase, "cat": r.phase, "ph": "X", "pid": 0, "tid": tid[r.device],
            "ts": r.start_s * 1e6, "dur": r.duration_s * 1e6,
            "args": {"step": r.step, "tokens_proposed": r.tokens_proposed, "tokens_accepted": r.tokens_accepted},
        })
    return {"traceEvents": events, "displayTimeUnit": "ms"}
