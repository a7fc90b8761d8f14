"""A draft's passes measured inside the decode loop (a profile's ``draft_pass_*`` rows): how the simulator prices
them (sim.strategies.loop_passes), how the profile reads them, and the probe that measures them
(real.validation.profiler.draft_loop)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from hwmodels.errors import PresetError
from hwmodels.loader import load_platform_file
from hwmodels.profile import read_profile, write_profile
from sim.acceptance_loader import load_acceptance
from sim.closed_form import step_seconds
from sim.engine import simulate
from sim.model_spec import get_model
from sim.step_graph import build_step_graph, forward_key
from sim.step_timing import price_step
from sim.strategies import get_strategy
from sim.strategies.base import Problem, StrategyConfig
from sim.strategies.chain import draft_cumulative, draft_pass_seconds
from sim.strategies.loop_passes import full_share_chain, full_share_tree, measured_passes
from paths import DATA

DATA = DATA
EAGER = load_platform_file(DATA / "h100-sxm-eager.toml")
DRAFT = get_model("llama-68m")
CONTEXT = 70
#: measured pass times (us) by index in the round: after a rejection, after a round accepting every draft
AFTER_REJECTION = [900.0, 800.0, 700.0]
AFTER_FULL = [1000.0, 810.0, 705.0]


def _platform(tmp_path: Path, rows=None):
    """EAGER with its ``gpu`` profile replaced by one holding only draft_pass rows of the draft (and a launch cost)."""
    key = forward_key(DRAFT)
    rows = rows if rows is not None else (
        [(op, key, j + 1, CONTEXT, us, 0.0, float("nan")) for op, times in
         (("draft_pass_chain", AFTER_REJECTION), ("draft_pass_chain_full", AFTER_FULL),
          ("draft_pass_tree", AFTER_REJECTION), ("draft_pass_tree_full", AFTER_FULL)) for j, us in enumerate(times)])
    path = write_profile(tmp_path / "loop.csv", {"dtype": "fp16", "source": "test", "launch_us.eager": "10",
                                                 "launch_us.eager.source": "test"}, rows)
    dev = EAGER.device("gpu")
    return EAGER.with_device(replace(dev, timing=replace(dev.timing, profile=read_profile(path))))


def _problem(platform, context=CONTEXT, acceptance="alpha:0.7", batch=1):
    return Problem(get_model("vicuna-7b"), platform, load_acceptance(acceptance), context=context, batch=batch)


def test_a_pass_at_the_probes_context_costs_what_was_measured(tmp_path):
    p = _problem(_platform(tmp_path))
    got = draft_pass_seconds(p, DRAFT, "gpu", 5)
    # beyond the measured indices the last one holds
    np.testing.assert_allclose(got, np.array([900, 800, 700, 700, 700]) * 1e-6, rtol=1e-12)
    np.testing.assert_allclose(draft_pass_seconds(p, DRAFT, "gpu", 3, full=True), np.array(AFTER_FULL) * 1e-6,
                               rtol=1e-12)


def test_at_another_context_the_rows_price_the_difference(tmp_path):
    plat = _platform(tmp_path)
    p = _problem(plat, context=CONTEXT + 900)
    got = draft_pass_seconds(p, DRAFT, "gpu", 3)
    for j in range(3):
        moved = float(step_seconds(DRAFT, plat, "gpu", 1, CONTEXT + 900 + j) - step_seconds(DRAFT, plat, "gpu", 1, CONTEXT + j))
        assert moved > 0
        assert got[j] == pytest.approx(AFTER_REJECTION[j] * 1e-6 + moved, rel=1e-12)


def test_no_rows_no_change(tmp_path):
    """A roofline device, a batch the probe did not run and another dtype keep the forward's price."""
    plat = _platform(tmp_path)
    assert measured_passes(_problem(EAGER), DRAFT, "cpu", "chain") is None
    assert measured_passes(_problem(plat, batch=2), DRAFT, "gpu", "chain") is None
    assert measured_passes(_problem(plat), DRAFT.with_dtype("fp32"), "gpu", "chain") is None
    assert measured_passes(_problem(plat), DRAFT, "gpu", "medusa") is None
    # without rows the passes are the forward's price; after a full round the first feeds the two-token lag
    first, second = draft_cumulative(_problem(EAGER), DRAFT, "gpu", 3)
    one = [float(step_seconds(DRAFT, EAGER, "gpu", 1, _problem(EAGER).context + j)) for j in range(3)]
    assert np.allclose(np.diff(first), one, rtol=1e-12)
    lag = float(step_seconds(DRAFT, EAGER, "gpu", 2, _problem(EAGER).context))
    assert np.allclose(np.diff(second), [lag] + one[1:], rtol=1e-12) and lag > one[0]


def test_the_rounds_after_full_acceptance_fall_back_to_the_other_kind(tmp_path):
    key = forward_key(DRAFT)
    plat = _platform(tmp_path, [("draft_pass_chain", key, j + 1, CONTEXT, us, 0.0, float("nan"))
                                for j, us in enumerate(AFTER_REJECTION)])
    np.testing.assert_allclose(draft_pass_seconds(_problem(plat), DRAFT, "gpu", 3, full=True),
                               np.array(AFTER_REJECTION) * 1e-6, rtol=1e-12)


def test_the_share_after_full_acceptance():
    alpha = load_acceptance("alpha:0.7")
    assert full_share_chain(alpha, 3) == pytest.approx(0.7 ** 3)
    np.testing.assert_allclose(full_share_chain(alpha, np.array([1, 2])), [0.7, 0.49])
    table = replace(alpha, chain_length_table=((1, 1.8), (2, 2.4), (3, 2.85)))
    # E[tokens](gamma) = 1 + sum_k P(first k accepted): the last difference is P(all gamma accepted)
    assert full_share_chain(table, 1) == pytest.approx(0.8)
    assert full_share_chain(table, 3) == pytest.approx(0.45)
    assert full_share_chain(table, 5) == pytest.approx(0.7 ** 5)       # not in the table: alpha^gamma
    np.testing.assert_allclose(full_share_tree(alpha, np.array([0, 2])), [1.0, 0.49])


def test_a_chain_round_mixes_both_kinds_by_that_share(tmp_path):
    p = _problem(_platform(tmp_path))
    strategy = get_strategy("chain")
    config = strategy.resolve(p, StrategyConfig(draft_depth=3, draft_device="gpu"))
    share = 0.7 ** 3
    want = ((1 - share) * sum(AFTER_REJECTION) + share * sum(AFTER_FULL)) * 1e-6
    assert strategy.estimate(p, config).breakdown["draft"] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("method,config", [
    ("chain", StrategyConfig(draft_depth=2)),
    ("chain", StrategyConfig(draft_depth=5)),
    ("draft-tree", StrategyConfig(tree_width=5, draft_depth=4, options={"fallback": "budget"})),
])
def test_engine_and_closed_form_agree_with_measured_passes(tmp_path, method, config):
    sim = simulate(_problem(_platform(tmp_path), context=300), method, config, steps=2)
    assert sim.engine_step_s == pytest.approx(sim.closed_form_step_s, rel=1e-9)


def test_estimate_many_equals_estimate_with_measured_passes(tmp_path):
    p = _problem(_platform(tmp_path), context=500)
    strategy = get_strategy("chain")
    configs = [strategy.resolve(p, StrategyConfig(draft_depth=g)) for g in (1, 3, 8)]
    many = strategy.estimate_many(p, configs)
    for i, c in enumerate(configs):
        assert many.step_s[i] == pytest.approx(strategy.estimate(p, c).step_s, rel=1e-12)


def test_the_profile_reads_keys_of_loop_pass_rows_only(tmp_path):
    key = forward_key(DRAFT)
    header = {"dtype": "fp16", "source": "test"}
    prof = read_profile(write_profile(tmp_path / "ok.csv", header, [("draft_pass_tree", key, 1, 64, 5.0, 0.0, 0.0),
                                                                    ("verify_pass_chain", key, 9, 64, 5.0, 0.0, 0.0)]))
    assert prof.table("draft_pass_tree", key).lines[0][0] == 64
    assert prof.table("verify_pass_chain", key).lines[0][0] == 64
    bad = tmp_path / "bad.csv"
    bad.write_text("# format: hetspec-op-profile/1\n# dtype: fp16\n# source: test\n"
                   "op,shape,tokens,keys,kernel_us,eager_launch_us,graph_launch_us\nnorm,768,1,64,5.0,0,0\n")
    with pytest.raises(PresetError, match=r"bad\.csv.*row 1.*keys.*only attention, draft_pass and verify_pass rows have keys"):
        read_profile(bad)
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("# format: hetspec-op-profile/1\n# dtype: fp16\n# source: test\n"
                     "op,shape,tokens,keys,kernel_us,eager_launch_us,graph_launch_us\n"
                     "draft_pass_chain,768x768,1,64,5.0,0,0\n")
    with pytest.raises(PresetError, match=r"shape.*L<layers>H<hidden>"):
        read_profile(wrong)


def test_the_probe_times_every_pass_of_rounds_that_accept_all_or_nothing(tmp_path):
    """Random-weight tiny demo models; the LM-head hooks decide acceptance: every draft accepted moves the context
    by a whole round a round, every draft rejected by one token."""
    from real.decode.common import DecodeModels
    from real.model.transformer import Transformer
    from real.validation.profiler.draft_loop import (PASSES, PROMPT_TOKENS, ROUNDS, demo_pairs, draft_pass_rows, pass_medians,
                                            time_loop_passes)

    torch.set_num_threads(1)
    (target, draft), = demo_pairs(["tiny:ignored", "demo:tiny"])
    torch.manual_seed(0)
    models = DecodeModels(Transformer(target).eval(), Transformer(draft).eval())
    timed = []
    for method in ("chain", "draft-tree"):
        for full in (False, True):
            rounds = time_loop_passes(models, method, full, repeats=1)
            assert len(rounds) == ROUNDS
            context, ratios, verify = pass_medians(rounds)
            # each pass over its standalone twin: the same forward, so the same order of time (a busy machine has
            # read the twin 3x the pass; never 10x apart either way)
            assert len(ratios) == PASSES and all(0.1 < r < 10.0 for r in ratios) and 0.1 < verify < 10.0
            # kept rounds 1..ROUNDS, each after a round that emitted PASSES + 1 tokens (all accepted) or 1
            per_round = PASSES + 1 if full else 1
            assert context == int(np.median([PROMPT_TOKENS + per_round * s for s in range(1, ROUNDS + 1)]))
            timed.append((f"draft_pass_{'chain' if method == 'chain' else 'tree'}{'_full' if full else ''}", target,
                          draft, context, ratios, verify))
    assert models.target.lm_head._forward_hooks == {} and models.draft.lm_head._forward_hooks == {}
    device = EAGER.device("gpu")
    prof = read_profile(write_profile(tmp_path / "p.csv", {"dtype": "fp32", "source": "test"},
                                      draft_pass_rows(timed, device)))
    keys, index, kernel_us = prof.table("draft_pass_tree_full", forward_key(draft)).lines[0][:3]
    assert list(index) == list(range(1, PASSES + 1))
    # a row is its ratio times the device's price of the standalone forward at the rounds' context
    pass_s = price_step(build_step_graph(draft, 1, int(keys)), device).total_s
    assert kernel_us[0] == pytest.approx(timed[3][4][0] * pass_s * 1e6, rel=1e-3)
    # each round's verification of PASSES + 1 tokens is a row of the target
    keys, tokens, kernel_us = prof.table("verify_pass_chain", forward_key(target)).lines[0][:3]
    verify_s = price_step(build_step_graph(target, PASSES + 1, int(keys)), device).total_s
    assert list(tokens) == [PASSES + 1] and kernel_us[0] == pytest.approx(timed[0][5] * verify_s * 1e6, rel=1e-3)


def test_a_standalone_twin_is_timed_per_call_after_its_warm_calls():
    """Under a fake clock each call of the twin advances by its pace: the twin reads exactly that per call,
    whatever the pace, and only the timed calls count."""
    from real.validation.profiler.draft_loop import TWIN_CALLS, twin_seconds

    now = [0.0]

    def clock() -> float:
        return now[0]

    def step_at(seconds: float):
        def step():
            now[0] += seconds
        return step

    for pace in (1.0, 2.0, 7.5):
        twin = twin_seconds(step_at(1e-3 * pace), clock=clock)
        assert twin == pytest.approx(1e-3 * pace)
    calls = []
    twin_seconds(lambda: calls.append(1), calls=TWIN_CALLS, clock=clock)
    assert len(calls) >= TWIN_CALLS + 2          # warm calls, then the timed ones


def test_the_passes_before_and_after_the_rows_are_pooled():
    """Rounds timed before the operator rows and after them: the medians of both together, per op and draft."""
    from real.validation.profiler.draft_loop import PASSES, bracketed_passes

    def passes(first: float, second: float) -> list[float]:
        return [first, second] + [0.1] * (PASSES - 2)

    target = get_model("vicuna-7b")
    before = [("draft_pass_chain", target, DRAFT, [(64, passes(1.0, 0.5), 4.0), (66, passes(3.0, 0.7), 6.0)])]
    after = [("draft_pass_chain", target, DRAFT, [(68, passes(2.0, 0.6), 5.0)]), ("draft_pass_tree", target, DRAFT, [])]
    assert bracketed_passes(before, after) == [("draft_pass_chain", target, DRAFT, 66, passes(2.0, 0.6), 5.0)]


def test_a_verification_inside_the_loop_adds_what_it_costs_beyond_its_priced_pass(tmp_path):
    """The verify_pass rows (the loop rounds' verifications) less the profile's price of the same pass, the mean
    of both kinds of round, on every verification of that loop; none without the rows, never below 0."""
    from sim.strategies.loop_passes import loop_verify_excess

    target = get_model("vicuna-7b")
    base = _problem(_platform(tmp_path))
    priced = float(step_seconds(target, base.platform, "gpu", 9, CONTEXT))
    assert loop_verify_excess(base, "gpu", "chain") == 0.0            # no verify_pass rows
    key, draft_key = forward_key(target), forward_key(DRAFT)
    rows = [("draft_pass_chain", draft_key, j + 1, CONTEXT, us, 0.0, float("nan")) for j, us in enumerate(AFTER_REJECTION)]
    rows += [("verify_pass_chain", key, 9, CONTEXT, priced * 1e6 + 300.0, 0.0, float("nan")),
             ("verify_pass_chain_full", key, 9, CONTEXT, priced * 1e6 + 500.0, 0.0, float("nan")),
             ("verify_pass_tree", key, 9, CONTEXT, priced * 1e6 - 900.0, 0.0, float("nan"))]
    p = _problem(_platform(tmp_path, rows))
    assert float(step_seconds(target, p.platform, "gpu", 9, CONTEXT)) == pytest.approx(priced)   # rows not priced
    assert loop_verify_excess(p, "gpu", "chain") == pytest.approx(400e-6, rel=1e-4)   # the rows keep 4 decimals
    assert loop_verify_excess(p, "gpu", "draft-tree") == 0.0          # measured below its price: nothing added
    assert loop_verify_excess(p, "gpu", "medusa") == 0.0
    assert loop_verify_excess(_problem(_platform(tmp_path, rows), batch=2), "gpu", "chain") == 0.0
    strategy = get_strategy("chain")
    config = strategy.resolve(p, StrategyConfig(draft_depth=3))
    plain = strategy.resolve(base, StrategyConfig(draft_depth=3))
    assert strategy.estimate(p, config).breakdown["verify"] == pytest.approx(
        strategy.estimate(base, plain).breakdown["verify"] + 400e-6, rel=1e-6)
