"""``hetspec reproduce llmcad``: the fitted preset numbers are what Table 1 implies, the key
predictions stay within their reported error, and the choices are as reported."""

from __future__ import annotations

import pytest

from hwmodels.loader import get_platform
from sim.reproduce import llmcad, run
from sim.strategies.draft_tree import storage_link


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    rep, path = run("llmcad", tmp_path_factory.mktemp("llmcad"))
    return rep, path


def row(rep, quantity):
    matches = [c for c in rep.comparisons if c.quantity.startswith(quantity)]
    assert len(matches) == 1, quantity
    return matches[0]


def test_presets_hold_the_fits_table_1_implies():
    fits = llmcad.implied_fits()
    tx2, phone = get_platform("jetson-tx2"), get_platform("snapdragon865")
    assert tx2.device("gpu").op_overhead_us == pytest.approx(fits["tx2_gpu_op_overhead_us"], rel=0.01)
    assert storage_link(tx2, "gpu").efficiency == pytest.approx(fits["tx2_emmc_efficiency"], rel=0.01)
    assert storage_link(phone, "cpu").efficiency == pytest.approx(fits["phone_ufs_efficiency"], rel=0.01)
    assert "fitted: LLMCad Table 1" in storage_link(tx2, "gpu").sources["efficiency"]


def test_fitted_rows_are_marked_and_listed(report):
    rep, _ = report
    assert len(rep.fits) == 3
    for q in ("TX2 GPT2 (fp32", "TX2 GPT2-Large (fp32", "Xiaomi 10 LLaMa-13B 4-bit", "TX2 speed gap"):
        r = row(rep, q)
        assert r.kind == "fit" and abs(r.rel_error) < 0.005


def test_key_predictions_within_their_reported_error(report):
    rep, _ = report
    assert abs(row(rep, "TX2 T5-Large").rel_error) < 0.05
    assert abs(row(rep, "Xiaomi 10 LLaMa-33B 4-bit").rel_error) < 0.20
    assert abs(row(rep, "phone speed gap").rel_error) < 0.05
    assert row(rep, "Xiaomi 10 LLaMa-7B 4-bit").rel_error < -0.3          # the miss the report explains
    for q in ("TX2 GPT2-Large: share", "Xiaomi 10 LLaMa-13B: share", "Xiaomi 10 LLaMa-33B: share"):
        assert 95.9 <= row(rep, q).hetspec <= 98.8
    assert 8.5 <= row(rep, "Xiaomi 10 LLaMa-13B: NAV").hetspec <= 9.9
    assert abs(row(rep, "TX2 tree generation + verification").rel_error) < 0.10
    assert rep.median_abs_rel_error < 0.20


def test_choices_as_reported(report):
    rep, _ = report
    assert row(rep, "TX2 LLMCad over Std inside").matched
    fallback = row(rep, "TX2 self-adaptive fallback")
    assert not fallback.matched and "alpha_0 = 0.01" in fallback.note   # against §3.3's fixed trigger, not an oracle
    assert row(rep, "Xiaomi 10 LLaMA2: gain over StdPL").matched
    tx2 = row(rep, "TX2: gain over StdPL larger at 4 GB")       # the proxy pair fits both budgets: no trend
    assert tx2.kind == "choice" and not tx2.matched and "fits both budgets" in tx2.note
    s = rep.summary()
    assert (s["choices_reproduced"], s["choices"], s["fit_rows"], s["consistency_checks"]) == (2, 4, 4, 0)


def test_tx2_budgets_stream_nothing_of_the_proxy_pair():
    """Fig. 14's TX2 budgets (6 and 4 GB) hold GPT2-Large and GPT2 whole (3.6 GB of fp32 weights): nothing
    streams, LLMCad over StdPL is the same at both, far under the paper's 5.54x / 6.12x."""
    gains = llmcad.tx2_budget_gains(0.8)
    assert gains[4.0]["needs_gb"] == pytest.approx(3.6, abs=0.05)
    for b in (4.0, 6.0):
        assert gains[b]["streamed_gb"] == 0.0
        assert 1.0 < gains[b]["vs_stdpl"] < 0.5 * llmcad.FIG14_TX2[b]
    assert gains[4.0]["vs_stdpl"] == pytest.approx(gains[6.0]["vs_stdpl"])


def test_speculative_generation_moves_the_memory_budget_gain_little():
    """§3.4's drafting during the verification's load, priced from the presets: at 4 GB the ~9 s load already
    hides the rounds' own drafting, so speculation only lengthens the verified tree after a round without error
    (1.40x -> 1.49x over StdPL at alpha 0.80), far from Fig. 14's 4.72x; at 6 GB LLMCad still loses."""
    with_spec, without = llmcad.phone_budget_sweep(0.8), llmcad.phone_budget_sweep(0.8, speculate=0)
    i4, i6 = llmcad.PHONE_BUDGETS_GB.index(4.0), llmcad.PHONE_BUDGETS_GB.index(6.0)
    assert without[i4] == pytest.approx(1.40, abs=0.02) and with_spec[i4] == pytest.approx(1.49, abs=0.02)
    assert all(a > b for a, b in zip(with_spec, without))
    assert with_spec[i6] < 1.0 < with_spec[i4] < 0.5 * llmcad.FIG14_PHONE_4GB


def test_the_draft_grows_a_tree_from_per_rank_acceptance():
    """Rank 0 is the paper's 0.80; ranks 1-2 share the rest as the measured demo draft's misses do."""
    acc = llmcad.acceptance_at(0.8)
    ranks = acc.meta["draft_rank_accuracy"]
    assert ranks[0] == acc.draft_alpha == 0.8 and len(ranks) == 3 and sum(ranks) < 1.0
    assert ranks[1] == pytest.approx(0.2 * 0.087 / (1 - 0.8636), abs=1e-4)
    other = llmcad.acceptance_at(0.9).meta["draft_rank_accuracy"]
    assert other[0] == 0.9 and other[1] / other[2] == pytest.approx(ranks[1] / ranks[2], rel=1e-3)
    best = llmcad.best_llmcad(llmcad.TX2, "gpt2-large", "gpt2", llmcad.IOT_DTYPE, 0.8, fallback="threshold", pipeline=0)
    chain = llmcad.best_llmcad(llmcad.TX2, "gpt2-large", "gpt2", llmcad.IOT_DTYPE, 0.8, fallback="threshold",
                               pipeline=0, tree_shape="chain", tree_width=best["width"])
    assert best["tokens_per_step"] > chain["tokens_per_step"]


def test_report_files(report):
    rep, path = report
    text = path.read_text()
    assert "What the paper does not give" in text and "fitted" in text
    for fig in rep.figures:
        assert (path.parent / fig.filename).stat().st_size > 10_000
