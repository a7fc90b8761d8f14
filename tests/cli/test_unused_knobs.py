"""A knob a method does not use is an error naming the flag and the method (predict, simulate, sweep),
never silently ignored."""

from __future__ import annotations

import json

import pytest

from cli_runner import one_line_error
from hetspec.cli import main

A100 = "a100-80gb-pcie"




# ---------------------------------------------------------------------- knobs a method does not use
MEDUSA_LOG = ("--model", "vicuna-7b", "--platform", A100, "--method", "medusa", "--acceptance", "medusa-log")


@pytest.mark.parametrize("knob, match", [
    (("--ratio", "0.3"), "--partition-ratio does not apply to method medusa (its knobs: --tree-width"),
    (("--option", "foo=bar"), "--option foo does not apply to method medusa"),
    (("--draft-model", "llama-68m"), "--draft-model does not apply to method medusa"),
    (("--draft-depth", "99"), "--draft-depth 99 has no effect on method medusa here: its configurations come "
                              "out with draft_depth"),
    (("--draft-depth", "2"), "--draft-depth 2 has no effect on method medusa here"),   # list trees: depth by width
    (("--tree-shape", "greedy"), "--tree-shape greedy has no effect on method medusa here: its configurations "
                                 "come out with tree_shape medusa-list"),
])
@pytest.mark.parametrize("command", ["predict", "simulate"])
def test_a_knob_the_method_does_not_use_is_one_line(capsys, command, knob, match):
    one_line_error(capsys, command, *MEDUSA_LOG, *knob, match=match)


@pytest.mark.parametrize("method, knob, match", [
    ("ar", ("--tree-width", "4"), "--tree-width does not apply to method ar (its knobs: --device)"),
    ("chain", ("--tree-choices", "x.json"), "--tree-choices does not apply to method chain"),
    ("hcmp", ("--draft-model", "llama-68m"), "--draft-model does not apply to method hcmp"),
    ("draft-tree", ("--option", "variant=std", "--tree-width", "8"), "--tree-width 8 has no effect on method "
                                                                     "draft-tree here"),
])
def test_each_method_takes_its_declared_knobs_only(tmp_path, capsys, method, knob, match):
    (tmp_path / "x.json").write_text("[[0], [1]]")
    knob = tuple(str(tmp_path / k) if k.endswith(".json") else k for k in knob)
    one_line_error(capsys, "predict", "--model", "vicuna-7b", "--platform", "jetson-xavier-nx-204mhz",
                   "--method", method, "--acceptance", "alpha:0.7", *knob, match=match)


def test_knobs_a_method_does_use_still_narrow_it(capsys):
    assert main(["predict", *MEDUSA_LOG, "--tree-width", "1-8", "--device", "gpu", "--option", "medusa_heads=5",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["tree_width"] for r in out["table"]} == set(range(1, 9))
    assert {r["medusa_heads"] for r in out["table"]} == {5}


def test_a_sweep_knob_narrows_the_methods_that_take_it_and_says_which_do_not(tmp_path, capsys):
    out = tmp_path / "t.csv"
    assert main(["sweep", "--models", "vicuna-7b", "--platforms", A100, "--methods", "ar,medusa",
                 "--acceptance", "medusa-log", "--tree-width", "4", "--device", "gpu", "--out", str(out),
                 "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "--tree-width does not apply to ar: swept over their own search space" in err
    import pandas as pd

    t = pd.read_csv(out)
    assert set(zip(t["method"], t["tree_width"], t["device"])) == {("ar", 1, "gpu"), ("medusa", 4, "gpu")}


@pytest.mark.parametrize("methods, knob, match", [
    ("medusa", ("--ratio", "0.3"), "--partition-ratio does not apply to method medusa"),
    ("ar,medusa", ("--ratio", "0.3"), "--partition-ratio does not apply to any method swept (ar, medusa)"),
    ("ar,medusa", ("--option", "foo=1"), "--option foo does not apply to any method swept"),
])
def test_a_sweep_knob_no_method_takes_is_one_line(tmp_path, capsys, methods, knob, match):
    one_line_error(capsys, "sweep", "--models", "vicuna-7b", "--platforms", A100, "--methods", methods,
                   "--acceptance", "medusa-log", *knob, "--out", str(tmp_path / "t.csv"), match=match)


def test_every_searched_knob_is_declared():
    """The optimizer refuses knobs a strategy does not declare: its own search space must be declared."""
    from hwmodels.loader import get_platform
    from sim.acceptance_loader import load_acceptance
    from sim.model_spec import get_model
    from sim.optimizer import declared_knobs
    from sim.strategies import available_methods, get_strategy
    from sim.strategies.base import Problem

    for platform in ("a100-80gb-pcie", "jetson-xavier-nx-204mhz", "apple-m2"):
        for acc in ("medusa-log", "ghidorah-mbpp", "dovetail-mtbench", "alpha:0.7"):
            problem = Problem(model=get_model("vicuna-7b"), platform=get_platform(platform),
                              acceptance=load_acceptance(acc))
            for method in available_methods():
                strategy = get_strategy(method)
                try:
                    knobs = strategy.search_space(problem)
                except Exception:          # a problem the method cannot take: nothing searched
                    continue
                assert {k.name for k in knobs} <= set(declared_knobs(strategy)), (method, platform, acc)
