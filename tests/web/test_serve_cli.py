"""``hetspec serve``: bad addresses are one line; a free port serves the page."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from cli_runner import one_line_error
from page_helpers import free_port, require_modules, wait_for
from paths import REPO


@pytest.mark.parametrize("port", ["0", "70000"])
def test_a_port_out_of_range_is_one_line(capsys, port):
    require_modules("fastapi", "uvicorn")
    one_line_error(capsys, "serve", "--port", port, match="--port must be in 1-65535")


def test_a_port_in_use_is_one_line(capsys):
    require_modules("fastapi", "uvicorn")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        one_line_error(capsys, "serve", "--port", str(s.getsockname()[1]), match="cannot listen on 127.0.0.1:")


def test_serve_answers_on_loopback_by_default():
    require_modules("fastapi", "uvicorn")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hetspec", "serve", "--port", str(port)], cwd=REPO,
                            env={"PYTHONPATH": str(REPO), "PATH": ""}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        body = wait_for(f"http://127.0.0.1:{port}/", proc)
        assert "HetSpec what-if" in body
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert f"http://127.0.0.1:{port}/" in out


def test_without_the_web_extra_it_names_the_install(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "uvicorn", None)          # what `import uvicorn` meets when it is missing
    one_line_error(capsys, "serve", "--port", str(free_port()), match="uvicorn is missing): pip install 'hetspec[web]'")
