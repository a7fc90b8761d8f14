"""The static-step path: every forward of a decode through token-count buckets and static buffers
(:mod:`real.model.executor`), on the CPU with the eager backend standing in for CUDA graphs.

Greedy output must stay token-identical to ``ar`` (eager) for every method; the bookkeeping around a
capture (one preparation per slot and bucket, replays after, outputs living in static buffers,
padding rows, cache reuse across prompts, the eager fallback above the largest bucket) is checked
with a recording backend. The CUDA-graph backend itself runs only where CUDA exists.
"""

from __future__ import annotations

import copy

import pytest
import torch

from decode_doubles import SHARPEN, VOCAB, OracleHeads
from decode_doubles import random_spec as _spec

from real.decode import decoder
from real.decode.ar import ArConfig
from real.decode.chain import ChainConfig
from real.decode.common import Clock, DecodeModels, Sampling
from real.decode.draft_tree import DraftTreeConfig
from real.decode.medusa import MedusaConfig
from real.model.executor import (
    DEFAULT_BUCKETS,
    EagerBackend,
    StepExecutor,
    attach,
    detach,
)
from real.model.transformer import Transformer
from sim.tree import TokenTree

NEW_TOKENS = 32


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(11)
    target = Transformer(_spec("rand-target", 2, 48)).eval()
    target.lm_head.weight.data *= SHARPEN
    noisy = Transformer(_spec("rand-copy", 2, 48)).eval()
    noisy.load_state_dict(target.state_dict())
    for p in noisy.parameters():
        p.data += 0.03 * p.data.std() * torch.randn_like(p)
    prompt = torch.randint(0, VOCAB, (20,), generator=torch.Generator().manual_seed(4)).tolist()
    reference = decoder("ar").generate(DecodeModels(target), prompt, NEW_TOKENS, ArConfig(), Clock())
    seq = prompt + list(reference.ids)
    with torch.inference_mode():
        _, hidden = target(torch.tensor([seq]), None, return_hidden=True)
    return {"target": target, "copy": noisy, "heads": OracleHeads(hidden[0], seq, 4), "prompt": prompt,
            "reference": reference}


def _static_copies(models, *names, **kwargs):
    """Deep copies of the named models, each with an executor attached (the module's models stay eager)."""
    out = {}
    for name in names:
        model = copy.deepcopy(models[name])
        assert model.executor is None          # an executor is never copied with its model
        attach(model, **kwargs)
        out[name] = model
    return out


METHODS = [
    ("ar", ArConfig(), ()),
    ("chain", ChainConfig(draft_depth=1), ("copy",)),
    ("chain", ChainConfig(draft_depth=4), ("copy",)),
    ("chain", ChainConfig(draft_depth=4), ("target",)),     # the target drafts for itself: two cache slots
    ("draft-tree", DraftTreeConfig(), ("copy",)),
    ("draft-tree", DraftTreeConfig(tree_width=16, draft_depth=6, branch_threshold=0.05, alpha0=0.001), ("copy",)),
    ("medusa", MedusaConfig(tree=TokenTree.medusa_default()), ()),
    ("medusa", MedusaConfig(tree=TokenTree.cartesian([2, 2, 2])), ()),
    ("medusa", MedusaConfig(tree=TokenTree.chain(0)), ()),
]


@pytest.mark.parametrize("method,config,draft", METHODS, ids=lambda v: getattr(v, "__name__", None))
def test_every_method_through_static_steps_equals_ar(models, method, config, draft):
    static = _static_copies(models, "target", *(d for d in draft if d != "target"))
    target = static["target"]
    draft_model = None if not draft else (target if draft[0] == "target" else static[draft[0]])
    bundle = DecodeModels(target, draft=draft_model, heads=models["heads"])
    for _ in range(2):                         # the second prompt reuses the caches (and buckets)
        result = decoder(method).generate(bundle, models["prompt"], NEW_TOKENS, config, Clock())
        assert result.ids == models["reference"].ids
    stats = target.executor.stats
    assert stats.runs == sum(stats.calls.values()) > 0
    assert set(stats.calls) <= set(target.executor.buckets)
    if method == "medusa":
        assert config.tree.size in target.executor.buckets       # the tree's exact width was declared
        assert stats.calls.get(config.tree.size, 0) >= 2


def test_sampled_chain_runs_through_static_steps(models):
    static = _static_copies(models, "target", "copy")
    config = ChainConfig(draft_depth=3, sampling=Sampling(temperature=1.0))
    bundle = DecodeModels(static["target"], draft=static["copy"])
    eager = DecodeModels(models["target"], draft=models["copy"])
    a = decoder("chain").generate(bundle, models["prompt"], NEW_TOKENS, config, Clock(), torch.Generator().manual_seed(3))
    b = decoder("chain").generate(eager, models["prompt"], NEW_TOKENS, config, Clock(), torch.Generator().manual_seed(3))
    assert len(a.ids) == NEW_TOKENS and a.ids == b.ids


class RecordingBackend:
    """A stand-in for the CUDA-graph backend: 'captures' a bucket by running it once into output
    buffers it keeps, then 'replays' by running the same function into the same buffers."""

    def __init__(self):
        self.prepared: list[int] = []
        self.replays = 0

    def prepare(self, run, stats):
        first = run()
        outputs = tuple(t.clone() for t in first)
        self.prepared.append(outputs[0].shape[1])
        stats.captures += 1

        def runner():
            for buf, value in zip(outputs, run()):
                buf.copy_(value)
            self.replays += 1
            stats.replays += 1
            return outputs
        return runner


def test_buckets_are_prepared_once_per_slot_and_replayed(models):
    target = copy.deepcopy(models["target"])
    backend = RecordingBackend()
    target.executor = StepExecutor(target, backend=backend)
    bundle = DecodeModels(target, heads=models["heads"])
    config = MedusaConfig(tree=TokenTree.cartesian([2, 2]))          # 7 tokens
    target.executor.declare([config.tree.size])
    first = decoder("medusa").generate(bundle, models["prompt"], NEW_TOKENS, config, Clock())
    second = decoder("medusa").generate(bundle, models["prompt"], NEW_TOKENS, config, Clock())
    assert first.ids == second.ids == models["reference"].ids
    # the prompt pass (20 tokens -> bucket 32) and the 7-token verification: one preparation each
    assert sorted(backend.prepared) == [7, 32]
    assert target.executor.stats.captures == 2
    # every call replays, the capturing one included (as a captured CUDA graph runs only when replayed)
    assert backend.replays == first.steps + second.steps + 2 == sum(target.executor.stats.calls.values())


def test_outputs_live_in_static_buffers_and_padding_stays_apart(models):
    target = copy.deepcopy(models["target"])
    executor = attach(target)
    with torch.inference_mode():
        cache = target.new_cache(64)
        assert cache is target.new_cache(64)                          # one persistent cache per slot
        assert cache is not target.new_cache(64, slot="draft")
        assert cache.max_len >= 64 + executor.max_bucket
        prompt = torch.tensor([models["prompt"]])
        a = target(prompt, cache).clone()                             # 20 tokens in bucket 32
        cache.keep(range(20))
        b = target(torch.tensor([[5, 6, 7]]), cache)                  # 3 tokens in bucket 4
        b_again = target.executor._slots["main"].runners[4]()[0]
        assert b.data_ptr() == b_again.data_ptr()                     # a view of the bucket's output buffer
        eager = copy.deepcopy(models["target"])
        ref_cache = eager.new_cache(64)
        ref_a = eager(prompt, ref_cache)
        ref_cache.keep(range(20))
        ref_b = eager(torch.tensor([[5, 6, 7]]), ref_cache)
    torch.testing.assert_close(a, ref_a, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b_again[:, :3], ref_b, rtol=1e-5, atol=1e-5)


def test_bucket_selection_and_the_eager_fallback(models):
    target = copy.deepcopy(models["target"])
    executor = attach(target, buckets=(1, 4, 16))
    assert [executor.bucket(q) for q in (1, 2, 4, 5, 16)] == [1, 4, 4, 16, 16]
    executor.declare([7])
    assert executor.bucket(5) == 7 and executor.buckets == (1, 4, 7, 16)
    assert executor.handles(16, 1) and not executor.handles(17, 1) and not executor.handles(1, 2)
    # a prompt longer than the largest bucket runs eagerly on the same cache; the steps after it are static
    result = decoder("ar").generate(DecodeModels(target), models["prompt"], NEW_TOKENS, ArConfig(), Clock())
    assert result.ids == models["reference"].ids
    assert 20 not in executor.stats.calls and executor.stats.calls[1] == NEW_TOKENS - 1
    detach(target)
    assert target.executor is None
    assert DEFAULT_BUCKETS[0] == 1 and DEFAULT_BUCKETS[-1] == 256


def test_gqa_grouping_equals_repeated_heads():
    """The static forward's grouped-query attention (query heads folded onto their KV head) equals the
    eager model's, for MHA, GQA and MQA shapes."""
    for n_kv in (4, 2, 1):
        torch.manual_seed(n_kv)
        model = Transformer(_spec(f"kv{n_kv}", 2, 32, n_kv)).eval()
        static = copy.deepcopy(model)
        attach(static)
        tree = TokenTree.cartesian([2, 2])
        with torch.inference_mode():
            outs = []
            for m in (model, static):
                cache = m.new_cache(48)
                m(torch.arange(10).view(1, -1), cache)
                cache.keep(range(10))
                outs.append(m(torch.arange(tree.size).view(1, -1), cache, positions=10 + torch.tensor(tree.depths),
                              tree_mask=torch.from_numpy(tree.attention_mask())).clone())
        torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-5)


def test_eager_backend_is_the_cpu_default(models):
    target = copy.deepcopy(models["target"])
    executor = attach(target)
    assert isinstance(executor.backend, EagerBackend) and not executor.graphs
    with pytest.raises(Exception, match="CUDA graphs need a CUDA device"):
        attach(copy.deepcopy(models["target"]), graphs=True)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cuda_graphs_equal_eager_on_the_gpu(models, dtype):
    """On a GPU: every method through captured CUDA graphs emits the tokens of eager ``ar`` on the GPU."""
    gpu = {k: copy.deepcopy(models[k]).to("cuda", dtype) for k in ("target", "copy")}
    reference = decoder("ar").generate(DecodeModels(gpu["target"]), models["prompt"], NEW_TOKENS, ArConfig(), Clock())
    for method, config, draft in METHODS:
        if method == "medusa":
            continue                                  # the oracle heads are a CPU test double
        static = {k: copy.deepcopy(v) for k, v in gpu.items()}
        for m in static.values():
            attach(m, graphs=True)
        d = None if not draft else (static["target"] if draft[0] == "target" else static[draft[0]])
        result = decoder(method).generate(DecodeModels(static["target"], draft=d), models["prompt"], NEW_TOKENS,
                                          config, Clock())
        assert result.ids == reference.ids, (method, config)
        assert static["target"].executor.stats.captures > 0
        assert static["target"].executor.stats.replays > 0


def test_buckets_are_prepared_before_timing(models):
    """After the warm-up every bucket a run can reach is prepared (no capture inside a timed run), on
    scratch slots that no real token sees: the tokens stay ar's."""
    from real.model.executor import prepare_buckets
    from real.run.session import run_prompts

    static = _static_copies(models, "target", "copy")
    bundle = DecodeModels(static["target"], draft=static["copy"])
    backend = RecordingBackend()
    for m in static.values():
        m.executor.backend = backend
    result = run_prompts(bundle, "draft-tree", DraftTreeConfig(tree_width=6), [models["prompt"]], NEW_TOKENS)
    assert result.results[0].ids == models["reference"].ids
    target, draft = static["target"].executor, static["copy"].executor
    assert target.expected == 6 and draft.expected == 3
    assert {1, 2, 4, 8} <= set(target._slots["main"].runners) and {1, 2, 4} <= set(draft._slots["draft"].runners)
    assert prepare_buckets(static["target"], static["copy"]) == 0          # nothing left to prepare
