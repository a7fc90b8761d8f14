"""Folders the tests read (imported by the tests; ``tests/`` is on ``sys.path`` through its conftest)."""

from __future__ import annotations

from pathlib import Path

#: The repository root.
REPO = Path(__file__).resolve().parents[1]
#: Committed test inputs (platform files, profiles, measured traces).
DATA = REPO / "tests" / "data"
