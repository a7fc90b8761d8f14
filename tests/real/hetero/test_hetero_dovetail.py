"""dovetail on the real path: greedy output equals greedy ar on every placement; transfers are traced;
the DGF drafter's forward, files and errors."""

from __future__ import annotations

import pytest
import torch
from demo_helpers import evaluation_prompts, reference_ids

from hwmodels.errors import HetSpecError
from real.hetero.dgf_drafter import DgfDrafter, dgf_examples, dgf_loss
from real.hetero.dovetail import DovetailConfig, Node, prepare, tree_of
from real.hetero.runner import run_runtime
from real.run.worker import allowed_cores

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CORES = allowed_cores()
A, B = f"cpu{CORES[0]}", f"cpu{CORES[-1]}"


@pytest.fixture(scope="module")
def setup(tiny_demo):
    prompts = evaluation_prompts(tiny_demo, 3, 32, seed=2)
    return tiny_demo, prompts, reference_ids(tiny_demo, prompts, 30)


@pytest.mark.parametrize("workers", [(A, B), (B, A), (A, A)])
@pytest.mark.parametrize("width,depth,top_k", [(16, 7, 10), (5, 2, 3)])
def test_greedy_dovetail_equals_greedy_ar(setup, workers, width, depth, top_k):
    demo, prompts, reference = setup
    config = DovetailConfig(tree_width=width, draft_depth=depth, top_k=top_k, workers=workers, trace_ops=True)
    with prepare(demo, config) as runtime:
        out = run_runtime(runtime, "dovetail", config, prompts, 30, worker=workers[1], warmup=False)
        moved = runtime.bytes_moved
    assert [r.ids for r in out.results] == reference
    assert out.mean_accepted_per_step > 1.0
    transfers = [r for r in out.records if r.phase == "transfer"]
    drafts = [r for r in out.records if r.phase == "draft"]
    verifies = [r for r in out.records if r.phase == "verify"]
    assert {r.device for r in drafts} == {workers[0]} and {r.device for r in verifies} == {workers[1]}
    assert len(drafts) == out.steps * (depth + 1)                 # 1 + depth drafter passes a round
    if workers[0] == workers[1]:
        assert not transfers and moved == 0
    else:   # tree out and accepted tokens back, every round, over the link between the two workers
        assert len(transfers) == 2 * out.steps and moved > 0
        assert {r.op for r in transfers} == {"to_verifier", "to_drafter"}
        assert {r.device for r in transfers} == {"-".join(sorted(workers))}


def test_dovetail_with_an_untrained_dgf_drafter_is_still_lossless(setup):
    demo, prompts, reference = setup
    drafter = DgfDrafter.for_target(demo.target, blocks=1).eval().requires_grad_(False)
    config = DovetailConfig(tree_width=6, draft_depth=3, top_k=3, drafter="dgf", workers=(A, B))
    with prepare(demo, config, dgf=drafter) as runtime:
        out = run_runtime(runtime, "dovetail", config, prompts, 30, worker=B, warmup=False)
        moved = runtime.bytes_moved
    assert [r.ids for r in out.results] == reference
    # the feature drafter also receives the target's hidden states (fp32, hidden wide) every round
    assert moved >= out.steps * demo.target.spec.hidden * 4


def test_tree_from_reranked_nodes():
    pool = [Node(5, -0.1, -1, 0, 1), Node(6, -1.0, -1, 1, 1), Node(7, -0.3, 0, 0, 2), Node(8, -2.0, 2, 0, 3)]
    tree, tokens = tree_of(pool, [0, 2, 1])
    assert tree.parents == (-1, 0, 1, 0) and tokens == [5, 7, 6]
    with pytest.raises(HetSpecError, match="do not form a tree"):
        tree_of(pool, [0, 3])


@pytest.mark.parametrize("kwargs,message", [
    ({"tree_width": 1}, "tree_width must be an integer >= 2"),
    ({"tree_width": 30, "draft_depth": 1, "top_k": 2}, "at most 5 tokens"),
    ({"drafter": "eagle"}, "unknown drafter 'eagle'"),
    ({"workers": ("cpu0",)}, "two workers"),
])
def test_dovetail_config_errors(kwargs, message):
    with pytest.raises(HetSpecError, match=message):
        DovetailConfig(**kwargs)


def test_dgf_drafter_needs_the_drafter(setup):
    demo, _, _ = setup
    with pytest.raises(HetSpecError, match="train-demo --dgf"):
        prepare(demo, DovetailConfig(drafter="dgf", workers=(A, B)))


def test_dgf_forward_files_and_training_signal(setup, tmp_path):
    demo, _, _ = setup
    target = demo.target
    drafter = DgfDrafter.for_target(target, blocks=1)
    d = target.spec.hidden
    tokens = torch.randint(0, target.spec.vocab, (2, 7))
    feats = torch.randn(2, 7, d)
    logits, out = drafter(tokens, feats)
    assert logits.shape == (2, 7, target.spec.vocab) and out.shape == (2, 7, d)
    # gate: f = z * h1 + (1 - z) * h2 lies between its two branches elementwise
    h1 = drafter.w1(feats)
    h2 = torch.nn.functional.silu(drafter.w2(drafter.embed_norm(drafter.embed(tokens))))
    f = drafter.fuse(tokens, feats)
    assert torch.all(f <= torch.maximum(h1, h2) + 1e-6) and torch.all(f >= torch.minimum(h1, h2) - 1e-6)
    # cached, tree-masked passes equal the cache-free causal pass
    with torch.inference_mode():
        cache = drafter.new_cache(16)
        step_logits, _ = drafter(tokens[:1, :4], feats[:1, :4], cache)
        cache.keep(range(4))
        more, _ = drafter(tokens[:1, 4:], feats[:1, 4:], cache)
        full, _ = drafter(tokens[:1], feats[:1])
    assert torch.allclose(torch.cat([step_logits, more], 1), full, atol=1e-4)
    # files: trained tensors only; the embedding and LM head come back from the target
    drafter.save(tmp_path / "dgf", {"demo_fingerprint": "x"})
    back = DgfDrafter.load(tmp_path / "dgf", target)
    assert torch.equal(back.w1.weight, drafter.w1.weight) and torch.equal(back.lm_head.weight, target.lm_head.weight)
    # a target of another shape: one line naming the tensor
    from dataclasses import replace

    from real.model.transformer import Transformer

    other = Transformer(replace(target.spec, hidden=2 * d, intermediate=2 * target.spec.intermediate))
    with pytest.raises(HetSpecError, match="tensor .* has shape"):
        DgfDrafter.load(tmp_path / "dgf", other)
    # the loss falls after a few steps on the target's own continuations
    from real.train.generate import greedy_continuations

    data = greedy_continuations(target, [list(range(1, 9)), list(range(20, 28))], 8)
    t, fi, fo = dgf_examples(data)
    assert t.shape[1] == fi.shape[1] == fo.shape[1] == 14
    opt = torch.optim.Adam([p for p in drafter.parameters() if p.requires_grad], lr=3e-3)
    first = float(dgf_loss(drafter, t, fi, fo)[0].detach())
    for _ in range(25):
        loss, _ = dgf_loss(drafter, t, fi, fo)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(dgf_loss(drafter, t, fi, fo)[0].detach()) < first


def test_a_drafter_pass_record_holds_its_forward_not_the_tree_work(monkeypatch):
    """Each pass record spans the pass's mask rows and forward; choosing nodes, their top-k and the pool
    between the passes fall outside it (the round's host work, measured as the decode's time outside its
    traced forwards). A fake clock advances 1 s per forward and 1000 s per node added to the pool."""
    import real.hetero.dovetail as dovetail

    now = [0.0]

    class FakeTime:
        @staticmethod
        def perf_counter():
            return now[0]

    class Drafter:
        uses_features = False

        def run(self, tokens, feats, cache, positions, mask):
            now[0] += 1.0
            return torch.randn(1, tokens.shape[1], 32), None

    class Cache:
        pending = 0

        def keep(self, _positions):
            pass

    def slow_node(*args, **kwargs):
        now[0] += 1000.0
        return Node(*args, **kwargs)

    monkeypatch.setattr(dovetail, "time", FakeTime)
    monkeypatch.setattr(dovetail, "Node", slow_node)
    config = DovetailConfig(tree_width=8, draft_depth=3, top_k=3)
    spans = []
    dovetail.grow_tree(Drafter(), Cache(), torch.tensor([[1, 2]]), None, 10, config,
                       torch.zeros(9, 9, dtype=torch.bool), lambda j, t0: spans.append((j, now[0] - t0)))
    assert spans == [(0, 1.0), (1, 1.0), (2, 1.0), (3, 1.0)]


def test_tree_mask_rows_match_the_row_by_row_ancestry():
    """A node's row: its ancestors among the round's fed nodes, and itself; built in four tensor operations."""
    from real.hetero.dovetail import tree_mask_rows

    rows = torch.ones(12, 12, dtype=torch.bool)          # stale rows of an earlier round
    tree_mask_rows(rows, 0, [-1, -1, -1])                 # pass 1: three children of the root
    tree_mask_rows(rows, 3, [0, 0, 2])                    # pass 2: two under slot 0, one under slot 2
    tree_mask_rows(rows, 6, [5, 3, -1])                   # pass 3 (a root child fed late too)
    parents = {0: -1, 1: -1, 2: -1, 3: 0, 4: 0, 5: 2, 6: 5, 7: 3, 8: -1}
    want = torch.zeros(9, 9, dtype=torch.bool)
    for slot, parent in parents.items():
        want[slot, slot] = True
        while parent >= 0:
            want[slot, parent] = True
            parent = parents[parent]
    assert torch.equal(rows[:9, :9], want)
    assert not rows[:9, 9:].any()                         # nothing beyond the fed slots
