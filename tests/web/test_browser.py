"""The page in a real browser: headless Chromium (Debian's ``chromium`` and ``chromium-driver``) driven by Selenium.

It loads the page, chooses Vicuna-7B on the Jetson Xavier NX at 204 MHz with Ghidorah's MBPP table and all
methods, checks the best configuration of every method against ``hetspec predict``'s, moves the
memory-bandwidth slider and sees the table change as the simulator says, and uploads a broken
``config.json`` to see a one-line error. Screenshots of each step go to pytest's folder and, when
``HETSPEC_TEST_ARTIFACTS`` names a folder, there too.

Without a browser it skips on a developer's machine and fails in CI (``CI`` set), naming the install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from page_helpers import ACCEPTANCE, MODEL, PLATFORM, free_port, require, require_modules, wait_for
from paths import REPO

from hetspec.cli import main
from hwmodels.errors import HetSpecError
from hwmodels.loader import get_platform
from sim.acceptance_loader import load_acceptance
from sim.commands.predict import describe_config
from sim.model_spec import get_model
from sim.optimizer import optimize
from sim.strategies import available_methods
from sim.strategies.base import Problem
from sim.whatif import WhatIf, scale_platform

BROWSER_INSTALL = "apt-get update && apt-get install -y chromium chromium-driver"
#: Seconds to wait for one answer: all methods take a few seconds on a busy two-core machine.
ANSWER_TIMEOUT_S = 120.0


def _tool(name: str) -> str | None:
    return shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)


@pytest.fixture(scope="module")
def server():
    require_modules("fastapi", "uvicorn", "selenium")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hetspec", "serve", "--host", "127.0.0.1", "--port", str(port)],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for(f"http://127.0.0.1:{port}/api/options", proc)
        yield f"http://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.fixture(scope="module")
def browser(server):
    chromium, driver = _tool("chromium"), _tool("chromedriver")
    require("chromium and chromedriver", bool(chromium and driver), BROWSER_INSTALL)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    b = webdriver.Chrome(service=Service(driver), options=options)
    yield b
    b.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    folders = [tmp_path_factory.mktemp("screenshots")]
    if os.environ.get("HETSPEC_TEST_ARTIFACTS"):
        folders.append(Path(os.environ["HETSPEC_TEST_ARTIFACTS"]))

    def save(browser, name: str) -> None:
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)
            browser.save_screenshot(str(folder / f"serve-{name}.png"))
    return save


def body(browser, key: str) -> str:
    return browser.find_element("tag name", "body").get_attribute(f"data-{key}")


def settle(browser, after: int) -> None:
    """Wait until more than ``after`` answers are drawn and none is pending."""
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while time.monotonic() < deadline:
        if int(body(browser, "answers")) > after and body(browser, "busy") == "0":
            return
        time.sleep(0.2)
    raise AssertionError(f"no answer in {ANSWER_TIMEOUT_S} s; status: {browser.find_element('id', 'status').text}, "
                         f"error: {browser.find_element('id', 'error').text}")


def choose(browser, select_id: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", select_id)).select_by_value(value)


def table(browser) -> dict[str, dict]:
    out = {}
    for tr in browser.find_elements("css selector", "#best tbody tr"):
        cells = [td.text for td in tr.find_elements("tag name", "td")]
        out[tr.get_attribute("data-method")] = {"config": cells[1], "tokens_per_s": cells[2],
                                                "exact": float(tr.get_attribute("data-tokens-per-s")),
                                                "best": "best" in (tr.get_attribute("class") or "")}
    return out


def predict_json(capsys, method: str) -> dict:
    """``hetspec predict --json`` for the page's problem (the CLI's entry point, in this process)."""
    capsys.readouterr()
    assert main(["predict", "--model", MODEL, "--platform", PLATFORM, "--method", method, "--acceptance", ACCEPTANCE,
                 "--no-table", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_page_answers_as_the_cli_does(browser, server, shots, capsys, tmp_path):
    from selenium.webdriver.common.keys import Keys

    # load the page; it answers its default controls first
    browser.get(server)
    settle(browser, 0)
    shots(browser, "1-loaded")

    # choose the problem: another platform first, so that choosing the one under test is a change
    n = int(body(browser, "answers"))
    choose(browser, "platform", "jetson-xavier-nx")
    settle(browser, n)
    n = int(body(browser, "answers"))
    choose(browser, "model", MODEL)
    choose(browser, "acceptance", ACCEPTANCE)
    choose(browser, "platform", PLATFORM)
    if not browser.find_element("id", "method-all").is_selected():
        browser.find_element("id", "method-all").click()
    settle(browser, n)
    shots(browser, "2-chosen")
    best = browser.find_element("id", "best")
    assert (best.get_attribute("data-model"), best.get_attribute("data-platform"),
            best.get_attribute("data-acceptance")) == (MODEL, PLATFORM, ACCEPTANCE)

    # the best configuration of every method is predict's; those that cannot run say why
    shown = table(browser)
    problem = Problem(get_model(MODEL), get_platform(PLATFORM), load_acceptance(ACCEPTANCE))
    expected, cannot = {}, set()
    for method in available_methods():
        try:
            expected[method] = optimize(problem, method).best
        except HetSpecError:
            cannot.add(method)
    assert set(shown) == set(expected)
    assert {li.get_attribute("data-method") for li in browser.find_elements("css selector", "#unavailable li")} == cannot
    for method, b in expected.items():
        assert shown[method]["config"] == describe_config(b), method
        assert shown[method]["tokens_per_s"] == f"{b['tokens_per_s']:.2f}", method
        assert shown[method]["exact"] == pytest.approx(b["tokens_per_s"], rel=1e-12), method
    winner = max(expected, key=lambda m: expected[m]["tokens_per_s"])
    assert [m for m, row in shown.items() if row["best"]] == [winner]
    cli = predict_json(capsys, winner)["best"]
    assert shown[winner]["config"] == describe_config(cli)
    assert shown[winner]["exact"] == pytest.approx(cli["tokens_per_s"], rel=1e-12)
    assert browser.find_element("id", "verdict").text.startswith(f"Fastest: {winner} at")

    # move the memory-bandwidth slider: the table changes, to what the simulator says for that platform
    n = int(body(browser, "answers"))
    slider = browser.find_element("id", "mem_bw")
    for _ in range(4):
        slider.send_keys(Keys.ARROW_RIGHT)
    settle(browser, n)
    shots(browser, "3-memory-bandwidth")
    factor = float(browser.find_element("css selector", "output[for=mem_bw]").text.lstrip("x"))
    assert factor > 1.0
    moved = table(browser)
    assert moved != shown
    faster = Problem(problem.model, scale_platform(problem.platform, WhatIf(mem_bw=factor)), problem.acceptance)
    medusa = optimize(faster, "medusa").best
    assert moved["medusa"]["exact"] == pytest.approx(medusa["tokens_per_s"], rel=1e-12)
    assert moved["medusa"]["exact"] > shown["medusa"]["exact"]

    # upload a broken config.json: one line of error, naming the file, no traceback
    broken = tmp_path / "config.json"
    broken.write_text('{"hidden_size": 4096, "num_hidden_layers": ')
    browser.find_element("id", "model-file").send_keys(str(broken))
    deadline = time.monotonic() + 30
    while not browser.find_element("id", "error").text and time.monotonic() < deadline:
        time.sleep(0.2)
    shots(browser, "4-bad-upload")
    error = browser.find_element("id", "error").text
    assert error.startswith("error: config.json: json: not valid JSON"), error
    assert "\n" not in error and "Traceback" not in error
    assert browser.find_element("id", "model").get_attribute("value") == MODEL
