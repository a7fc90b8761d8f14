"""The optimizer and the tree search: the table, the best row, the ratio refinement, DP trees
against greedy and brute force, and sweeps."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from hwmodels.errors import HetSpecError
from hwmodels.loader import get_platform
from sim import optimizer
from sim.acceptance import AcceptanceModel
from sim.acceptance_loader import load_acceptance
from sim.model_spec import get_model
from sim.optimizer import optimize
from sim.plan import StepPlan, Task
from sim.strategies.base import Estimate, Knob, Problem, Strategy
from sim.cli_numbers import int_list, ratio
from sim.sweep import sweep, write_table
from sim.tree import TokenTree
from sim.tree_search import best_for_cost, greedy_prefix_trees, optimal_tree, optimal_values

A100 = get_platform("a100-80gb-pcie")
VICUNA = get_model("vicuna-7b")
REQUIRED = ("method", "tree_width", "draft_depth", "partition_ratio", "tokens_per_s", "step_s", "speedup_vs_ar",
            "tokens_per_step")


# ---------------------------------------------------------------------- table and best
def test_medusa_search_evaluates_every_width_and_returns_the_best_row():
    p = Problem(VICUNA, A100, load_acceptance("ghidorah-mbpp"))
    result = optimize(p, "medusa")
    table = result.table
    assert set(REQUIRED) <= set(table.columns)
    assert len(table) == 64 * 2       # widths 1..64 on the GPU and on the CPU
    assert result.best["tokens_per_s"] == pytest.approx(table["tokens_per_s"].max())
    assert np.allclose(table["tokens_per_s"], table["tokens_per_step"] / table["step_s"])
    ar_row = table[(table.tree_width == 1) & (table.device == "gpu")].iloc[0]
    assert ar_row["speedup_vs_ar"] == pytest.approx(1.0)
    assert result.best_config.tree.size == result.best["tree_width"]
    js = result.to_json()
    assert {"best", "table", "ar_tokens_per_s"} <= set(js) and len(js["table"]) == len(table)


def test_search_space_can_be_narrowed():
    p = Problem(VICUNA, A100, load_acceptance("ghidorah-mbpp"))
    result = optimize(p, "medusa", {"tree_width": (2, 4, 8, 16, 32, 64), "device": "gpu"})
    assert sorted(result.table.tree_width) == [2, 4, 8, 16, 32, 64]


def test_infeasible_combinations_are_skipped_and_counted():
    acc = AcceptanceModel(name="two", source="t", medusa_accuracy=((0.6, 0.2), (0.5, 0.2)))
    result = optimize(Problem(VICUNA, A100, acc), "medusa", {"tree_width": range(1, 10), "device": "gpu"})
    assert result.skipped > 0            # depth 1 with 2 ranks holds at most 3 tokens
    assert result.table.tree_width.max() == 7


def test_no_valid_configuration_raises_the_reason():
    with pytest.raises(HetSpecError, match="has no draft_alpha"):
        optimize(Problem(VICUNA, A100, load_acceptance("ghidorah-mbpp")), "chain")


# ---------------------------------------------------------------------- ratio refinement
class ToySplit(Strategy):
    """Two devices at speeds a and b: step = max(r * A, (1 - r) * B) + c, optimum r* = B / (A + B)."""

    name = "hcmp"
    A, B, C = 0.7, 0.3 * np.pi, 0.01

    def search_space(self, problem):
        return (Knob("partition_ratio", low=0.0, high=1.0),)

    def estimate(self, problem, config):
        r = config.partition_ratio
        return Estimate(step_s=max(r * self.A, (1 - r) * self.B) + self.C, tokens_per_step=2.0)

    def plan(self, problem, config, rng=None, per_layer=False):
        return StepPlan((Task("x", "delay", "", "verify", fixed_s=self.estimate(problem, config).step_s),),
                        tokens_accepted=2.0)


def test_partition_ratio_is_refined_beyond_the_grid(monkeypatch):
    real = optimizer.get_strategy
    monkeypatch.setattr(optimizer, "get_strategy", lambda name: ToySplit() if name == "hcmp" else real(name))
    result = optimize(Problem(VICUNA, A100), "hcmp")
    r_star = ToySplit.B / (ToySplit.A + ToySplit.B)
    grid = result.table[~result.table.refined]
    assert len(grid) == 11 and result.table.refined.sum() == 1
    assert result.best["refined"]
    assert result.best["partition_ratio"] == pytest.approx(r_star, abs=2e-3)
    assert result.best["step_s"] < grid.step_s.min()
    coarse = optimize(Problem(VICUNA, A100), "hcmp", refine=False)
    assert not coarse.table.refined.any()


# ---------------------------------------------------------------------- tree search
def brute_force(acc: np.ndarray, size: int, depth: int, max_children: int | None) -> float:
    ranks = acc.shape[1]
    nodes = [p for d in range(1, depth + 1) for p in itertools.product(range(ranks), repeat=d)]
    best = -np.inf
    for comb in itertools.combinations(nodes, size - 1):
        chosen = set(comb)
        if any(len(p) > 1 and p[:-1] not in chosen for p in comb):
            continue
        if max_children is not None and comb and max(Counter(p[:-1] for p in comb).values()) > max_children:
            continue
        best = max(best, TokenTree.from_choices(comb).expected_accepted_length(acc))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_dp_trees_are_optimal_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    depth, ranks = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    acc = rng.random((depth, ranks))
    acc = acc / acc.sum(axis=1, keepdims=True) * rng.uniform(0.3, 0.95, (depth, 1))   # rows not sorted by rank
    for cap in (None, 1, 2):
        table = optimal_values(acc, 5, depth, cap)
        for size in range(1, 6):
            want = brute_force(acc, size, depth, cap)
            if not np.isfinite(want):
                assert not np.isfinite(table.best[size])
                continue
            assert table.best[size] == pytest.approx(want)
            tree = table.tree(size)
            assert tree.size == size and tree.depth <= depth
            assert tree.expected_accepted_length(acc) == pytest.approx(want)


def test_dp_equals_greedy_without_a_branching_cap():
    acc = np.array([[0.5, 0.2, 0.1, 0.05], [0.4, 0.2, 0.1, 0.05], [0.35, 0.15, 0.1, 0.05]])
    greedy = greedy_prefix_trees(acc, 40)
    for size in (1, 2, 9, 25, 40):
        assert greedy[size - 1] == TokenTree.greedy(acc, size)
        dp = optimal_tree(acc, size, 3)
        assert dp.expected_accepted_length(acc) == pytest.approx(greedy[size - 1].expected_accepted_length(acc))


def test_capped_dp_beats_greedy_on_truncated_ranks():
    # top-1 per node: at depth 2 the rank-1 candidate is the likely one, so "top-ranked first"
    # (greedy on rank 0 only) misses it; the DP with a branching cap of 1 finds it.
    acc = np.array([[0.6, 0.1], [0.05, 0.9]])
    capped = optimal_tree(acc, 3, 2, max_children=1)
    naive = TokenTree.greedy(acc[:, :1], 3)
    assert capped.choices == ((0,), (0, 1))
    assert capped.expected_accepted_length(acc) > naive.expected_accepted_length(acc[:, :1]) + 0.4


def test_depth_dependent_cost_needs_the_depth_budget():
    # each level costs like one more draft pass: the unconstrained greedy tree is too deep
    acc = np.array([[0.6, 0.2], [0.5, 0.2], [0.45, 0.2], [0.4, 0.2]])

    def cost(size: int, depth: int) -> float:
        return 1.0 + 0.02 * size + 0.6 * depth

    rate, size, depth, tree = best_for_cost(acc, range(1, 16), range(0, 5), cost)
    greedy_best = max(TokenTree.greedy(acc, n).expected_accepted_length(acc) / cost(n, TokenTree.greedy(acc, n).depth)
                      for n in range(1, 16))
    assert rate > greedy_best * 1.01
    assert tree.depth == depth and tree.size == size


# ---------------------------------------------------------------------- sweeps
def test_sweep_collects_every_configuration(tmp_path):
    result = sweep(["vicuna-7b", "llama-68m"], ["a100-80gb-pcie"], ["ar", "medusa", "chain"],
                   ["ghidorah-mbpp", "alpha:0.7"], contexts=(64, 512), batches=(1, 2), progress=False,
                   space={"tree_width": (1, 4, 16)})
    t = result.table
    assert {"model", "platform", "acceptance", "context", "batch"} <= set(t.columns)
    # per problem: ar 2 devices, medusa 3 widths x 2 devices, chain 8 gammas x 2 x 2 placements
    assert len(t) == 2 * 2 * 2 * (2 + 6 + 32)
    assert {why for _, why in result.skipped} == {
        "acceptance model ghidorah-mbpp: has no draft_alpha (a draft model's per-token acceptance rate); pass a "
        "measured profile or alpha:<a>",
        "acceptance model alpha:0.7: has no tree acceptance for medusa (needs medusa_accuracy or an "
        "acceptance_length table)"}
    path = write_table(t, tmp_path / "s.csv")
    assert path.read_text().splitlines()[0].startswith("model,platform,acceptance,context,batch")


def test_parquet_needs_pyarrow_and_suffixes_are_checked(tmp_path):
    import pandas as pd

    table = pd.DataFrame({"a": [1]})
    with pytest.raises(HetSpecError, match="suffix must be .csv or .parquet"):
        write_table(table, tmp_path / "x.xlsx")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        with pytest.raises(HetSpecError, match="needs pyarrow"):
            write_table(table, tmp_path / "x.parquet")
    else:
        assert write_table(table, tmp_path / "x.parquet").exists()


def test_list_and_ratio_parsing():
    assert int_list("1-4,8,16", "--x") == (1, 2, 3, 4, 8, 16)
    assert ratio("0.25") == 0.25 and ratio("0.2:0.6") == (0.2, 0.6)
    with pytest.raises(HetSpecError, match="give integers or ranges LOW-HIGH"):
        int_list("4-1", "--x")
    with pytest.raises(HetSpecError, match=r"must be in \[0, 1\]"):
        ratio("1.5")


def test_sweep_with_worker_processes_gives_the_same_table():
    args = (["llama-68m"], ["a100-80gb-pcie"], ["ar", "medusa"], ["ghidorah-mbpp"])
    kw = dict(contexts=(64, 256, 1024), batches=(1, 2), progress=False, space={"tree_width": (1, 8, 32)})
    serial = sweep(*args, **kw)
    parallel = sweep(*args, workers=2, **kw)
    assert parallel.table.equals(serial.table) and parallel.skipped == serial.skipped
    with pytest.raises(HetSpecError, match="workers must be >= 1"):
        sweep(*args, workers=0, **kw)


def test_a_rank_of_zero_accuracy_neither_warns_nor_hides_a_better_child():
    """A zero accuracy times an impossible subtree (-inf) is not a value: the DP keeps such sizes impossible, so
    no NaN reaches a comparison and the best tree is the one without the useless rank."""
    import warnings

    acc = [[0.6, 0.0, 0.3], [0.5, 0.0, 0.2]]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        table = optimal_values(acc, 6, 2)
        tree = optimal_tree(acc, 4, 2)
    assert all(x == -np.inf or np.isfinite(x) for x in table.best)
    assert all(1 not in choice for choice in tree.choices)      # no rank-1 (zero accuracy) node
    assert table.best[4] == pytest.approx(tree.expected_accepted_length([list(r) for r in acc]))
