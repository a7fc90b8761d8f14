"""hcmp (Ghidorah HCMP) on the real path: the split model equals the unsplit one; greedy hcmp equals greedy ar."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from demo_helpers import evaluation_prompts, reference_ids, token_ids

from hwmodels.errors import HetSpecError
from real.hetero.hcmp import HcmpConfig
from real.hetero.layer_ops import merge_partials, partial_attention
from real.hetero.split_model import SplitTarget, column_cut
from real.hetero.workers import WorkerSession, parse_workers
from real.model.medusa_heads import MedusaHeads
from real.model.transformer import Transformer
from real.run.session import run_prompts
from real.run.worker import allowed_cores
from real.train.loops import init_weights
from sim.model_spec import ModelSpec
from sim.tree import TokenTree

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CORES = allowed_cores()
WORKERS = f"cpu{CORES[0]},cpu{CORES[-1]}" if len(CORES) > 1 else "cpu,cpu0"
TOL = 2e-5


def small_model(n_kv: int = 2) -> tuple[Transformer, MedusaHeads]:
    spec = ModelSpec(name="split-test", n_layers=2, hidden=64, intermediate=160, n_heads=4, n_kv_heads=n_kv,
                     vocab=97, dtype="fp32", arch="llama", max_position=256)
    model = init_weights(Transformer(spec), seed=3).eval().requires_grad_(False)
    heads = MedusaHeads.from_target(model, 3)
    with torch.no_grad():   # non-zero ResBlocks so the split heads are exercised
        heads.w1.normal_(0, 0.05)
        heads.b1.normal_(0, 0.05)
    return model, heads.eval().requires_grad_(False)


TREES = {
    "chain": TokenTree.chain(4),
    "medusa": TokenTree.greedy([[0.6, 0.2, 0.1], [0.4, 0.2, 0.1], [0.3, 0.1, 0.05]], 12),
    "cartesian": TokenTree.cartesian([3, 2]),
}


@pytest.mark.parametrize("separate", [False, True])
@pytest.mark.parametrize("context", [1, 37])
@pytest.mark.parametrize("tree_name", sorted(TREES))
@pytest.mark.parametrize("n_kv", [1, 4])
def test_split_forward_equals_the_unsplit_model(separate, context, tree_name, n_kv):
    model, heads = small_model(n_kv)
    tree = TREES[tree_name]
    gen = torch.Generator().manual_seed(context)
    prompt = torch.randint(0, 97, (1, context), generator=gen)
    block = torch.randint(0, 97, (1, tree.size), generator=gen)
    mask = torch.from_numpy(tree.attention_mask())
    with torch.inference_mode():
        ref_cache = model.new_cache(96)
        ref_prefill = model(prompt, ref_cache)
        ref_cache.keep(range(context))
        positions = context + torch.tensor(tree.depths)
        ref_logits, ref_hidden = model(block, ref_cache, positions=positions, tree_mask=mask, return_hidden=True)
        ref_heads = heads(ref_hidden[:, -1:])[:, 0, 0]
        with WorkerSession(parse_workers(WORKERS)) as session:
            for ratio in (0.0, 0.2, 0.5, 0.83, 1.0):
                split = SplitTarget(model, heads, ratio, ("cpu", "cpu"), separate_buffers=separate)
                cache = split.new_cache(96)
                logits, _, _ = split.prefill(session, prompt, cache)
                cache.keep(range(context))
                assert (logits[0, -1] - ref_prefill[0, -1]).abs().max() < TOL
                logits, hidden, _ = split.forward(session, block, cache, positions, mask)
                assert (logits - ref_logits).abs().max() < TOL, ratio
                assert (hidden - ref_hidden).abs().max() < TOL
                end = context + tree.size
                assert (cache.k[:, :, :, :end] - ref_cache.k[:, :, :, :end]).abs().max() < TOL
                assert (cache.v[:, :, :, :end] - ref_cache.v[:, :, :, :end]).abs().max() < TOL
                head_logits, _ = split.heads(session, hidden[0, -1])
                assert (head_logits - ref_heads).abs().max() < TOL


def test_weights_are_cut_once_by_output_columns():
    model, heads = small_model()
    split = SplitTarget(model, heads, 0.3, ("cpu", "cpu"))
    d, inter, v = 64, 160, 97
    nqkv = 64 + 2 * 32
    c = column_cut(nqkv, 0.3)
    assert split.layers[0][0].qkv.shape == (c, d) and split.layers[0][1].qkv.shape == (nqkv - c, d)
    assert split.layers[0][0].gate_up.shape == (2 * column_cut(inter, 0.3), d)
    assert split.lm[0].shape[0] + split.lm[1].shape[0] == v
    # contiguous copies, not views of the model's weights (cut once, when built)
    assert split.layers[0][0].qkv.data_ptr() != model.model.layers[0].self_attn.q_proj.weight.data_ptr()
    assert all(w.is_contiguous() for side in split.layers[1] for w in (side.qkv, side.o, side.gate_up, side.down))


def test_online_softmax_merge_equals_full_attention():
    gen = torch.Generator().manual_seed(0)
    for trial in range(20):
        h, hk, q, n, hd = 4, (1, 2, 4)[trial % 3], 1 + trial % 5, 3 + trial, 8
        xq = torch.randn(1, h, q, hd, generator=gen)
        k = torch.randn(1, hk, n, hd, generator=gen)
        v = torch.randn(1, hk, n, hd, generator=gen)
        mask = torch.rand(q, n, generator=gen) < 0.6
        mask[:, -1] = True                                   # every row sees at least one key
        ref = F.scaled_dot_product_attention(xq, k, v, attn_mask=mask, enable_gqa=hk != h)
        cut = 1 + trial % (n - 1)
        parts = []
        for lo, hi in ((0, cut), (cut, n)):
            m = mask[:, lo:hi]
            rows = m.any(-1)
            if not rows.all():                               # a part no row of which sees: skip that row's part
                m = m | ~rows[:, None]
            o, mx, lse = partial_attention(xq, k[:, :, lo:hi], v[:, :, lo:hi], m)
            lse = torch.where(rows.view(1, 1, q, 1), lse, torch.zeros_like(lse))
            parts.append((o, mx, lse))
        assert torch.allclose(merge_partials(parts), ref, atol=1e-5)


def test_greedy_hcmp_equals_greedy_ar(tiny_demo):
    prompts = evaluation_prompts(tiny_demo, 3, 32, seed=1)
    reference = reference_ids(tiny_demo, prompts, 24)
    tree = TokenTree.greedy(tiny_demo.summary["medusa_rank_accuracy"], 10)
    for ratio in (0.0, 0.4, 1.0):
        out = run_prompts(tiny_demo, "hcmp", HcmpConfig(tree=tree, partition_ratio=ratio, workers=tuple(WORKERS.split(",")),
                                                        trace_ops=True), prompts, 24, warmup=False,
                          worker=WORKERS.split(",")[0])
        assert token_ids(out) == reference, ratio
        assert out.mean_accepted_per_step > 1.0
        if 0 < ratio < 1:   # each worker's part of every group is a trace record of its own
            devices = {r.device for r in out.records if r.op == "qkv"}
            assert devices == set(WORKERS.split(","))
            counts = [r.tokens_accepted for r in out.records if r.phase == "verify" and not r.op]
            assert sum(counts) == sum(r.decode_tokens for r in out.results)


def test_hcmp_config_errors():
    with pytest.raises(HetSpecError, match=r"ratio must be in \[0, 1\]"):
        HcmpConfig(partition_ratio=1.5)
    with pytest.raises(HetSpecError, match="two different workers"):
        HcmpConfig(workers=("cpu0", "cpu0"))
    with pytest.raises(HetSpecError, match="exactly two workers"):
        HcmpConfig(workers=("cpu0",))


def test_column_cut():
    assert [column_cut(10, r) for r in (0.0, 0.24, 0.26, 1.0)] == [0, 2, 3, 10]
    assert np.all(np.diff([column_cut(128, r) for r in np.linspace(0, 1, 11)]) >= 0)


def test_an_error_on_one_worker_surfaces_and_neither_hangs(monkeypatch):
    model, heads = small_model()
    split = SplitTarget(model, heads, 0.5, ("cpu", "cpu"))
    original = SplitTarget._program

    def failing(self, side, run):
        if side == 1:
            raise RuntimeError("secondary failed")
        original(self, side, run)

    monkeypatch.setattr(SplitTarget, "_program", failing)
    tree = TREES["chain"]
    with torch.inference_mode(), WorkerSession(parse_workers(WORKERS)) as session:
        cache = split.new_cache(32)
        with pytest.raises(RuntimeError, match="secondary failed"):
            split.forward(session, torch.zeros(1, tree.size, dtype=torch.long), cache, torch.arange(tree.size),
                          torch.from_numpy(tree.attention_mask()))
        monkeypatch.setattr(SplitTarget, "_program", original)
        cache.discard()
        logits, _, _ = split.forward(session, torch.zeros(1, tree.size, dtype=torch.long), cache,
                                     torch.arange(tree.size), torch.from_numpy(tree.attention_mask()))
        assert torch.isfinite(logits).all()                       # the workers recover for the next step
    with pytest.raises(HetSpecError, match="no pending tokens"):
        with WorkerSession(parse_workers(WORKERS)) as session:
            cache = split.new_cache(32)
            cache.pending = 1
            split.forward(session, torch.zeros(1, 2, dtype=torch.long), cache, torch.arange(2),
                          torch.ones(2, 2, dtype=torch.bool))
