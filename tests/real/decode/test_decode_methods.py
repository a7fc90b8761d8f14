"""The decode methods on small random models (fast, no training): lossless greedy output, cache
consistency after partial acceptance, the trace counting rule, and clear errors.

The trained tiny demo models are exercised in ``test_decode_demo.py``.
"""

from __future__ import annotations

import pytest
import torch

from decode_doubles import SHARPEN, VOCAB, OracleHeads
from decode_doubles import random_spec as _spec

from hwmodels.errors import HetSpecError
from real.decode import decoder
from real.decode.ar import ArConfig
from real.decode.chain import ChainConfig
from real.decode.common import Clock, DecodeModels, Sampling
from real.decode.draft_tree import DraftTreeConfig
from real.decode.medusa import MedusaConfig
from real.model.transformer import Transformer
from sim.trace import summarize
from sim.tree import TokenTree

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NEW_TOKENS = 40


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(7)
    target = Transformer(_spec("rand-target", 2, 48)).eval()
    target.lm_head.weight.data *= SHARPEN
    copy = Transformer(_spec("rand-copy", 2, 48)).eval()
    copy.load_state_dict(target.state_dict())
    for p in copy.parameters():
        p.data += 0.03 * p.data.std() * torch.randn_like(p)
    small = Transformer(_spec("rand-small", 1, 24)).eval()
    prompt = torch.randint(0, VOCAB, (24,), generator=torch.Generator().manual_seed(3)).tolist()
    reference = decoder("ar").generate(DecodeModels(target), prompt, NEW_TOKENS, ArConfig(), Clock())
    seq = prompt + list(reference.ids)
    with torch.inference_mode():
        _, hidden = target(torch.tensor([seq]), None, return_hidden=True)
    heads = OracleHeads(hidden[0], seq, n_heads=4)
    return {"target": target, "copy": copy, "small": small, "heads": heads, "prompt": prompt,
            "reference": reference}


def _run(models, method, config, setup, new_tokens=NEW_TOKENS, seed=0):
    return decoder(method).generate(models, setup["prompt"], new_tokens, config, Clock(),
                                    torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("draft", ["copy", "small", "target"])
@pytest.mark.parametrize("method,config", [
    ("chain", ChainConfig(draft_depth=1)), ("chain", ChainConfig(draft_depth=4)), ("chain", ChainConfig(draft_depth=9)),
    ("draft-tree", DraftTreeConfig()), ("draft-tree", DraftTreeConfig(tree_width=4, draft_depth=2)),
    ("draft-tree", DraftTreeConfig(tree_width=32, draft_depth=12, branch_threshold=0.05, alpha0=0.001)),
])
def test_greedy_draft_methods_equal_ar(setup, draft, method, config):
    models = DecodeModels(setup["target"], draft=setup[draft])
    result = _run(models, method, config, setup)
    assert result.ids == setup["reference"].ids
    assert len(result.ids) == NEW_TOKENS
    if draft == "target":   # a perfect draft: speculation must actually pay off
        assert result.mean_accepted_per_step > 1.8


@pytest.mark.parametrize("tree", [
    TokenTree.medusa_default(), TokenTree.cartesian([2, 2, 2]), TokenTree.chain(4), TokenTree.chain(0),
    TokenTree.from_choices([(1,), (1, 1), (1, 1, 1), (0,)]),
])
def test_greedy_medusa_equals_ar(setup, tree):
    models = DecodeModels(setup["target"], heads=setup["heads"])
    result = _run(models, "medusa", MedusaConfig(tree=tree), setup)
    assert result.ids == setup["reference"].ids
    if tree.depth >= 2 and tree.level_sizes[1] >= 2:   # rank-1 nodes present: the oracle is often right
        assert result.mean_accepted_per_step > 1.5


def test_perfect_chain_draft_accepts_every_proposal(setup):
    """Draft == target: every step accepts all γ proposals plus the bonus — the draft cache must stay
    consistent after each step for this to hold, greedy and sampled alike."""
    models = DecodeModels(setup["target"], draft=setup["target"])
    for sampling in (Sampling(), Sampling(temperature=1.0)):
        result = _run(models, "chain", ChainConfig(draft_depth=3, sampling=sampling), setup)
        assert all(a == 4 for a in result.accepted_per_step[:-1])
        # every round after the first starts by feeding the lag: the last draft token and the bonus
        full_rounds = sum(1 for p in result.proposed_per_step[1:] if p > 0)
        assert result.draft_tokens == result.draft_passes + full_rounds


def test_perfect_tree_draft_accepts_its_whole_main_branch(setup):
    models = DecodeModels(setup["target"], draft=setup["target"])
    result = _run(models, "draft-tree", DraftTreeConfig(tree_width=6, draft_depth=5), setup)
    assert result.ids == setup["reference"].ids
    # each round's top-1 chain is right, so every step but the last emits (its depth + 1) >= 2 tokens
    assert min(result.accepted_per_step[:-1]) >= 2


def test_sampled_methods_are_reproducible_and_differ_from_greedy(setup):
    models = DecodeModels(setup["target"], draft=setup["copy"])
    config = ChainConfig(draft_depth=3, sampling=Sampling(temperature=1.0, top_p=0.9))
    a, b = _run(models, "chain", config, setup, seed=5), _run(models, "chain", config, setup, seed=5)
    assert a.ids == b.ids and len(a.ids) == NEW_TOKENS
    ar_sampled = _run(models, "ar", ArConfig(Sampling(temperature=1.0)), setup, seed=5)
    assert len(ar_sampled.ids) == NEW_TOKENS and ar_sampled.ids != setup["reference"].ids


def test_typical_acceptance_runs_and_accepts(setup):
    models = DecodeModels(setup["target"], heads=setup["heads"])
    result = _run(models, "medusa", MedusaConfig(tree=TokenTree.cartesian([2, 2]), temperature=0.7), setup)
    assert len(result.ids) == NEW_TOKENS and result.mean_accepted_per_step > 1.0


@pytest.mark.parametrize("method,config", [
    ("ar", ArConfig()), ("chain", ChainConfig(draft_depth=3)), ("draft-tree", DraftTreeConfig()),
    ("medusa", MedusaConfig(tree=TokenTree.cartesian([2, 2]))),
])
def test_trace_follows_the_counting_rule(setup, method, config):
    models = DecodeModels(setup["target"], draft=setup["copy"], heads=setup["heads"])
    clock = Clock("cpu")
    result = decoder(method).generate(models, setup["prompt"], NEW_TOKENS, config, clock)
    records = clock.records
    assert sum(r.tokens_accepted for r in records) == NEW_TOKENS          # prefill carries the first
    summary = summarize(records)
    assert summary.tokens == NEW_TOKENS - 1 == result.decode_tokens
    assert summary.steps == result.steps
    deciding = [r for r in records if r.tokens_accepted]
    assert {r.phase for r in deciding} == ({"prefill", "decode"} if method == "ar" else {"prefill", "verify"})
    assert all(r.device == "cpu" and r.end_s >= r.start_s for r in records)
    assert records == list(result.records)
    assert result.decode_s > 0 and result.prefill_s > 0
    if method in ("chain", "draft-tree"):
        assert result.draft_passes == sum(1 for r in records if r.phase == "draft")
        assert result.draft_passes <= result.draft_tokens <= 2 * result.draft_passes


def test_steps_of_consecutive_prompts_are_numbered_on(setup):
    models = DecodeModels(setup["target"])
    clock = Clock()
    first = decoder("ar").generate(models, setup["prompt"], 5, ArConfig(), clock)
    decoder("ar").generate(models, setup["prompt"], 5, ArConfig(), clock)
    assert summarize(clock.records).steps == 2 * first.steps
    starts = [r.start_s for r in clock.records]
    assert starts == sorted(starts)


def test_bad_requests_fail_with_one_line(setup):
    target = DecodeModels(setup["target"])
    with pytest.raises(HetSpecError, match="needs a draft model"):
        _run(target, "chain", ChainConfig(), setup)
    with pytest.raises(HetSpecError, match="needs a heads model"):
        _run(target, "medusa", MedusaConfig(), setup)
    with pytest.raises(HetSpecError, match="3 deep but the model has 2 heads"):
        shallow = DecodeModels(setup["target"], heads=OracleHeads(setup["heads"].hiddens, setup["heads"].seq, 2))
        _run(shallow, "medusa", MedusaConfig(tree=TokenTree.chain(3)), setup)
    with pytest.raises(HetSpecError, match="max new tokens"):
        _run(target, "ar", ArConfig(), setup, new_tokens=0)
    with pytest.raises(HetSpecError, match="prompt token ids"):
        decoder("ar").generate(target, [VOCAB + 5], 3, ArConfig(), Clock())
    with pytest.raises(HetSpecError, match="max_position"):
        decoder("ar").generate(target, [1] * 500, 20, ArConfig(), Clock())
    with pytest.raises(HetSpecError, match="gamma"):
        ChainConfig(draft_depth=0)
    with pytest.raises(HetSpecError, match="width"):
        DraftTreeConfig(tree_width=1)
    with pytest.raises(HetSpecError, match="temperature"):
        Sampling(temperature=-0.1)
    with pytest.raises(HetSpecError, match="unknown method 'beam'"):
        decoder("beam")


def test_registry_matches_the_single_worker_methods_of_the_simulator():
    from real.decode import DECODER_MODULES
    from sim.methods import SINGLE_WORKER_METHODS, method_info

    assert tuple(DECODER_MODULES) == SINGLE_WORKER_METHODS
    for name in DECODER_MODULES:
        assert method_info(name).name == decoder(name).name
