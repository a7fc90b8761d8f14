"""The strategy interface and the core strategies (ar, chain, medusa): registry, validation,
plans, closed forms and the trees they verify."""

from __future__ import annotations

import numpy as np
import pytest

from hwmodels.errors import HetSpecError, UnknownNameError
from hwmodels.loader import get_platform
from sim import strategies
from sim.acceptance import AcceptanceModel, omega
from sim.acceptance_loader import load_acceptance
from sim.closed_form import step_seconds
from sim.engine import simulate
from sim.model_spec import get_model
from sim.strategies import get_strategy
from sim.strategies.base import Knob, Problem, StrategyConfig
from sim.tree import TokenTree

A100 = get_platform("a100-80gb-pcie")
VICUNA = get_model("vicuna-7b")
ACC = ((0.55, 0.15, 0.08), (0.40, 0.14, 0.07), (0.30, 0.12, 0.06), (0.2, 0.1, 0.05))
HEADS = AcceptanceModel(name="heads", source="test", medusa_accuracy=ACC)


def problem(acceptance=None, **kw) -> Problem:
    if isinstance(acceptance, str):
        acceptance = load_acceptance(acceptance)
    return Problem(kw.pop("model", VICUNA), kw.pop("platform", A100), acceptance, **kw)


# ---------------------------------------------------------------------- registry
def test_registry_by_method_name():
    for name in ("ar", "chain", "medusa"):
        assert get_strategy(name).name == name
        assert name in strategies.available_methods()
    with pytest.raises(UnknownNameError, match="unknown method 'beam'; valid: .*medusa"):
        get_strategy("beam")


def test_method_without_a_module_is_one_line(monkeypatch):
    monkeypatch.setitem(strategies.STRATEGY_MODULES, "offload", "sim.strategies.no_such_module")
    with pytest.raises(HetSpecError, match="method offload has no simulator strategy yet"):
        get_strategy("offload")


def test_knob_needs_values_or_a_range():
    with pytest.raises(HetSpecError, match="either discrete values or"):
        Knob("tree_width")
    with pytest.raises(HetSpecError, match="low <= high"):
        Knob("partition_ratio", low=0.8, high=0.2)


# ---------------------------------------------------------------------- validation
@pytest.mark.parametrize("config,error,message", [
    (StrategyConfig(partition_ratio=1.5), HetSpecError, r"partition ratio must be in \[0, 1\] \(got 1.5\)"),
    (StrategyConfig(partition_ratio=-0.1), HetSpecError, r"partition ratio must be in \[0, 1\]"),
    (StrategyConfig(tree_width=0), HetSpecError, "tree width must be an integer >= 1"),
    (StrategyConfig(draft_depth=-1), HetSpecError, "draft depth must be an integer >= 0"),
    (StrategyConfig(device="tpu"), UnknownNameError, "unknown device on platform a100-80gb-pcie: 'tpu'; valid: cpu, gpu"),
    (StrategyConfig(draft_device="npu"), UnknownNameError, "'npu'"),
    (StrategyConfig(draft_model="gpt5"), UnknownNameError, "unknown model 'gpt5'"),
    (StrategyConfig(tree_shape="spiral"), UnknownNameError, "unknown tree shape 'spiral'"),
])
@pytest.mark.parametrize("method", ["ar", "chain", "medusa"])
def test_bad_configs_are_one_clear_line(method, config, error, message):
    acc = {"ar": None, "chain": "alpha:0.7", "medusa": "ghidorah-mbpp"}[method]
    with pytest.raises(error, match=message) as info:
        get_strategy(method).resolve(problem(acc), config)
    assert "\n" not in str(info.value)


def test_model_that_does_not_fit_is_refused():
    big = problem(model=get_model("llama2-70b"))
    with pytest.raises(HetSpecError, match="needs 1[0-9][0-9].[0-9] GB but device gpu of a100-80gb-pcie has 80 GB"):
        get_strategy("ar").resolve(big, StrategyConfig(device="gpu"))
    assert get_strategy("ar").search_space(big)[0].values == ("cpu",)


def test_missing_acceptance_lists_the_names():
    with pytest.raises(HetSpecError, match="method medusa needs an acceptance model.*ghidorah-mbpp"):
        get_strategy("medusa").resolve(problem(), StrategyConfig(tree_width=4))


# ---------------------------------------------------------------------- ar
def test_ar_is_one_target_step_per_token():
    p = problem(context=512)
    s = get_strategy("ar")
    c = s.resolve(p, StrategyConfig())
    assert c.device == "gpu" and c.tree_width == 1 and c.partition_ratio is None
    est = s.estimate(p, c)
    assert est.tokens_per_step == 1.0
    assert est.step_s == pytest.approx(float(step_seconds(VICUNA, A100, "gpu", 1, 512)))
    plan = s.plan(p, c)
    assert plan.count_phase == "decode" and plan.tokens_accepted == 1
    assert {t.resource for t in plan.tasks} == {"gpu"}


# ---------------------------------------------------------------------- medusa
def test_medusa_width_one_is_autoregressive():
    p = problem("ghidorah-mbpp")
    med = get_strategy("medusa").resolve(p, StrategyConfig(tree_width=1))
    assert med.draft_depth == 0
    assert get_strategy("medusa").estimate(p, med).step_s == pytest.approx(
        get_strategy("ar").estimate(p, get_strategy("ar").resolve(p, StrategyConfig())).step_s, rel=1e-12)


def test_medusa_prices_the_heads_one_per_level():
    p = problem(HEADS)
    s = get_strategy("medusa")
    c = s.resolve(p, StrategyConfig(tree_width=12, tree_shape="greedy"))
    est = s.estimate(p, c)
    assert est.breakdown["heads"] > 0
    plan = s.plan(p, c)
    heads = [t for t in plan.tasks if t.op.startswith("medusa_")]
    assert {t.phase for t in heads} == {"draft"}
    head_linear = next(t for t in heads if t.op == "medusa_head")
    # K = tree depth heads, each a d x V projection over the q tree tokens
    assert head_linear.flops == pytest.approx(c.tree.depth * 2 * 12 * VICUNA.hidden * VICUNA.vocab)


def test_medusa_trees_from_accuracies_greedy_and_dp_agree():
    p = problem(HEADS)
    s = get_strategy("medusa")
    for width in (2, 5, 17, 40):
        for depth in (1, 2, 4):
            try:
                g = s.resolve(p, StrategyConfig(tree_width=width, draft_depth=depth, tree_shape="greedy"))
            except HetSpecError:
                assert width > 1 + sum(3 ** d for d in range(1, depth + 1))
                continue
            d = s.resolve(p, StrategyConfig(tree_width=width, draft_depth=depth, tree_shape="dp"))
            assert g.tree.size == d.tree.size == width
            assert max(g.tree.depth, d.tree.depth) <= depth
            assert HEADS.tree_tokens(g.tree) == pytest.approx(HEADS.tree_tokens(d.tree))
            assert HEADS.tree_tokens(g.tree) == pytest.approx(TokenTree.greedy(ACC, width, depth)
                                                             .expected_accepted_length(ACC))


def test_medusa_table_acceptance_prices_the_medusa_list_tree():
    p = problem("ghidorah-gsm8k")
    c = get_strategy("medusa").resolve(p, StrategyConfig(tree_width=8))
    assert c.tree_shape == "medusa-list" and c.tree.size == 8
    assert get_strategy("medusa").estimate(p, c).tokens_per_step == pytest.approx(2.69)


def test_medusa_cartesian_and_explicit_trees():
    p = problem(HEADS)
    s = get_strategy("medusa")
    c = s.resolve(p, StrategyConfig(tree_shape="cartesian", options={"cartesian_sizes": (2, 3)}))
    assert c.tree.size == 1 + 2 + 6 and c.tree_width == 9
    explicit = TokenTree.from_choices([(0,), (0, 0), (1,)])
    c = s.resolve(p, StrategyConfig(tree=explicit))
    assert c.tree == explicit and c.draft_depth == 2
    with pytest.raises(HetSpecError, match="does not fit the tree"):
        s.resolve(p, StrategyConfig(tree=TokenTree.chain(6)))
    with pytest.raises(HetSpecError, match="needs option cartesian_sizes"):
        s.resolve(p, StrategyConfig(tree_shape="cartesian"))


# ---------------------------------------------------------------------- chain
def test_chain_plan_moves_tokens_when_draft_and_target_differ():
    p = problem("alpha:0.7")
    s = get_strategy("chain")
    same = s.resolve(p, StrategyConfig(draft_depth=3))
    across = s.resolve(p, StrategyConfig(draft_depth=3, draft_device="cpu"))
    assert same.draft_device == "gpu" and same.tree_width == 4 and same.draft_model == "llama-68m"
    assert not [t for t in s.plan(p, same).tasks if t.kind == "transfer"]
    transfers = [t for t in s.plan(p, across).tasks if t.kind == "transfer"]
    assert [t.name for t in transfers] == ["to_target", "to_draft"]
    assert s.estimate(p, across).breakdown["transfer"] > 0
    assert s.estimate(p, same).tokens_per_step == pytest.approx(omega(3, 0.7))


def test_chain_draws_follow_the_acceptance_rate():
    p = problem("alpha:0.6")
    sim = simulate(p, "chain", StrategyConfig(draft_depth=4), steps=400, seed=7, op_records=False)
    assert np.mean(sim.run.tokens) == pytest.approx(omega(4, 0.6), abs=0.15)
    assert all(1 <= t <= 5 for t in sim.run.tokens)


def test_default_config_is_valid_for_each_core_method():
    for method, acc in (("ar", None), ("chain", "alpha:0.5"), ("medusa", "medusa-log")):
        p = problem(acc)
        s = get_strategy(method)
        c = s.resolve(p, s.default_config(p))
        assert s.estimate(p, c).step_s > 0
