"""The page's choices: presets, the user's platforms folder, uploads; a platform file parsed once per version."""

from __future__ import annotations

import os

import pytest

from hwmodels.errors import HetSpecError
from hwmodels.loader import PLATFORMS_DIR_ENV, builtin_preset_dir
from web.catalog import Catalog


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(PLATFORMS_DIR_ENV, str(tmp_path))
    return tmp_path


def test_the_users_platforms_are_choices_and_a_broken_file_is_named(user_folder):
    text = (builtin_preset_dir() / "jetson-xavier-nx.toml").read_text()
    (user_folder / "my-box.toml").write_text(text)
    (user_folder / "broken.toml").write_text("name = ")
    names, problems = Catalog().platforms()
    assert "my-box" in names and "jetson-xavier-nx" in names and "broken" not in names
    assert len(problems) == 1 and "broken.toml" in problems[0]


def test_a_platform_file_is_read_again_once_it_changes(user_folder):
    path = user_folder / "my-box.toml"
    text = (builtin_preset_dir() / "jetson-xavier-nx.toml").read_text()
    path.write_text(text)
    catalog = Catalog()
    first = catalog.platform("my-box")
    assert catalog.platform("my-box") is first
    path.write_text(text.replace('description = "', 'description = "Changed. ', 1))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    second = catalog.platform("my-box")
    assert second is not first and second.description.startswith("Changed.")
    assert len(catalog.parsed) == 1


@pytest.mark.parametrize("kind, name, match", [
    ("platform", "no-such-box", "unknown platform 'no-such-box'"),
    ("platform", "/etc/hostname", "unknown platform '/etc/hostname'"),
    ("model", "no-such-model", "unknown model 'no-such-model'"),
    ("acceptance", "/tmp/profile.json", "unknown acceptance model '/tmp/profile.json'"),
])
def test_a_name_that_is_no_choice_is_one_line(kind, name, match):
    with pytest.raises(HetSpecError, match=match):
        getattr(Catalog(), kind)(name)
