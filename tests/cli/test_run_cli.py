"""``hetspec run`` and ``hetspec profile-acceptance`` from a subprocess: bad values exit 2 with one line."""

from __future__ import annotations

import pytest
from cli_runner import run_cli


@pytest.mark.parametrize("args,message", [
    (["run", "--method", "beam"], "unknown method 'beam'; valid: alspec, ar, chain, dovetail, draft-tree, hcmp, medusa"),
    (["run", "--method", "medusa", "--width", "0"], "--tree-width must be >= 1, got 0"),
    (["run", "--method", "draft-tree", "--width", "1"], "draft-tree needs --tree-width >= 2"),
    (["run", "--method", "chain", "--gamma", "0"], "--draft-depth must be >= 1, got 0"),
    (["run", "--method", "ar", "--temperature", "-0.5"], "temperature must be >= 0, got -0.5"),
    (["run", "--method", "ar", "--top-p", "1.5"], "top-p must be in (0, 1], got 1.5"),
    (["run", "--method", "ar", "--prompts", "0"], "--prompts must be >= 1, got 0"),
    (["run", "--method", "ar", "--max-new-tokens", "0"], "--max-new-tokens must be >= 1, got 0"),
    (["run", "--method", "chain", "--width", "3"], "--tree-width does not apply to method chain"),
    (["run", "--method", "ar", "--width", "4"], "--tree-width does not apply to method ar"),
    (["run", "--method", "draft-tree", "--temperature", "0.7"], "draft-tree verifies greedily"),
    (["run", "--method", "medusa", "--tree", "/no/such/tree.json"], "tree file /no/such/tree.json does not exist"),
    (["run", "--method", "ar", "--trace", "out.txt"], "suffix must be .csv, .jsonl or .json"),
    (["run"], "give exactly one of --method M or --compare M1,M2,..."),
    (["run", "--compare", "ar"], "--compare needs at least two methods"),
    (["run", "--compare", "ar,beam"], "unknown method 'beam'"),
    (["profile-acceptance", "--out", "profile.txt"], "an acceptance profile is a .json file"),
    (["profile-acceptance", "--out", "p.json", "--max-new-tokens", "1"], "--max-new-tokens must be >= 2, got 1"),
    (["profile-acceptance", "--out", "p.json", "--draft-tree-widths", "1,8"], "tree budgets must be >= 2"),
    (["profile-acceptance", "--out", "p.json", "--draft-tree-widths", "8,x"], "give tree budgets or ranges LOW-HIGH separated by commas"),
])
def test_bad_values_fail_with_one_clear_line(args, message):
    proc = run_cli(*args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"hetspec: error: {message}"] or (len(lines) == 1 and message in lines[0])
    assert "Traceback" not in proc.stderr


def test_bad_tree_file_names_the_problem(tmp_path):
    bad = tmp_path / "tree.json"
    bad.write_text("[[0], [1, 1]]")
    proc = run_cli("run", "--method", "medusa", "--tree", str(bad))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"hetspec: error: tree file {bad}: tree choice [1, 1] has no parent path [1] in the list"
    bad.write_text("{not json")
    proc = run_cli("run", "--method", "medusa", "--tree", str(bad))
    assert proc.returncode == 2 and "not valid JSON" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_command_modules_and_validation_do_not_import_torch():
    import subprocess
    import sys

    from cli_runner import REPO

    code = ("import sys; import real.run.commands, real.run.request; "
            "real.run.request.RunRequest('medusa', tree_width=8); assert 'torch' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
