"""Shared by the web tests: what they need installed, and the problem the page is checked on."""

from __future__ import annotations

import importlib.util
import os

import pytest

#: The example every web test prices: Vicuna-7B on the Jetson Xavier NX at 204 MHz, Ghidorah's MBPP table.
MODEL, PLATFORM, ACCEPTANCE = "vicuna-7b", "jetson-xavier-nx-204mhz", "ghidorah-mbpp"
INSTALL_PACKAGES = "pip install -e '.[test]' (it brings the web extra)"


def require(what: str, present: bool, install: str) -> None:
    """Skip when ``what`` is missing on a developer's machine; fail in CI (CI set), which must have it."""
    if present:
        return
    message = f"{what} is not installed: {install}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def require_modules(*names: str) -> None:
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    require(", ".join(missing), not missing, INSTALL_PACKAGES)
