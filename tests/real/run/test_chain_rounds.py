"""The end of a generation in greedy chain decoding: the replayed rounds (real.run.acceptance) draft
no more than is left to emit, and the chain strategy prices a profile's round kinds one by one."""

from __future__ import annotations

import numpy as np
import pytest

from hwmodels.errors import HetSpecError
from hwmodels.loader import get_platform
from real.run.acceptance import chain_round_passes, chain_rounds_table, replay_chain_rounds
from sim.acceptance import AcceptanceModel
from sim.model_spec import get_model
from sim.strategies import get_strategy
from sim.strategies.base import Problem, StrategyConfig
from sim.strategies.chain import chain_rounds

ROUNDS_4 = [[2, 0.25], [4, 0.75]]


def _problem(meta: dict) -> Problem:
    acc = AcceptanceModel(name="p", source="test", draft_alpha=0.8, meta=meta)
    return Problem(get_model("gpt2-large"), get_platform("jetson-tx2"), acc, context=128, dtype="fp32")


def test_the_last_rounds_of_a_generation_draft_what_is_left():
    hits = np.ones(40, dtype=bool)
    # 1 emitted by the prefill; 3 drafted and accepted + the target's: 5, then 9; one token left: none drafted
    assert chain_round_passes(hits, 3, 10) == [3, 3, 0]
    assert chain_round_passes(hits, 3, 11) == [3, 3, 1]
    misses = np.zeros(40, dtype=bool)            # every proposal rejected: one token a round
    assert chain_round_passes(misses, 2, 5) == [2, 2, 1, 0]


def test_the_table_gives_each_kind_its_share_of_the_rounds():
    scored = [{"draft_hit": np.ones(40, dtype=bool)}, {"draft_hit": np.zeros(40, dtype=bool)}]
    table = chain_rounds_table(replay_chain_rounds(scored, 5))
    # gamma 2, all hits: 1 + 3 emitted, one left: [2, 0]; all misses: [2, 2, 1, 0]
    assert chain_round_passes(scored[0]["draft_hit"], 2, 5) == [2, 0]
    assert table["2"] == [[0, pytest.approx(2 / 6, abs=1e-6)], [1, pytest.approx(1 / 6, abs=1e-6)],
                          [2, pytest.approx(3 / 6, abs=1e-6)]]
    assert sorted(table, key=int) == [str(g) for g in range(1, 9)]
    for rows in table.values():
        assert sum(w for _, w in rows) == pytest.approx(1.0, abs=1e-5)


def test_the_strategy_prices_each_kind_of_round_at_its_draft_passes():
    strategy = get_strategy("chain")
    plain, replayed = _problem({}), _problem({"chain_rounds": {"4": ROUNDS_4}})

    def estimate(problem, gamma, draft_device="gpu"):
        cfg = strategy.resolve(problem, StrategyConfig(method="chain", draft_depth=gamma, device="gpu",
                                                       draft_device=draft_device))
        return cfg, strategy.estimate(problem, cfg)

    for draft_device in ("gpu", "cpu"):           # with the draft on the other device, the ids' transfers too
        cfg, est = estimate(replayed, 4, draft_device)
        two, four = estimate(plain, 2, draft_device)[1], estimate(plain, 4, draft_device)[1]
        # every kind of round at gamma 4 follows a full round with gamma 4's share (its first pass then feeds
        # the two-token lag), where a plain gamma-2 round has gamma 2's
        from sim.strategies.chain import draft_pass_seconds
        from sim.strategies.loop_passes import full_share_chain

        draft = get_model(cfg.draft_model)
        lag = float(draft_pass_seconds(plain, draft, draft_device, 1, "chain", True)[0]
                    - draft_pass_seconds(plain, draft, draft_device, 1, "chain")[0])
        shift = 0.25 * (full_share_chain(replayed.acceptance, 4) - full_share_chain(plain.acceptance, 2)) * lag
        assert lag > 0
        assert est.step_s == pytest.approx(0.25 * two.step_s + 0.75 * four.step_s + shift, rel=1e-12)
        assert est.draft_passes_per_step == pytest.approx(3.5) and est.proposed_per_step == pytest.approx(3.5)
        assert est.tokens_per_step == pytest.approx(four.tokens_per_step)    # tokens: the chain table, unchanged
        assert sum(est.breakdown.values()) == pytest.approx(est.step_s)
        many = strategy.estimate_many(replayed, [cfg, strategy.resolve(replayed, StrategyConfig(
            method="chain", draft_depth=3, device="gpu", draft_device=draft_device))])
        assert many.step_s[0] == pytest.approx(est.step_s, rel=1e-12)
        assert many.step_s[1] == pytest.approx(estimate(plain, 3, draft_device)[1].step_s, rel=1e-12)  # no kinds at 3
        assert many.proposed_per_step.tolist() == pytest.approx([3.5, 3.0])
    assert estimate(plain, 4)[1].draft_passes_per_step == 4.0


def test_an_engine_round_draws_its_kind_by_share():
    strategy = get_strategy("chain")
    problem = _problem({"chain_rounds": {"3": [[0, 0.5], [3, 0.5]]}})
    cfg = strategy.resolve(problem, StrategyConfig(method="chain", draft_depth=3, device="gpu", draft_device="cpu"))
    rng = np.random.default_rng(0)
    plans = [strategy.plan(problem, cfg, rng) for _ in range(200)]
    drafted = np.array([p.tokens_proposed for p in plans])
    assert set(drafted.tolist()) == {0, 3} and 0.35 < drafted.mean() / 3 < 0.65
    for plan in plans:
        passes = [t for t in plan.tasks if t.phase == "draft"]
        assert (len(passes) > 0) == (plan.tokens_proposed > 0)
        assert 1 <= plan.tokens_accepted <= plan.tokens_proposed + 1
    assert strategy.plan(problem, cfg).tokens_proposed == 0             # the likeliest kind (a tie: the first)


@pytest.mark.parametrize("rows, message", [
    ([[2, 0.5], [4, 0.4]], "shares must sum to 1"),
    ([[5, 1.0]], "impossible"),                  # more passes than gamma
    ([[2, -0.5], [4, 1.5]], "impossible"),
    ([[2]], "kinds must be"),
])
def test_a_profiles_chain_rounds_are_validated(rows, message):
    with pytest.raises(HetSpecError, match=message) as info:
        chain_rounds({"chain_rounds": {"4": rows}}, 4)
    assert "\n" not in str(info.value) and "chain_rounds[4]" in str(info.value)
    assert chain_rounds({"chain_rounds": {"4": ROUNDS_4}}, 3) is None and chain_rounds(None, 4) is None
