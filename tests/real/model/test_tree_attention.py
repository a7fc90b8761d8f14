"""Tree attention and KV compaction of the real model: the tree mask and position ids must give the
logits (and cache contents) of decoding each root-to-leaf path on its own."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from real.model.transformer import Transformer
from sim.model_spec import ModelSpec
from sim.tree import TokenTree

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = 97
PREFIX = 7


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(1234)
    spec = ModelSpec(name="tree-attn-test", n_layers=2, hidden=48, intermediate=96, n_heads=4,
                     n_kv_heads=2, vocab=VOCAB, dtype="fp32", max_position=128)
    return Transformer(spec).eval()


@st.composite
def trees(draw):
    """A random tree of 1..12 nodes (each parent drawn among the earlier nodes) and its tokens."""
    size = draw(st.integers(1, 12))
    parents = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, size)]
    tokens = draw(st.lists(st.integers(0, VOCAB - 1), min_size=size, max_size=size))
    return TokenTree.from_parents(parents), tokens


def _prefix_cache(model: Transformer, prefix: torch.Tensor):
    cache = model.new_cache(64)
    with torch.inference_mode():
        model(prefix, cache)
    cache.keep(range(prefix.shape[1]))
    return cache


def _tree_pass(model, prefix, tree: TokenTree, tokens):
    cache = _prefix_cache(model, prefix)
    with torch.inference_mode():
        logits = model(torch.tensor([tokens]), cache, positions=cache.length + torch.tensor(tree.depths),
                       tree_mask=torch.from_numpy(tree.attention_mask()))[0]          # [n, vocab]
    return logits, cache


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=trees(), seed=st.integers(0, 2**16))
def test_tree_mask_equals_decoding_each_path_alone(model, case, seed):
    tree, tokens = case
    prefix = torch.randint(0, VOCAB, (1, PREFIX), generator=torch.Generator().manual_seed(seed))
    tree_logits, _ = _tree_pass(model, prefix, tree, tokens)
    for path in tree.paths:
        cache = _prefix_cache(model, prefix)
        with torch.inference_mode():
            path_logits = model(torch.tensor([[tokens[n] for n in path]]), cache)[0]   # causal
        torch.testing.assert_close(tree_logits[list(path)], path_logits, atol=1e-5, rtol=1e-4)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=trees(), pick=st.integers(0, 11), seed=st.integers(0, 2**16))
def test_keep_compacts_exactly_the_accepted_path(model, case, pick, seed):
    tree, tokens = case
    node = pick % tree.size
    path = tree.ancestors(node)
    prefix = torch.randint(0, VOCAB, (1, PREFIX), generator=torch.Generator().manual_seed(seed))
    _, cache = _tree_pass(model, prefix, tree, tokens)
    cache.keep(path)
    assert cache.length == PREFIX + len(path) and cache.pending == 0

    reference = _prefix_cache(model, prefix)
    with torch.inference_mode():
        model(torch.tensor([[tokens[n] for n in path]]), reference)
    reference.keep(range(len(path)))
    n = reference.length
    torch.testing.assert_close(cache.k[:, :, :, :n], reference.k[:, :, :, :n], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(cache.v[:, :, :, :n], reference.v[:, :, :, :n], atol=1e-5, rtol=1e-4)

    # the next token after the kept path sees exactly the path: same logits as the sequential cache
    nxt = torch.tensor([[3]])
    with torch.inference_mode():
        torch.testing.assert_close(model(nxt, cache), model(nxt, reference), atol=1e-5, rtol=1e-4)


def test_a_wrong_mask_is_detected(model):
    """The property above can fail: a causal (not tree) mask over a branching tree gives other logits."""
    tree = TokenTree.cartesian([2, 2])
    tokens = [5, 6, 7, 8, 9, 10, 11]
    prefix = torch.arange(PREFIX).view(1, -1)
    cache = _prefix_cache(model, prefix)
    with torch.inference_mode():
        wrong = model(torch.tensor([tokens]), cache, positions=cache.length + torch.tensor(tree.depths))[0]
    right, _ = _tree_pass(model, prefix, tree, tokens)
    assert not torch.allclose(wrong[2:], right[2:], atol=1e-4)
