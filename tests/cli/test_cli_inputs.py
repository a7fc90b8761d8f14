"""Bad command-line input to the simulator's commands: one ``hetspec: error:`` line and exit status 2.

The commands run in-process through :func:`hetspec.cli.main` (milliseconds each).
"""

from __future__ import annotations

import json
import os

import pytest

from cli_runner import one_line_error
from hetspec.cli import main

A100 = "a100-80gb-pcie"




# ---------------------------------------------------------------------- output locations that cannot be written
def _writers(target: str) -> dict[str, tuple[str, ...]]:
    """Every simulator command that writes a file, writing to ``target`` (a file or a folder)."""
    return {
        "simulate": ("simulate", "--model", "tinyllama-1.1b", "--platform", A100, "--method", "ar", "--steps", "2",
                     "--trace", f"{target}/trace.json"),
        "sweep": ("sweep", "--models", "tinyllama-1.1b", "--platforms", A100, "--methods", "ar", "--no-progress",
                  "--out", f"{target}/table.csv"),
        "reproduce": ("reproduce", "medusa", "--out", f"{target}/reports"),
    }


@pytest.mark.parametrize("command", ["simulate", "sweep", "reproduce"])
def test_an_output_under_a_file_is_one_line(tmp_path, capsys, command):
    blocker = tmp_path / "somefile"
    blocker.write_text("not a folder")                 # fails for root too
    line = one_line_error(capsys, *_writers(str(blocker / "sub"))[command], match="cannot write")
    assert f"{blocker} is a file, not a folder" in line


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into a read-only folder")
@pytest.mark.parametrize("command", ["simulate", "sweep", "reproduce"])
def test_an_output_in_a_read_only_folder_is_one_line(tmp_path, capsys, command):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        one_line_error(capsys, *_writers(str(folder))[command], match="Permission denied")
    finally:
        folder.chmod(0o700)


def _library_writers():
    """The functions behind the other commands' outputs (calibrate, profile-acceptance, validate)."""
    from hwmodels.loader import get_platform, write_platform_file
    from sim.acceptance_profile import AcceptanceProfile

    profile = AcceptanceProfile(name="p", source="test")
    return {
        "platform file": lambda target: write_platform_file(get_platform(A100), target / "host.toml"),
        "acceptance profile": lambda target: profile.save(target / "profile.json"),
        "validation report": lambda target: __import__("real.validation.report", fromlist=["write_report"])
        .write_report({}, target / "report"),
    }


@pytest.mark.parametrize("what", ["platform file", "acceptance profile", "validation report"])
def test_library_writers_name_a_location_that_cannot_be_written(tmp_path, what):
    from hwmodels.errors import HetSpecError

    blocker = tmp_path / "somefile"
    blocker.write_text("not a folder")
    with pytest.raises(HetSpecError, match=f"cannot write .*{blocker} is a file, not a folder"):
        _library_writers()[what](blocker / "sub")


# ---------------------------------------------------------------------- --tree-choices files
MEDUSA = ("--model", "vicuna-7b", "--platform", A100, "--method", "medusa", "--acceptance", "medusa-log",
          "--device", "gpu")


@pytest.mark.parametrize("content, match", [
    ('{"a": [[0]]}', "got a JSON object with keys 'a'"),
    ('{"choices": {"x": 1}}', "got a JSON object with keys 'x'"),
    ('"[[0]]"', "got str"),
    ('[[0], [1, "x"]]', "[1, 'x'] is not one"),
    ('[[0], 3]', "3 is not one"),
    ('[[0], [-1]]', "[-1] is not one"),
    ('[[0], [1, 1]]', "has no parent path [1]"),
])
@pytest.mark.parametrize("command", ["predict", "simulate"])
def test_tree_choices_that_are_not_a_list_of_paths_are_one_line(tmp_path, capsys, command, content, match):
    path = tmp_path / "tree.json"
    path.write_text(content)
    line = one_line_error(capsys, command, *MEDUSA, "--tree-choices", str(path), match=match)
    assert f"tree file {path}" in line


def test_tree_choices_may_be_an_object_with_a_choices_list(tmp_path, capsys):
    path = tmp_path / "tree.json"
    path.write_text('{"choices": [[0], [1], [0, 0]]}')         # the form `hetspec run --tree` reads too
    assert main(["predict", *MEDUSA, "--tree-choices", str(path), "--json", "--no-table"]) == 0
    assert json.loads(capsys.readouterr().out)["best"]["tree_width"] == 4


# ---------------------------------------------------------------------- counts and positions
STEP = ("step", "--model", "vicuna-7b", "--platform", A100)


@pytest.mark.parametrize("args, match", [
    (("--tokens", "100000000000", "--context", "10"),
     "--context 10 + --tokens 100000000000 = 100000000010 positions exceed model vicuna-7b's max_position 4096"),
    (("--tokens", "1", "--context", "100000"), "--context 100000 + --tokens 1 = 100001 positions exceed"),
    (("--tokens", "0", "--context", "10"), "--tokens must be >= 1 (got 0)"),
    (("--tokens", "1", "--context", "-1"), "--context must be >= 0 (got -1)"),
    (("--tokens", "1", "--context", "1", "--batch", "0"), "--batch must be >= 1 (got 0)"),
])
def test_step_bounds_its_numbers(capsys, args, match):
    one_line_error(capsys, *STEP, *args, match=match)


def test_step_columns_never_run_together(capsys):
    assert main([*STEP, "--tokens", "4095", "--context", "1", "--batch", "100000000000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header, ops = lines[1].split(), [line.split() for line in lines[2:-1]]
    assert header == ["operator", "weights", "x", "GFLOP", "MB", "FLOP/B", "time", "ms", "bound"]
    assert ops and all(len(op) == 8 for op in ops), ops          # 8 values, one space at least between them
    assert len(lines[-1].split()) == 4                            # total, GFLOP, MB, time


@pytest.mark.parametrize("command", ["predict", "simulate"])
def test_a_context_beyond_the_model_is_one_line(capsys, command):
    one_line_error(capsys, command, "--model", "vicuna-7b", "--platform", A100, "--method", "ar",
                   "--context", "4096", match="--context 4096 + new tokens 1 = 4097 positions exceed")


@pytest.mark.parametrize("args, match", [
    (("predict", "--top", "-1"), "--top must be >= 1 (got -1)"),
    (("predict", "--top", "0"), "--top must be >= 1 (got 0)"),
    (("simulate", "--steps", "0"), "--steps must be in [1, 10000] (got 0)"),
])
def test_counts_below_one_are_one_line(capsys, args, match):
    one_line_error(capsys, args[0], "--model", "vicuna-7b", "--platform", A100, "--method", "ar", *args[1:],
                   match=match)


def test_sweep_workers_below_one_is_one_line(tmp_path, capsys):
    one_line_error(capsys, "sweep", "--models", "vicuna-7b", "--platforms", A100, "--methods", "ar",
                   "--workers", "0", "--out", str(tmp_path / "t.csv"), match="--workers must be >= 1 (got 0)")


# ---------------------------------------------------------------------- an error while a progress bar runs
def test_an_error_under_a_progress_bar_gets_a_line_of_its_own(monkeypatch, capsys):
    import argparse
    import gc
    import sys

    from tqdm.auto import tqdm

    import hetspec.cli as cli
    from hwmodels.errors import HetSpecError

    bars = []

    def measuring(_args):
        bars.append(tqdm(total=10, desc="measuring", file=sys.stderr))
        bars[-1].update(3)
        raise HetSpecError("the cores went away")

    def parser():
        p = argparse.ArgumentParser(prog="hetspec")
        p.add_subparsers().add_parser("measure").set_defaults(func=measuring)
        return p

    monkeypatch.setattr(cli, "build_parser", parser)
    assert main(["measure"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "hetspec: error: the cores went away"
    assert "measuring" in err and err.count("hetspec: error") == 1
    bars.clear()
    gc.collect()                                # the bar, collected, does not draw itself after the error
    assert capsys.readouterr().err == ""
