"""The ``draft-tree`` strategy (LLMCad): memory plan and weight streaming, the compute-IO pipeline,
the self-adaptive fallback's Markov chain, the Std baseline, engine vs closed form, errors."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hwmodels.errors import HetSpecError, UnknownNameError
from hwmodels.loader import get_platform
from sim.acceptance import AcceptanceModel
from sim.acceptance_loader import load_acceptance
from sim.engine import simulate
from sim.model_spec import get_model
from sim.strategies import get_strategy
from sim.strategies.base import Problem, StrategyConfig
from sim.strategies.draft_tree import fallback_chain, main_branch_depth, memory_plan, swap_all_budget_gb
from sim.strategies.draft_tree_fallback import stop_depth

TX2 = get_platform("jetson-tx2")
TARGET = get_model("gpt2-large")
DRAFT = get_model("gpt2").with_dtype("fp32")
ALPHA = load_acceptance("alpha:0.8")
STRATEGY = get_strategy("draft-tree")


def problem(platform=TX2, acceptance=ALPHA, context=128) -> Problem:
    return Problem(TARGET, platform, acceptance, context=context, dtype="fp32")


#: The smallest budget for the pair at a 17-token tree: nothing of the target stays resident.
SWAP_ALL = swap_all_budget_gb(problem(), DRAFT, 17)


def config(width=17, depth=16, **options) -> StrategyConfig:
    return StrategyConfig(method="draft-tree", tree_width=width, draft_depth=depth, options=options)


def estimate(p: Problem, cfg: StrategyConfig):
    return STRATEGY.estimate(p, STRATEGY.resolve(p, cfg))


def with_storage_scale(platform, factor):
    links = tuple(replace(l, bw_gbps=l.bw_gbps * factor) if l.kind == "storage" else l for l in platform.links)
    return replace(platform, links=links)


def test_the_fixed_threshold_stops_every_round_at_one_depth():
    """fallback=threshold: T_c = p0^k < alpha0 with alpha0 fixed (LLMCad §3.3's default 0.01, no Eq. 3): one kind of
    round whose main branch is k(alpha0) tokens long (within the depth cap)."""
    p = problem()
    for alpha0, depth in ((0.01, 16), (0.3, 6), (0.6, 3)):
        cfg = STRATEGY.resolve(p, config(17, 16, fallback="threshold", alpha0=alpha0))
        (only,) = STRATEGY.rounds(p, cfg)
        assert only.weight == 1.0
        assert main_branch_depth(only.tree) == stop_depth(alpha0, 0.8, 16) == depth
    budget = estimate(p, config(17, 16, fallback="budget"))
    assert estimate(p, config(17, 16, fallback="threshold")).tokens_per_step == pytest.approx(budget.tokens_per_step)


def test_per_rank_acceptance_in_a_preset_grows_a_tree():
    """A preset's draft_rank_accuracy (LLMCad's: rank 0 the paper's 0.80) makes the greedy tree branch."""
    acc = load_acceptance("llmcad-mt5-iwslt")
    assert acc.meta["draft_rank_accuracy"][0] == acc.draft_alpha
    p = problem(acceptance=acc)
    cfg = STRATEGY.resolve(p, config(17, 16))
    assert cfg.tree_shape == "greedy" and main_branch_depth(cfg.tree) < 16     # side branches took some budget
    chain = replace(config(17, 16, fallback="threshold"), tree_shape="chain")
    assert estimate(p, config(17, 16, fallback="threshold")).tokens_per_step > estimate(p, chain).tokens_per_step


# ---------------------------------------------------------------------- memory and streaming
def test_memory_plan_splits_the_target_into_resident_and_streamed():
    p = problem()
    full = memory_plan(p, DRAFT, 8e9, 17)
    assert full.fits and full.streamed == 0.0
    tight = memory_plan(p, DRAFT, 2e9, 17)
    assert tight.resident + tight.streamed == pytest.approx(TARGET.with_dtype("fp32").weight_bytes())
    assert 0 < tight.resident < tight.target_weights
    swap = memory_plan(p, DRAFT, SWAP_ALL * 1e9, 17)
    assert swap.resident == pytest.approx(0.0, abs=2048) and swap.streamed == pytest.approx(swap.target_weights, rel=1e-6)


@pytest.mark.parametrize("options", [
    {"fallback": "adaptive"}, {"fallback": "budget"}, {"fallback": "budget", "pipeline": 0},
    {"variant": "std"},
])
def test_more_storage_bandwidth_is_never_slower(options):
    opts = {"memory_budget_gb": 1.5, **options}
    steps = [estimate(problem(with_storage_scale(TX2, f)), config(**opts)).step_s for f in (0.5, 1.0, 2.0, 8.0)]
    assert all(b < a for a, b in zip(steps, steps[1:]))


@pytest.mark.parametrize("options", [{"fallback": "budget"}, {"fallback": "adaptive"}, {"variant": "std"},
                                     {"variant": "std", "resident": "none"}])
def test_a_larger_memory_budget_is_never_slower(options):
    budgets = [SWAP_ALL, 1.0, 1.5, 2.5, 3.5, 8.0]
    per_token = []
    for b in budgets:
        e = estimate(problem(), config(memory_budget_gb=b, **options))
        per_token.append(e.step_s / e.tokens_per_step)
    assert all(b <= a * (1 + 1e-12) for a, b in zip(per_token, per_token[1:]))
    assert per_token[-1] < per_token[0] / 10           # resident at 8 GB: no storage on the critical path


@pytest.mark.parametrize("budget", [SWAP_ALL, 1.5, 8.0])
@pytest.mark.parametrize("fallback", ["budget", "adaptive"])
def test_the_pipeline_is_never_slower(budget, fallback):
    for width, depth in ((3, 2), (9, 8), (17, 16)):
        on = estimate(problem(), config(width, depth, memory_budget_gb=budget, fallback=fallback, pipeline=1))
        off = estimate(problem(), config(width, depth, memory_budget_gb=budget, fallback=fallback, pipeline=0))
        assert on.step_s <= off.step_s and on.tokens_per_step == off.tokens_per_step
        if budget == SWAP_ALL:          # the whole draft hides under the load
            assert off.step_s - on.step_s == pytest.approx(on.breakdown["draft"], rel=1e-9)


def test_std_with_a_resident_target_is_autoregressive_decoding():
    p = problem()
    std = estimate(p, config(variant="std"))
    ar = get_strategy("ar")
    assert std.step_s == pytest.approx(ar.estimate(p, ar.resolve(p, StrategyConfig())).step_s, rel=1e-12)
    # swapping everything: load then compute; StdPL (offload streaming from storage) hides the compute
    swap_std = estimate(p, config(variant="std", memory_budget_gb=swap_all_budget_gb(p)))
    assert swap_std.breakdown["load"] > 50 * std.step_s
    offload = get_strategy("offload")
    stdpl = offload.estimate(p, offload.resolve(p, StrategyConfig(method="offload", options={
        "mode": "stream", "source": "storage", "resident_layers": 0})))
    assert stdpl.step_s < swap_std.step_s


# ---------------------------------------------------------------------- the self-adaptive fallback
def test_stop_depth_follows_the_threshold():
    assert stop_depth(0.5, 0.8, 16) == 4          # 0.8^3 = 0.512 >= 0.5 > 0.8^4
    assert stop_depth(0.01, 0.8, 16) == 16        # alpha0 = 0.01 would draft 21 tokens: capped
    assert stop_depth(0.9, 0.8, 16) == 1 and stop_depth(0.3, 0.0, 16) == 1


def test_fallback_chain_is_a_stationary_distribution():
    for p0 in (0.5, 0.8, 0.95):
        pi = fallback_chain(p0, 12)
        assert pi.sum() == pytest.approx(1.0) and np.all(pi >= 0)
    mean_k = [float(np.arange(1, 13) @ fallback_chain(p0, 12)) for p0 in (0.5, 0.7, 0.8, 0.9, 0.95)]
    assert all(b > a for a, b in zip(mean_k, mean_k[1:]))     # a better draft drafts longer rounds


def test_speculation_sends_the_all_accepted_rounds_with_a_matching_guess_to_the_cap():
    """LLMCad §3.4: a round of k that speculates hands the next round the depth-cap tree with probability
    p0^(k+1); the rest of its all-accepted mass halves alpha as before; no speculation is the plain chain."""
    p0, cap = 0.8, 12
    plain = fallback_chain(p0, cap)
    np.testing.assert_allclose(fallback_chain(p0, cap, (False,) * cap), plain)
    spec = fallback_chain(p0, cap, (True,) * cap)
    assert spec.sum() == pytest.approx(1.0) and spec[-1] > plain[-1]
    assert float(np.arange(1, cap + 1) @ spec) > float(np.arange(1, cap + 1) @ plain)


def test_speculation_needs_a_load_longer_than_two_trees_of_drafting():
    """Under a budget that streams the target the draft has seconds to speculate: more tokens per round at
    the same load and verification time; with the target resident nothing streams and nothing changes."""
    p = problem()
    base = estimate(p, config(17, 16, memory_budget_gb=SWAP_ALL))
    spec = estimate(p, config(17, 16, memory_budget_gb=SWAP_ALL, speculate=1))
    assert spec.tokens_per_step > 1.05 * base.tokens_per_step
    assert spec.breakdown["load"] == pytest.approx(base.breakdown["load"])
    assert spec.tokens_per_s > base.tokens_per_s
    resident = estimate(p, config(17, 16, memory_budget_gb=8.0, speculate=1))
    assert resident.tokens_per_step == pytest.approx(estimate(p, config(17, 16, memory_budget_gb=8.0)).tokens_per_step)
    fast = with_storage_scale(TX2, 1e4)     # a load shorter than the drafting: nothing to speculate under
    fp = problem(fast)
    assert estimate(fp, config(17, 16, memory_budget_gb=SWAP_ALL, speculate=1)).tokens_per_step == pytest.approx(
        estimate(fp, config(17, 16, memory_budget_gb=SWAP_ALL)).tokens_per_step)


def test_adaptive_rounds_are_greedy_prefixes_reaching_each_depth():
    p = problem()
    cfg = STRATEGY.resolve(p, config(17, 16, memory_budget_gb=SWAP_ALL))
    rounds = STRATEGY.rounds(p, cfg)
    assert sum(r.weight for r in rounds) == pytest.approx(1.0)
    assert [main_branch_depth(r.tree) for r in rounds] == sorted(main_branch_depth(r.tree) for r in rounds)
    # the I/O-bound finding of the report: Eq. 3 resets alpha after every error and verifies early
    budget = estimate(p, config(17, 16, memory_budget_gb=SWAP_ALL, fallback="budget"))
    adaptive = estimate(p, config(17, 16, memory_budget_gb=SWAP_ALL))
    assert adaptive.tokens_per_step < budget.tokens_per_step


def test_rank_statistics_make_a_branching_tree():
    profile = AcceptanceModel(name="prof", source="test", draft_alpha=0.7, meta={"draft_rank_accuracy": [0.7, 0.12, 0.05]})
    p = problem(acceptance=profile)
    tree_cfg = STRATEGY.resolve(p, config(17, 8, memory_budget_gb=SWAP_ALL, fallback="budget"))
    chain_cfg = STRATEGY.resolve(problem(acceptance=load_acceptance("alpha:0.7")),
                                 config(9, 8, memory_budget_gb=SWAP_ALL, fallback="budget"))
    assert max(tree_cfg.tree.level_sizes) > 1 and max(chain_cfg.tree.level_sizes) == 1
    assert tree_cfg.tree.size == 17 and chain_cfg.tree.size == 9           # a chain of depth 8
    assert STRATEGY.estimate(p, tree_cfg).tokens_per_step > 1 + sum(0.7 ** d for d in range(1, 9))


def test_a_branching_tree_costs_one_draft_pass_per_internal_node():
    # the tree decoder feeds a node once and takes all its children from that pass: a tree of 17
    # tokens with branches costs fewer passes than its 16 drafted tokens (one pass each for a chain)
    from sim.strategies.chain import draft_cumulative, draft_seconds
    from sim.strategies.loop_passes import full_share_tree

    profile = AcceptanceModel(name="prof", source="test", draft_alpha=0.7, meta={"draft_rank_accuracy": [0.7, 0.12, 0.05]})
    p = problem(acceptance=profile)
    cfg = STRATEGY.resolve(p, config(17, 8, fallback="budget"))
    assert cfg.tree.n_internal < cfg.tree.size - 1
    draft = STRATEGY._draft(p, cfg)
    sim = simulate(p, "draft-tree", config(17, 8, fallback="budget"), steps=1)
    drafted = sum(r.end_s - r.start_s for r in sim.run.task_runs if r.task.phase == "draft")
    # one pass per internal node; a round after a full one feeds a lag of two tokens first, by its share
    first, second = draft_cumulative(p, draft, cfg.draft_device, cfg.tree.n_internal, "draft-tree")
    share = float(full_share_tree(p.acceptance, cfg.tree.n_internal))
    assert second[-1] > first[-1] == pytest.approx(draft_seconds(p, draft, cfg.draft_device, cfg.tree.n_internal))
    assert drafted == pytest.approx((1 - share) * first[-1] + share * second[-1], rel=1e-9)
    assert drafted < draft_seconds(p, draft, cfg.draft_device, cfg.tree.size - 1)
    # the estimate says how many passes it priced: the tree's internal nodes
    assert STRATEGY.estimate(p, cfg).draft_passes_per_step == cfg.tree.n_internal


@pytest.mark.parametrize("staging", [None, 1])
def test_adaptive_rounds_count_their_weighted_internal_nodes_as_draft_passes(staging):
    p = problem()
    knobs = {"memory_budget_gb": SWAP_ALL} if staging is None else {"memory_budget_gb": 2.0, "staging": staging}
    cfg = STRATEGY.resolve(p, config(17, 16, **knobs))
    rounds = STRATEGY.rounds(p, cfg)
    assert len(rounds) > 1
    want = sum(r.weight * r.tree.n_internal for r in rounds)
    est = STRATEGY.estimate(p, cfg)
    assert est.draft_passes_per_step == pytest.approx(want, rel=1e-12)
    assert est.proposed_per_step == pytest.approx(sum(r.weight * (r.tree.size - 1) for r in rounds), rel=1e-12)


# ---------------------------------------------------------------------- engine
@pytest.mark.parametrize("options", [
    {"fallback": "budget", "memory_budget_gb": SWAP_ALL},
    {"fallback": "budget", "memory_budget_gb": 1.5, "pipeline": 0},
    {"variant": "std", "memory_budget_gb": 1.0},
    {"fallback": "budget"},
])
def test_engine_equals_the_closed_form(options):
    sim = simulate(problem(), "draft-tree", config(9, 8, **options), steps=2)
    assert sim.engine_step_s == pytest.approx(sim.closed_form_step_s, rel=1e-9)
    assert sim.run.tokens_per_s == pytest.approx(sim.estimate.tokens_per_s, rel=0.3)


def test_pipeline_overlaps_the_load_with_drafting_in_the_trace():
    run = simulate(problem(), "draft-tree", config(9, 8, fallback="budget", memory_budget_gb=SWAP_ALL),
                   steps=1).run
    load = next(r for r in run.task_runs if r.task.name == "load")
    drafts = [r for r in run.task_runs if r.task.phase == "draft"]
    verify = [r for r in run.task_runs if r.task.phase == "verify"]
    assert load.start_s == 0.0 and drafts[0].start_s == 0.0               # together from the round's start
    assert min(r.start_s for r in verify) >= max(load.end_s, max(r.end_s for r in drafts))   # never concurrent


def test_drawn_rounds_average_to_the_expectation():
    sim = simulate(problem(), "draft-tree", config(17, 16, memory_budget_gb=SWAP_ALL), steps=400, seed=2,
                   op_records=False)
    assert np.mean(sim.run.step_s) == pytest.approx(sim.closed_form_step_s, rel=0.01)
    assert np.mean(sim.run.tokens) == pytest.approx(sim.estimate.tokens_per_step, rel=0.1)


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("cfg,error,message", [
    (config(memory_budget_gb=0.3), HetSpecError, "memory budget 0.30 GB is too small: it must hold the draft model gpt2"),
    (config(variant="beam"), UnknownNameError, "unknown draft-tree variant 'beam'"),
    (config(fallback="never"), UnknownNameError, "unknown draft-tree fallback 'never'"),
    (config(pipeline=2), HetSpecError, "option pipeline must be 0 or 1"),
    (config(speculate=2), HetSpecError, "option speculate must be 0 or 1"),
    (config(speculate=1, pipeline=0), HetSpecError, "speculate=1 needs pipeline=1 and no staging"),
    (config(speculate=1, staging=1), HetSpecError, "speculate=1 needs pipeline=1 and no staging"),
    (config(fallback="threshold", alpha0=1.5), HetSpecError, r"option alpha0 must be in \(0, 1\)"),
    (config(memory_budget_gb=-1), HetSpecError, "memory_budget_gb must be a number > 0"),
    (config(width=1), HetSpecError, r"tree budget \(tree_width\) must be >= 2"),
    (config(width=20, depth=8), HetSpecError, "a tree of depth <= 8 with 1 candidate rank"),
    (StrategyConfig(method="draft-tree", tree_shape="dp", tree_width=4), HetSpecError, "tree shape must be greedy or chain"),
])
def test_bad_configs_are_one_line(cfg, error, message):
    with pytest.raises(error, match=message):
        STRATEGY.resolve(problem(), cfg)


def test_missing_acceptance_and_storage_are_clear():
    with pytest.raises(HetSpecError, match="method draft-tree needs an acceptance model"):
        STRATEGY.resolve(problem(acceptance=None), config())
    assert STRATEGY.resolve(problem(acceptance=None), config(variant="std")).tree_width == 1
    n150 = get_platform("tenstorrent-n150x8")       # no storage link: weights cannot stream
    p = Problem(get_model("llama3.1-8b"), n150, ALPHA, context=128)
    with pytest.raises(HetSpecError, match="has no storage link to n150_0"):
        STRATEGY.resolve(p, config(memory_budget_gb=4.0, variant="std"))


def test_resident_policy_none_rereads_the_whole_target():
    keep = estimate(problem(), config(variant="std", memory_budget_gb=2.0))
    none = estimate(problem(), config(variant="std", memory_budget_gb=2.0, resident="none"))
    assert none.breakdown["load"] > keep.breakdown["load"] > 0
    full = load_acceptance("alpha:0.8")
    assert STRATEGY.resolve(problem(acceptance=full), config(resident="none")).options["resident"] == "none"
    with pytest.raises(UnknownNameError, match="unknown draft-tree resident policy 'some'"):
        STRATEGY.resolve(problem(), config(resident="some"))
