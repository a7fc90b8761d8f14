"""``speedup_vs_ar``: against ``ar`` on the row's own device, so ``ar`` is 1x against itself."""

from __future__ import annotations

import json

import pytest

from hetspec.cli import main

A100 = "a100-80gb-pcie"




# ---------------------------------------------------------------------- speedup against ar on the same device
def test_ar_is_1x_against_itself_on_every_device(capsys):
    assert main(["predict", "--model", "vicuna-7b", "--platform", A100, "--method", "ar", "--device", "cpu"]) == 0
    text = capsys.readouterr().out
    assert "1.00x vs ar" in text
    assert main(["predict", "--model", "vicuna-7b", "--platform", A100, "--method", "ar", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["device"] for r in out["table"]} == {"gpu", "cpu"}
    assert all(r["speedup_vs_ar"] == pytest.approx(1.0) for r in out["table"])


def test_a_method_is_compared_with_ar_on_its_own_device(capsys):
    def table(method: str, *extra: str) -> dict:
        assert main(["predict", "--model", "vicuna-7b", "--platform", A100, "--method", method, *extra,
                     "--json"]) == 0
        return {r["device"]: r for r in json.loads(capsys.readouterr().out)["table"]}

    ar = table("ar")
    for device, row in table("medusa", "--acceptance", "medusa-log", "--tree-width", "8").items():
        assert row["speedup_vs_ar"] == pytest.approx(row["tokens_per_s"] / ar[device]["tokens_per_s"])
