"""``dovetail``: drafting on the GPU, verifying the tree on the CPU; tau tables, the overlap form,
invariants, engine = closed form, clear errors."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hwmodels.errors import HetSpecError, UnknownNameError
from hwmodels.loader import get_platform
from sim.acceptance import AcceptanceModel, omega
from sim.acceptance_loader import load_acceptance
from sim.closed_form import step_seconds
from sim.engine import simulate
from sim.model_spec import get_model
from sim.strategies import get_strategy
from sim.strategies.base import Problem, StrategyConfig
from sim.strategies.dovetail import drafter_weight_bytes, tree_tau

A = get_platform("xeon4214r-rtx2080super")
LLAMA = get_model("llama2-7b")
DOVETAIL = get_strategy("dovetail")
MT = load_acceptance("dovetail-mtbench")


def problem(platform=A, acceptance=MT, context=256) -> Problem:
    return Problem(LLAMA, platform, acceptance, context=context, dtype="fp32")


def resolved(p=None, width=16, **options):
    p = p or problem()
    return DOVETAIL.resolve(p, StrategyConfig(tree_width=width, options=options))


def faster_pcie(platform, factor):
    return replace(platform, links=tuple(replace(l, bw_gbps=l.bw_gbps * factor, latency_us=l.latency_us / factor)
                                         for l in platform.links))


# ---------------------------------------------------------------------- acceptance
def test_tree_tau_is_the_table_where_the_table_has_it():
    assert tree_tau(MT, "dgf", 5, 16) == 4.73
    assert tree_tau(MT, "eagle2", 1, 60) == 4.75
    assert tree_tau(MT, "tinyllama-1.1b", None, 16, 1.0) == 4.53
    assert tree_tau(MT, "dgf", 5, 1) == 1.0


def test_tree_tau_between_widths_is_monotone_and_refuses_extrapolation():
    taus = [tree_tau(MT, "dgf", 5, w) for w in range(1, 61)]
    assert all(b >= a for a, b in zip(taus, taus[1:]))
    # a drafter measured only at 16 follows EAGLE-2's curve shape: same relative gain from 16 to 60
    e16, e60 = tree_tau(MT, "eagle2", 1, 16), tree_tau(MT, "eagle2", 1, 60)
    assert (taus[59] - 1) / (taus[15] - 1) == pytest.approx((e60 - 1) / (e16 - 1))
    with pytest.raises(HetSpecError, match="61 is outside"):
        tree_tau(MT, "dgf", 5, 61)
    with pytest.raises(HetSpecError, match="has no tau for drafter dgf blocks=9"):
        tree_tau(MT, "dgf", 9, 16)


def test_chain_drafting_uses_omega():
    p = problem(acceptance=AcceptanceModel(name="a", source="test", draft_alpha=0.7))
    cfg = DOVETAIL.resolve(p, StrategyConfig(tree_width=5, tree_shape="chain", options={"drafter": "eagle2"}))
    est = DOVETAIL.estimate(p, cfg)
    assert est.tokens_per_step == pytest.approx(omega(4, 0.7))
    drafts = [t for t in DOVETAIL.plan(p, cfg).tasks if t.phase == "draft" and t.op == "lm_head"]
    assert len(drafts) == 4                                    # gamma one-token passes


# ---------------------------------------------------------------------- the cost model
def test_verify_cost_rises_with_verified_tokens():
    p = problem()
    verify = [DOVETAIL.estimate(p, resolved(p, w)).breakdown["verify"] for w in range(2, 61)]
    assert all(b >= a for a, b in zip(verify, verify[1:]))
    assert verify[-1] > 1.3 * verify[14]                       # 60 tokens cost far more than 16 on the CPU


def test_full_overlap_is_the_roofline_and_less_overlap_is_slower():
    p = problem()
    est = DOVETAIL.estimate(p, resolved(p, 16, overlap_beta=1.0))
    roofline = float(step_seconds(p.model, A, "cpu", 16, 256))
    assert est.breakdown["verify"] == pytest.approx(roofline, rel=1e-9)
    none = DOVETAIL.estimate(p, resolved(p, 16, overlap_beta=0.0)).breakdown["verify"]
    half = DOVETAIL.estimate(p, resolved(p, 16, overlap_beta=0.5)).breakdown["verify"]
    assert roofline < half < none
    # beta = 0: every operator pays compute + memory, so the step is their sums plus launch overheads
    comp, mem = est.breakdown["verify_compute"], est.breakdown["verify_memory"]
    assert comp + mem <= none < 1.02 * (comp + mem)


def test_deeper_drafters_draft_longer_and_need_more_memory():
    p = problem()
    drafts = [DOVETAIL.estimate(p, resolved(p, drafter="dgf", drafter_blocks=b)).breakdown["draft"] for b in range(1, 7)]
    assert all(b > a for a, b in zip(drafts, drafts[1:]))
    # the 5-block drafter with embedding and LM head: Dovetail's peak 2.95 GB leaves room for the KV cache
    assert 2.3e9 < drafter_weight_bytes(p, "dgf", 5, "fp16") < 2.95e9


def test_faster_pcie_never_slower():
    slow, fast = problem(), problem(faster_pcie(A, 4.0))
    for opts in ({}, {"target_gpu_layers": 10}):
        assert DOVETAIL.estimate(fast, resolved(fast, **opts)).step_s <= DOVETAIL.estimate(slow, resolved(slow, **opts)).step_s


def test_gpu_resident_target_layers_shorten_the_cpu_verification():
    p = problem()
    base = DOVETAIL.estimate(p, resolved(p)).breakdown["verify"]
    seven = DOVETAIL.estimate(p, resolved(p, target_gpu_layers=10)).breakdown["verify"]
    assert seven < 0.8 * base
    plan = DOVETAIL.plan(p, resolved(p, target_gpu_layers=10))
    assert [t.name for t in plan.tasks if t.kind == "transfer"] == ["to_verifier", "hidden", "to_drafter"]
    assert {t.resource for t in plan.tasks if t.phase == "verify"} == {"cpu", "gpu"}


def test_tau_option_overrides_the_table():
    p = problem()
    assert DOVETAIL.estimate(p, resolved(p, tau=3.0)).tokens_per_step == 3.0


@pytest.mark.parametrize("options,width", [({}, 16), ({"drafter": "tinyllama-1.1b"}, 16), ({"drafter": "eagle2"}, 60),
                                           ({"target_gpu_layers": 10}, 16)])
def test_engine_equals_closed_form(options, width):
    p = problem()
    sim = simulate(p, "dovetail", resolved(p, width, **options), steps=2)
    assert abs(sim.step_diff_pct) < 1e-7


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("options,width,error,message", [
    ({"drafter": "gpt5"}, 16, UnknownNameError, "unknown dovetail drafter 'gpt5'"),
    ({}, 90, HetSpecError, r"a tree from 8 passes of top-10 has at most 81 tokens \(width 90 asked\)"),
    ({"tau": 20.0}, 16, HetSpecError, r"option tau must be a number in \[1, 16\]"),
    ({"drafter_blocks": 0}, 16, HetSpecError, "drafter_blocks must be an integer >= 1"),
    ({"drafter_blocks": 30}, 16, HetSpecError, r"drafter dgf \(30 blocks\) needs .* GB but gpu .* has 8 GB"),
    ({"overlap_beta": 2}, 16, HetSpecError, r"overlap_beta must be in \[0, 1\]"),
    ({"target_gpu_layers": 33}, 16, HetSpecError, r"target_gpu_layers must be an integer in \[0, 32\]"),
    ({"drafter_blocks": 9}, 16, HetSpecError, "has no tau for drafter dgf blocks=9"),
])
def test_bad_configs_are_one_line(options, width, error, message):
    with pytest.raises(error, match=message) as info:
        resolved(problem(), width, **options)
    assert "\n" not in str(info.value)


def test_an_acceptance_model_without_tau_is_one_line():
    p = problem(acceptance=load_acceptance("ghidorah-mbpp"))
    with pytest.raises(HetSpecError, match="has no tau table") as info:
        resolved(p)
    assert "\n" not in str(info.value)


def test_an_acceptance_rate_searches_chain_drafts():
    from sim.optimizer import optimize

    p = problem(acceptance=load_acceptance("alpha:0.8"))
    res = optimize(p, "dovetail")
    assert set(res.table["tree_shape"]) == {"chain"} and 2 <= res.best["tree_width"] <= 9
    assert res.best["tokens_per_step"] == pytest.approx(omega(res.best["tree_width"] - 1, 0.8))
