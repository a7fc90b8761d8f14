"""Run the ``hetspec`` CLI in a subprocess, as a user would (imported by the tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m hetspec ARGS`` from the repository root; returns the completed process."""
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), full_env.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "hetspec", *args], capture_output=True, text=True,
                          cwd=REPO, env=full_env, timeout=timeout)


def one_line_error(capsys, *args: str, match: str) -> str:
    """The CLI entry point in-process (fast): exit status 2 and one ``hetspec: error:`` line containing
    ``match``; returns the line."""
    from hetspec.cli import main

    assert main(list(args)) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hetspec: error: "), err
    assert match in lines[0], lines[0]
    return lines[0]
