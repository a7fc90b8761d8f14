"""Tree files (``--tree-choices`` of the simulator, ``--tree`` of ``hetspec run``): one loader
(:meth:`sim.tree.TokenTree.from_file`) for both, and a tree file never silently changes the width asked."""

from __future__ import annotations

import json

import pytest

from cli_runner import one_line_error
from hetspec.cli import main

A100 = "a100-80gb-pcie"
MEDUSA = ("--model", "vicuna-7b", "--platform", A100, "--method", "medusa", "--acceptance", "medusa-log",
          "--device", "gpu")


@pytest.mark.parametrize("content", ["[]", '{"choices": []}'])
@pytest.mark.parametrize("command", ["predict", "simulate", "run"])
def test_an_empty_tree_list_is_one_line(tmp_path, capsys, command, content):
    path = tmp_path / "tree.json"
    path.write_text(content)
    args = ("--method", "medusa", "--tree", str(path)) if command == "run" else (*MEDUSA, "--tree-choices", str(path))
    one_line_error(capsys, command, *args, match=f"tree file {path}: holds no paths")


def test_an_empty_path_in_a_tree_file_is_one_line(tmp_path, capsys):
    path = tmp_path / "tree.json"
    path.write_text("[[], [0]]")
    one_line_error(capsys, "predict", *MEDUSA, "--tree-choices", str(path), match="an empty path [] is the root")


@pytest.mark.parametrize("command", ["predict", "simulate"])
def test_a_tree_file_and_a_width_together_are_one_line(tmp_path, capsys, command):
    """The file fixes the width: a second width is refused, as ``hetspec run`` refuses --tree with --tree-width."""
    path = tmp_path / "tree.json"
    path.write_text("[[0], [1], [0, 0]]")
    one_line_error(capsys, command, *MEDUSA, "--tree-choices", str(path), "--tree-width", "32",
                   match="give either --tree-choices or --tree-width, not both "
                         "(the tree file fixes the width: 4 tokens)")
    if command == "predict":                                  # the file alone fixes the width
        assert main(["predict", *MEDUSA, "--tree-choices", str(path), "--json", "--no-table"]) == 0
        assert json.loads(capsys.readouterr().out)["best"]["tree_width"] == 4


def test_run_reads_tree_files_with_the_simulator_loader(tmp_path, capsys):
    """Both halves read a tree file through one loader, so one bad file gets one message."""
    path = tmp_path / "tree.json"
    path.write_text(json.dumps({"a": [[0]]}))
    run_line = one_line_error(capsys, "run", "--method", "medusa", "--tree", str(path), match=f"tree file {path}")
    predict_line = one_line_error(capsys, "predict", *MEDUSA, "--tree-choices", str(path), match=f"tree file {path}")
    assert run_line == predict_line and "got a JSON object with keys 'a'" in run_line
