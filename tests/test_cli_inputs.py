"""Bad command-line input to the simulator's commands: one ``hetspec: error:`` line and exit status 2.

The commands run in-process through :func:`hetspec.cli.main` (milliseconds each).
"""

from __future__ import annotations

import json
import os

import pytest

from hetspec.cli import main

A100 = "a100-80gb-pcie"


def one_line_error(capsys, *args: str, match: str) -> str:
    assert main(list(args)) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hetspec: error: "), err
    assert match in lines[0], lines[0]
    return lines[0]


# ---------------------------------------------------------------------- output locations that cannot be written
def _writers(target: str) -> dict[str, tuple[str, ...]]:
    """Every simulator command that writes a file, writing to ``target`` (a file or a folder)."""
    return {
        "simulate": ("simulate", "--model", "tinyllama-1.1b", "--platform", A100, "--method", "ar", "--steps", "2",
                     "--trace", f"{target}/trace.json"),
        "sweep": ("sweep", "--models", "tinyllama-1.1b", "--platforms", A100, "--methods", "ar", "--no-progress",
                  "--out", f"{target}/table.csv"),
    }


@pytest.mark.parametrize("command", ["simulate", "sweep"])
def test_an_output_under_a_file_is_one_line(tmp_path, capsys, command):
    blocker = tmp_path / "somefile"
    blocker.write_text("not a folder")                 # fails for root too
    line = one_line_error(capsys, *_writers(str(blocker / "sub"))[command], match="cannot write")
    assert f"{blocker} is a file, not a folder" in line


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into a read-only folder")
@pytest.mark.parametrize("command", ["simulate", "sweep"])
def test_an_output_in_a_read_only_folder_is_one_line(tmp_path, capsys, command):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        one_line_error(capsys, *_writers(str(folder))[command], match="Permission denied")
    finally:
        folder.chmod(0o700)
