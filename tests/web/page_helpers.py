"""Shared by the web tests: what they need installed, the problem the page is checked on, a server to wait for."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import time
import urllib.request

import pytest

#: The example every web test prices: Vicuna-7B on the Jetson Xavier NX at 204 MHz, Ghidorah's MBPP table.
MODEL, PLATFORM, ACCEPTANCE = "vicuna-7b", "jetson-xavier-nx-204mhz", "ghidorah-mbpp"
INSTALL_PACKAGES = "pip install -e '.[test]' (it brings the web extra)"


def require(what: str, present: bool, install: str) -> None:
    """Skip when ``what`` is missing on a developer's machine; fail in CI (CI set), which must have it."""
    if present:
        return
    message = f"not installed: {what}; install with: {install}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def require_modules(*names: str) -> None:
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    require(", ".join(missing), not missing, INSTALL_PACKAGES)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, proc: subprocess.Popen, timeout_s: float = 90.0) -> str:
    """The body at ``url`` once the server answers (it imports the simulator first)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode}: {proc.stderr.read()}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.read().decode()
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"no answer from {url} in {timeout_s} s")
