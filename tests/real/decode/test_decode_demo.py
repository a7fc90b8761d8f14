"""The decode methods on the trained ``tiny`` demo models (the ``tiny_demo`` session fixture):
greedy speculative output equals greedy ``ar`` on evaluation prompts, the acceptance profile, and
``hetspec run`` / ``hetspec profile-acceptance`` end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_runner import run_cli
from demo_helpers import evaluation_prompts, reference_ids, token_ids

from real.decode.chain import ChainConfig
from real.decode.draft_tree import DraftTreeConfig
from real.decode.medusa import MedusaConfig
from real.run.acceptance import MAX_PROFILE_WIDTH, PROFILE_RANKS, measure_profile
from real.run.session import run_prompts
from real.train.corpus import prompts as corpus_prompts
from sim.acceptance_profile import AcceptanceProfile
from sim.trace import summarize
from sim.trace_files import read_trace
from sim.tree import TokenTree

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPTS, PROMPT_TOKENS, NEW_TOKENS = 3, 32, 32
#: CLI subprocesses run with one torch thread (see ``one_torch_thread``).
ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def demo(tiny_demo):
    for model in (tiny_demo.target, tiny_demo.draft, tiny_demo.heads):
        model.eval()
    return tiny_demo


@pytest.fixture(scope="module")
def evaluation(demo):
    return evaluation_prompts(demo, PROMPTS, PROMPT_TOKENS, seed=0)


@pytest.fixture(scope="module")
def reference(demo, evaluation):
    return reference_ids(demo, evaluation, NEW_TOKENS)


@pytest.fixture(scope="module")
def profile(demo):
    calibration = corpus_prompts(demo.tokenizer, "calibration", 4, PROMPT_TOKENS, seed=0)
    return measure_profile(demo, calibration, NEW_TOKENS, name="tiny-test", source="test")


@pytest.mark.parametrize("method,config", [
    ("chain", ChainConfig(draft_depth=2)), ("chain", ChainConfig(draft_depth=5)),
    ("draft-tree", DraftTreeConfig()), ("draft-tree", DraftTreeConfig(tree_width=6, draft_depth=3)),
    ("draft-tree", DraftTreeConfig(tree_width=32, draft_depth=10, branch_threshold=0.1)),
    ("medusa", MedusaConfig(tree=TokenTree.cartesian([3, 2, 2]))),
    ("medusa", MedusaConfig(tree=TokenTree.chain(3))),
])
def test_greedy_speculation_equals_greedy_ar_on_evaluation_prompts(demo, evaluation, reference, method, config):
    result = run_prompts(demo, method, config, evaluation, NEW_TOKENS, warmup=False)
    assert token_ids(result) == reference
    assert result.mean_accepted_per_step > 1.0       # trained models: some proposals are accepted


@pytest.mark.parametrize("width", [4, 16, 40])
def test_greedy_medusa_with_measured_trees_equals_ar(demo, evaluation, reference, profile, width):
    tree = TokenTree.greedy(profile.medusa_accuracy, width)
    result = run_prompts(demo, "medusa", MedusaConfig(tree=tree), evaluation, NEW_TOKENS, warmup=False)
    assert token_ids(result) == reference


def test_profile_shape_and_invariants(profile, demo):
    acc = np.asarray(profile.medusa_accuracy)
    assert acc.shape == (demo.heads.n_heads, PROFILE_RANKS)
    assert np.all(acc.sum(axis=1) <= 1.0 + 1e-9)
    assert acc[0, 0] > acc[-1, 0]                     # nearer futures are easier to guess
    assert 0.0 < profile.draft_alpha < 1.0
    assert sum(b.count for b in profile.draft_confidence_bins) == profile.meta["positions"]
    confident = [b for b in profile.draft_confidence_bins if b.lo >= 0.8 and b.count]
    unsure = [b for b in profile.draft_confidence_bins if b.hi <= 0.3 and b.count]
    if confident and unsure:
        assert confident[-1].accept_rate > unsure[0].accept_rate
    lengths = profile.acceptance_length
    assert sorted(lengths) == list(range(1, MAX_PROFILE_WIDTH + 1))
    assert lengths[1] == 1.0 and lengths[64] > lengths[2] > 1.0


def test_profile_roundtrips_through_json(profile, tmp_path):
    path = profile.save(tmp_path / "profile.json")
    loaded = AcceptanceProfile.load(path)
    assert loaded.medusa_accuracy == profile.medusa_accuracy
    assert loaded.acceptance_length == profile.acceptance_length
    assert loaded.draft_alpha == profile.draft_alpha


def test_replayed_acceptance_length_matches_a_real_medusa_run(demo, profile):
    """The width table is a replay of greedy Medusa on the target's own output: running medusa on
    the same calibration prompts with the same tree takes the same number of steps."""
    calibration = corpus_prompts(demo.tokenizer, "calibration", 4, PROMPT_TOKENS, seed=0)
    for width in (8, 24):
        tree = TokenTree.greedy(profile.medusa_accuracy, width)
        run = run_prompts(demo, "medusa", MedusaConfig(tree=tree), calibration, NEW_TOKENS, warmup=False)
        assert run.mean_accepted_per_step == pytest.approx(profile.acceptance_length[width], abs=1e-9)


@pytest.mark.parametrize("gamma", [3, 6])
def test_replayed_chain_rounds_match_a_real_chain_run(demo, profile, gamma):
    """The chain tables replay greedy chain decoding, its last rounds of each generation included: a real
    run on the same calibration prompts takes the rounds, makes the draft passes and emits the tokens
    per step the profile says."""
    calibration = corpus_prompts(demo.tokenizer, "calibration", 4, PROMPT_TOKENS, seed=0)
    run = run_prompts(demo, "chain", ChainConfig(draft_depth=gamma), calibration, NEW_TOKENS, warmup=False)
    kinds = profile.meta["chain_rounds"][str(gamma)]
    assert run.mean_accepted_per_step == pytest.approx(profile.chain_acceptance_length[gamma], abs=1e-9)
    assert sum(r.draft_passes for r in run.results) / run.steps == pytest.approx(sum(k * w for k, w in kinds),
                                                                                abs=1e-5)
    assert kinds[-1][0] == gamma and kinds[0][0] < gamma         # the last rounds of a generation draft fewer


@pytest.mark.parametrize("cap", [3, 6])
def test_replayed_fallback_matches_a_real_draft_tree_run(demo, profile, cap):
    """The fallback table replays LLMCad's stop rule on the draft's own confidences: a real draft-tree run
    on the same calibration prompts with its main branch alone (no side branch passes the threshold 1)
    drafts and accepts what the table says, up to the draft's confidences after a miss (the replay reads
    the true sequence's) and the rounds the replay does not count (nothing left to draft)."""
    table = profile.meta["draft_fallback"][str(cap)]
    weights, accept = np.asarray(table["weights"]), table["accept"]
    passes = float(sum(w * (k + 1) for k, w in enumerate(weights)))
    tokens = float(sum(w * (1 + np.cumprod(accept[k]).sum()) for k, w in enumerate(weights)))
    calibration = corpus_prompts(demo.tokenizer, "calibration", 4, PROMPT_TOKENS, seed=0)
    run = run_prompts(demo, "draft-tree", DraftTreeConfig(tree_width=cap + 1, draft_depth=cap, branch_threshold=1.0),
                      calibration, NEW_TOKENS, warmup=False)
    assert run.mean_accepted_per_step == pytest.approx(tokens, rel=0.08)
    assert sum(r.draft_passes for r in run.results) / run.steps == pytest.approx(passes, rel=0.12)


def test_run_cli_json_and_trace(demo, tmp_path):
    trace = tmp_path / "trace.csv"
    common = ["--preset", "tiny", "--prompts", "2", "--prompt-tokens", "24", "--max-new-tokens", "12", "--json"]
    medusa = run_cli("run", "--method", "medusa", "--width", "8", "--trace", str(trace), *common, env=ONE_THREAD_ENV)
    assert medusa.returncode == 0, medusa.stderr
    out = json.loads(medusa.stdout)
    for key in ("tokens_per_s", "mean_accepted_per_step", "steps", "tokens", "method", "config", "preset",
                "decode_s", "prefill_s"):
        assert key in out
    assert out["method"] == "medusa" and out["config"]["tree"]["width"] == 8
    assert len(out["tokens"]) == 2 and all(len(t) == 12 for t in out["tokens"])
    records = read_trace(trace)
    assert summarize(records).steps == out["steps"]
    assert sum(r.tokens_accepted for r in records) == 2 * 12
    ar = json.loads(run_cli("run", "--method", "ar", *common, env=ONE_THREAD_ENV).stdout)
    assert ar["tokens"] == out["tokens"] and ar["mean_accepted_per_step"] == 1.0
    assert (demo.folder / "acceptance-profile.json").exists()      # medusa --width cached its profile


def test_profile_acceptance_cli_writes_a_loadable_profile(demo, tmp_path):
    out = tmp_path / "tiny-profile.json"
    proc = run_cli("profile-acceptance", "--preset", "tiny", "--out", str(out), "--prompts", "2",
                   "--prompt-tokens", "24", "--max-new-tokens", "16", "--draft-tree-widths", "6,4,6", env=ONE_THREAD_ENV)
    assert proc.returncode == 0, proc.stderr
    profile = AcceptanceProfile.load(out)
    assert profile.medusa_depths == demo.heads.n_heads and profile.meta["prompts"] == 2
    assert "medusa top-1 accuracy by head" in proc.stdout
    depth = DraftTreeConfig().draft_depth
    assert sorted(profile.meta["draft_tree_rounds"]) == [f"4x{depth}", f"6x{depth}"]
    assert "draft-tree budget 4" in proc.stdout and "draft-tree budget 6" in proc.stdout
    assert sorted(profile.meta["chain_rounds"], key=int) == [str(g) for g in range(1, 9)]
    assert "chain draft passes per round    1: " in proc.stdout


def test_compare_runs_methods_on_the_same_prompts(demo):
    from real.run.compare import compare
    from real.run.request import RunRequest

    common = dict(preset="tiny", prompts=2, prompt_tokens=24, max_new_tokens=16, threads=1)
    comparison = compare([RunRequest("ar", **common), RunRequest("medusa", tree_width=6, **common),
                          RunRequest("chain", draft_depth=2, **common)], repeats=2, progress=False)
    assert [t.method for t in comparison.timings] == ["ar", "medusa", "chain"]
    assert comparison.speedup("ar") == 1.0
    assert comparison.same_tokens("medusa") and comparison.same_tokens("chain")
    for timing in comparison.timings:
        assert len(timing.tokens_per_s) == 2
        phases = timing.phase_ms_per_step
        assert sum(phases.values()) == pytest.approx(timing.median_step_s * 1e3, rel=0.5)
    out = comparison.to_json()
    assert out["methods"][1]["config"]["tree"]["width"] == 6
    assert "medusa" in comparison.table()


def test_draft_tree_rounds_count_what_a_real_run_drafts_and_emits(demo):
    """The profile's draft-tree rounds (real.run.draft_tree_rounds) are the decoder's own: passes, tokens
    verified and emitted per round of a run on the same prompts, and the strategy priced with them
    drafts, verifies and emits exactly those per step."""
    from real.run.draft_tree_rounds import measure_draft_tree_rounds
    from sim.strategies import get_strategy
    from sim.strategies.base import Problem, StrategyConfig
    from sim.acceptance_profile import rounds_key
    from sim.strategies.draft_tree_fallback import measured_rounds

    calibration = corpus_prompts(demo.tokenizer, "calibration", 3, PROMPT_TOKENS, seed=0)
    tables = measure_draft_tree_rounds(demo, calibration, NEW_TOKENS, (6,))
    table = tables[rounds_key(6, DraftTreeConfig().draft_depth)]
    run = run_prompts(demo, "draft-tree", DraftTreeConfig(tree_width=6), calibration, NEW_TOKENS, warmup=False)
    assert table["rounds"] == run.steps and table["prompts"] == 3
    kinds = measured_rounds({"draft_tree_rounds": tables}, 6, DraftTreeConfig().draft_depth)
    assert sum(w * t for _, _, w, t in kinds) == pytest.approx(run.mean_accepted_per_step, abs=1e-5)
    assert sum(w * p for p, _, w, _ in kinds) == pytest.approx(sum(r.draft_passes for r in run.results) / run.steps,
                                                               abs=1e-5)
    proposed = sum(sum(r.proposed_per_step) for r in run.results) / run.steps
    assert sum(w * (n - 1) for _, n, w, _ in kinds) == pytest.approx(proposed, abs=1e-5)
    # the strategy prices exactly those rounds (its own tree model has no side branches)
    from hwmodels.loader import get_platform
    from sim.acceptance import AcceptanceModel
    from sim.model_spec import get_model

    acc = AcceptanceModel(name="p", source="test", draft_alpha=0.8,
                          meta={"draft_rank_accuracy": [0.8, 0.1], "draft_tree_rounds": tables})
    problem = Problem(get_model("gpt2-large"), get_platform("jetson-tx2"), acc, context=128, dtype="fp32")
    strategy = get_strategy("draft-tree")
    cfg = strategy.resolve(problem, StrategyConfig(method="draft-tree", tree_width=6,
                                                   draft_depth=DraftTreeConfig().draft_depth))
    est = strategy.estimate(problem, cfg)
    assert est.tokens_per_step == pytest.approx(run.mean_accepted_per_step, abs=1e-5)
    assert est.draft_passes_per_step == pytest.approx(sum(r.draft_passes for r in run.results) / run.steps, abs=1e-5)
