"""Acceptance models: Omega, tree acceptance against Monte Carlo, tables and their limits, the
paper presets by name, profiles from the real path, and clear errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from hwmodels.errors import HetSpecError, PresetError, UnknownNameError
from sim.acceptance import AcceptanceModel, acceptance_names, expected_tokens_from_node_probs, omega, preset_dir
from sim.acceptance_loader import load_acceptance
from sim.acceptance_profile import AcceptanceProfile, ConfidenceBin
from sim.tree import TokenTree

ACC = np.array([[0.55, 0.15, 0.08, 0.05],
                [0.40, 0.14, 0.07, 0.04],
                [0.30, 0.12, 0.06, 0.03]])
MODEL = AcceptanceModel(name="test", source="test", medusa_accuracy=tuple(map(tuple, ACC)))


# ---------------------------------------------------------------------- Omega
def test_omega_formula_values_and_limits():
    assert omega(0, 0.7) == pytest.approx(1.0)
    assert omega(1, 0.7) == pytest.approx(1.7)
    assert omega(4, 0.5) == pytest.approx(1 + 0.5 + 0.25 + 0.125 + 0.0625)
    assert omega(5, 1.0) == pytest.approx(6.0)
    assert omega(3, 0.0) == pytest.approx(1.0)
    assert np.allclose(omega(np.arange(1, 5), 0.8), [(1 - 0.8 ** (g + 1)) / 0.2 for g in range(1, 5)])
    with pytest.raises(HetSpecError, match="omega needs"):
        omega(2, 1.5)


def test_chain_draws_match_omega():
    model = load_acceptance("alpha:0.8")
    rng = np.random.default_rng(0)
    draws = [model.sample_chain_tokens(5, rng) for _ in range(20000)]
    assert min(draws) >= 1 and max(draws) <= 6
    assert np.mean(draws) == pytest.approx(omega(5, 0.8), abs=4 * np.std(draws) / math.sqrt(len(draws)))


# ---------------------------------------------------------------------- trees
def monte_carlo(tree: TokenTree, acc: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Per depth draw the correct rank (or none) from the accuracy row, walk the tree (independent
    of the model's own sampler)."""
    rng = np.random.default_rng(seed)
    depth = acc.shape[0]
    probs = np.concatenate([acc, 1 - acc.sum(axis=1, keepdims=True)], axis=1)
    correct = np.array([rng.choice(acc.shape[1] + 1, size=n, p=probs[d]) for d in range(depth)])   # [depth, n]
    child = {(tree.parents[i], tree.ranks[i]): i for i in range(1, tree.size)}
    out = np.ones(n)
    for k in range(n):
        node = 0
        for d in range(depth):
            node = child.get((node, int(correct[d, k])), -1)
            if node < 0:
                break
            out[k] += 1
    return out


@pytest.mark.parametrize("tree", [TokenTree.greedy(ACC, 20), TokenTree.cartesian((3, 2, 2)), TokenTree.chain(3),
                                  TokenTree.from_choices([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)])])
def test_tree_expectation_matches_monte_carlo(tree):
    exact = MODEL.tree_tokens(tree)
    mc = monte_carlo(tree, ACC, 20000, seed=1)
    assert exact == pytest.approx(mc.mean(), abs=4 * mc.std() / math.sqrt(mc.size) + 1e-9)
    rng = np.random.default_rng(2)
    drawn = np.array([MODEL.sample_tree_tokens(tree, rng) for _ in range(8000)])
    assert exact == pytest.approx(drawn.mean(), abs=4 * drawn.std() / math.sqrt(drawn.size) + 1e-9)
    assert drawn.max() <= tree.depth + 1


def test_profile_that_does_not_fit_the_tree_is_one_line():
    deep = TokenTree.chain(4)
    with pytest.raises(HetSpecError, match="does not fit the tree.*3 depths but the tree is 4 deep"):
        MODEL.tree_tokens(deep)
    wide = TokenTree.from_choices([(0,), (1,), (2,), (3,), (4,)])
    with pytest.raises(HetSpecError, match="4 ranks but the tree uses rank 4"):
        MODEL.check_tree(wide)
    with pytest.raises(HetSpecError, match="width 65 is outside"):
        load_acceptance("ghidorah-mbpp").check_tree(TokenTree.chain(64))


def test_node_probabilities_give_the_expected_tokens_of_a_draft_tree():
    tree = TokenTree.from_choices([(0,), (1,), (0, 0)])
    probs = [1.0, 0.6, 0.3, 0.5]
    assert expected_tokens_from_node_probs(tree, probs) == pytest.approx(1 + 0.6 + 0.3 + 0.6 * 0.5)
    with pytest.raises(HetSpecError, match="sum to > 1"):
        expected_tokens_from_node_probs(tree, [1.0, 0.7, 0.5, 0.1])


def test_confidence_bins():
    bins = (ConfidenceBin(0.0, 0.5, 0.2, 10), ConfidenceBin(0.5, 1.0, 0.9, 10))
    model = AcceptanceModel(name="bins", source="t", confidence_bins=bins)
    assert model.confidence_accept_rate(0.1) == 0.2
    assert model.confidence_accept_rate(1.0) == 0.9
    assert list(model.confidence_accept_rate([0.49, 0.5])) == [0.2, 0.9]
    with pytest.raises(HetSpecError, match="no draft_confidence_bins"):
        MODEL.confidence_accept_rate(0.5)


# ---------------------------------------------------------------------- tables and curves
def test_length_table_interpolates_in_log_width_and_refuses_extrapolation():
    mbpp = load_acceptance("ghidorah-mbpp")
    assert mbpp.width_tokens(16) == pytest.approx(3.27)
    assert mbpp.width_tokens(1) == pytest.approx(1.0)
    assert mbpp.width_tokens(24) == pytest.approx(3.27 + (3.55 - 3.27) * math.log(24 / 16) / math.log(2))
    assert np.allclose(mbpp.width_tokens([2, 4, 8]), [1.78, 2.54, 2.89])
    for bad in (65, 128):
        with pytest.raises(HetSpecError, match=f"covers tree widths 1..64; width {bad} is outside"):
            mbpp.width_tokens(bad)
    with pytest.raises(HetSpecError, match="widths must be integers >= 1"):
        mbpp.width_tokens(0)


def test_medusa_log_curve():
    curve = load_acceptance("medusa-log")
    assert curve.width_tokens(64) == pytest.approx(1 + 0.477 * math.log(64))
    assert curve.width_tokens(1) == pytest.approx(1.0)
    with pytest.raises(HetSpecError, match="width 300 is outside"):
        curve.width_tokens(300)


def test_table_draws_keep_the_mean():
    mbpp = load_acceptance("ghidorah-mbpp")
    tree = TokenTree.from_choices([(0,), (1,), (0, 0)])
    rng = np.random.default_rng(5)
    draws = [mbpp.sample_tree_tokens(tree, rng) for _ in range(20000)]
    assert set(draws) == {2, 3}
    assert np.mean(draws) == pytest.approx(mbpp.width_tokens(4), abs=0.02)


# ---------------------------------------------------------------------- presets by name
def test_every_preset_loads_with_its_source():
    names = acceptance_names()
    for required in ("ghidorah-mtbench", "ghidorah-gsm8k", "ghidorah-mbpp", "ghidorah-humaneval", "medusa-log",
                     "dovetail-mtbench", "dovetail-humaneval", "alspec-llama3.1-8b"):
        assert required in names
    for name in names:
        model = load_acceptance(name)
        doc = json.loads((preset_dir() / f"{name}.json").read_text())
        assert model.name == name
        assert {"paper", "table", "page"} <= set(doc["source"])


def test_ghidorah_table_one_values():
    expected = {"ghidorah-mtbench": 3.34, "ghidorah-gsm8k": 3.56, "ghidorah-mbpp": 3.74, "ghidorah-humaneval": 3.71}
    for name, at64 in expected.items():
        assert load_acceptance(name).width_tokens(64) == pytest.approx(at64)


def test_dovetail_tau_by_drafter_depth():
    mt = load_acceptance("dovetail-mtbench")
    assert mt.tau("dgf", blocks=5, width=16) == pytest.approx(4.73)
    assert mt.tau("eagle2", blocks=1, width=16) == pytest.approx(3.95)
    assert mt.tau("eagle2", blocks=1, width=60) == pytest.approx(4.75)
    assert mt.tau("tinyllama-1.1b", width=16, temperature=1.0) == pytest.approx(4.53)
    assert mt.tau_blocks("dgf") == (1, 2, 3, 4, 5, 6)
    assert load_acceptance("dovetail-humaneval").tau("dgf", blocks=6) == pytest.approx(5.98)
    assert load_acceptance("dovetail-gsm8k").tau_blocks("dgf") == (5,)
    with pytest.raises(HetSpecError, match="no tau for drafter dgf blocks=9"):
        mt.tau("dgf", blocks=9)


def test_alspec_hit_rates():
    a8 = load_acceptance("alspec-llama3.1-8b")
    assert a8.alspec_hit_rate(task="ifeval", lam=0.10) == pytest.approx(0.898)
    assert a8.alspec_hit_rate(task="hotpotqa", lam=0.05) == pytest.approx(0.185)
    mean = np.mean([v[0.1] for v in a8.alspec_hit_rates.values()])
    assert a8.alspec_hit_rate() == pytest.approx(mean)
    with pytest.raises(UnknownNameError, match="unknown task"):
        a8.alspec_hit_rate(task="chess")
    with pytest.raises(HetSpecError, match="no hit rate at lambda 0.3"):
        a8.alspec_hit_rate(task="ifeval", lam=0.3)
    measured = AcceptanceModel(name="m", source="t", alspec_hit_rate_by_layer=(0.5, 0.7, 0.9))
    assert measured.alspec_hit_rate(layer=2) == 0.9 and measured.alspec_hit_rate() == pytest.approx(0.7)


# ---------------------------------------------------------------------- loading and errors
def test_profile_file_from_the_real_path(tmp_path):
    profile = AcceptanceProfile(name="measured", source="calibration prompts", medusa_accuracy=ACC.tolist(),
                                draft_alpha=0.62, acceptance_length={1: 1.0, 4: 2.1, 16: 2.9})
    path = profile.save(tmp_path / "p.json")
    model = load_acceptance(str(path))
    assert model.draft_alpha == 0.62
    assert model.tree_tokens(TokenTree.chain(2)) == pytest.approx(1 + 0.55 + 0.55 * 0.40)


def test_alpha_literal_and_errors(tmp_path):
    assert load_acceptance("alpha:0.25").draft_alpha == 0.25
    with pytest.raises(HetSpecError, match="alpha must be in"):
        load_acceptance("alpha:1.5")
    with pytest.raises(HetSpecError, match="expected alpha:<number"):
        load_acceptance("alpha:x")
    with pytest.raises(UnknownNameError, match="unknown acceptance model 'nope'; valid: .*ghidorah-mbpp"):
        load_acceptance("nope")
    with pytest.raises(HetSpecError, match="does not exist"):
        load_acceptance(str(tmp_path / "missing.json"))
    with pytest.raises(HetSpecError, match="has no draft_alpha"):
        load_acceptance("ghidorah-mbpp").chain_tokens(3)


@pytest.mark.parametrize("change,field", [
    (lambda d: d.pop("source"), "source"),
    (lambda d: d["acceptance_length"].update({"128": 0.5}), "acceptance_length.128"),
    (lambda d: d.update({"extra": 1}), "extra"),
    (lambda d: d["acceptance_length"].update({"8": 1.0}), "acceptance_length"),
])
def test_malformed_preset_file_names_the_field(tmp_path, change, field):
    doc = json.loads((preset_dir() / "ghidorah-mbpp.json").read_text())
    change(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(PresetError, match=f"bad.json: {field}"):
        load_acceptance(str(path))
