"""Folders named by environment variables: a file, a folder under a file or a folder that cannot be
written is one line naming the variable (hwmodels.env_folders), and every command honours them."""

from __future__ import annotations

import os

import pytest

from cli_runner import one_line_error
from hetspec.cli import main

A100 = "a100-80gb-pcie"


@pytest.mark.parametrize("under", [False, True])
@pytest.mark.parametrize("variable, command", [
    ("HETSPEC_CACHE_DIR", ("run", "--method", "ar")),
    ("HETSPEC_CACHE_DIR", ("train-demo", "--preset", "tiny")),
    ("HETSPEC_PLATFORMS_DIR", ("platforms",)),
    ("HETSPEC_PLATFORMS_DIR", ("predict", "--model", "vicuna-7b", "--platform", A100, "--method", "ar")),
    ("HETSPEC_REPORTS_DIR", ("reproduce", "medusa")),
])
def test_a_variable_naming_a_file_is_one_line(tmp_path, monkeypatch, capsys, variable, command, under):
    blocker = tmp_path / "somefile"
    blocker.write_text("not a folder")
    value = blocker / "sub" if under else blocker
    monkeypatch.setenv(variable, str(value))
    line = one_line_error(capsys, *command, match=f"{variable}={value} must name a folder")
    assert ("it is a file" if not under else f"{blocker} is a file") in line


@pytest.mark.parametrize("variable, command", [
    ("HETSPEC_CACHE_DIR", ("run", "--method", "ar")),
    ("HETSPEC_REPORTS_DIR", ("reproduce", "medusa")),
])
def test_a_variable_naming_a_folder_that_cannot_be_written_is_one_line(tmp_path, monkeypatch, capsys, variable,
                                                                        command):
    from hwmodels import env_folders

    folder = tmp_path / "ro"
    folder.mkdir()
    if hasattr(os, "geteuid") and os.geteuid() == 0:           # root writes anywhere: refuse as a user is refused
        monkeypatch.setattr(env_folders.os, "access", lambda path, mode: False)
    else:
        folder.chmod(0o500)
    monkeypatch.setenv(variable, str(folder / "cache"))
    try:
        one_line_error(capsys, *command, match=f"{variable}={folder / 'cache'}: cannot write there ({folder}: "
                                              "Permission denied)")
    finally:
        folder.chmod(0o700)


def test_reproduce_without_out_writes_under_the_reports_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HETSPEC_REPORTS_DIR", str(tmp_path / "reports"))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    assert main(["reproduce", "medusa", "--json"]) == 0
    assert (tmp_path / "reports" / "papers" / "medusa.md").is_file()
    assert not (tmp_path / "cwd" / "reports").exists()


def test_a_user_platform_file_named_like_a_preset_warns(tmp_path, monkeypatch, capsys):
    """The preset keeps its name (a table stays comparable); the hidden user file is named on stderr."""
    from hwmodels.loader import builtin_preset_dir

    (tmp_path / f"{A100}.toml").write_text((builtin_preset_dir() / f"{A100}.toml").read_text())
    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", str(tmp_path))
    assert main(["predict", "--model", "vicuna-7b", "--platform", A100, "--method", "ar", "--json"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"hetspec: warning: {tmp_path / (A100 + '.toml')} is named like the built-in platform preset "
                   f"'{A100}', which is used; rename the file (e.g. {A100}-mine.toml) to use it"]
    assert main(["platforms"]) == 0
    assert f"{tmp_path / (A100 + '.toml')} is named like the built-in platform preset" in capsys.readouterr().err
