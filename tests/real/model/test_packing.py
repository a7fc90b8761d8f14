"""Weight layouts for inference (real.model.packing): a packed model computes what the loaded one
does, decodes the same greedy tokens with every method, keeps one copy of each weight, and the
layout policy picks [in, out] only for one- and two-token forwards on a CPU."""

from __future__ import annotations

import copy

import pytest
import torch

from real.decode import decoder
from real.decode.ar import ArConfig
from real.decode.chain import ChainConfig
from real.decode.common import Clock, DecodeModels
from real.decode.draft_tree import DraftTreeConfig
from real.model.packing import InOutLinear, layout_for, pack
from real.model.placement import Placement, place_models
from real.model.transformer import Transformer
from sim.model_spec import ModelSpec
from sim.tree import TokenTree

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model(seed: int, tied: bool = False, layers: int = 2) -> Transformer:
    torch.manual_seed(seed)
    spec = ModelSpec(name=f"m{seed}", n_layers=layers, hidden=48, intermediate=96, n_heads=4, n_kv_heads=2, vocab=61,
                     dtype="fp32", max_position=256, tie_embeddings=tied)
    model = Transformer(spec).eval()
    model.lm_head.weight.data *= 6.0
    return model


@pytest.mark.parametrize("layout", ["fused", "in-out"])
@pytest.mark.parametrize("tied", [False, True])
def test_a_packed_model_computes_what_the_loaded_one_does(layout, tied):
    model = _model(1, tied)
    packed = pack(copy.deepcopy(model), layout)
    tree = TokenTree.cartesian([2, 2])
    with torch.inference_mode():
        outs = []
        for m in (model, packed):
            cache = m.new_cache(64)
            a = m(torch.arange(12).view(1, -1), cache).clone()
            cache.keep(range(12))
            b = m(torch.arange(tree.size).view(1, -1), cache, positions=12 + torch.tensor(tree.depths),
                  tree_mask=torch.from_numpy(tree.attention_mask()))
            outs.append((a, b))
    for x, y in zip(outs[0], outs[1]):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)
    a = packed.model.layers[0].self_attn
    assert a.qkv is not None and packed.model.layers[0].mlp.gate_up is not None
    # the q/k/v views share the fused tensor's memory: one copy of each weight
    fused = a.qkv.weight_t if layout == "in-out" else a.qkv.weight
    assert a.q_proj.weight.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()
    if layout == "in-out":
        assert isinstance(a.o_proj, InOutLinear) and a.o_proj.weight_t.is_contiguous()
        assert a.o_proj.weight.shape == (48, 48)        # read as [out, in]
    assert pack(packed, layout) is packed and packed.layout == layout


def test_every_method_decodes_the_same_tokens_packed():
    target, draft = _model(2), _model(3, layers=1)
    prompt = torch.randint(0, 61, (16,), generator=torch.Generator().manual_seed(5)).tolist()
    reference = decoder("ar").generate(DecodeModels(target), prompt, 24, ArConfig(), Clock()).ids
    for layout in ("fused", "in-out"):
        packed = DecodeModels(pack(copy.deepcopy(target), layout), draft=pack(copy.deepcopy(draft), "in-out"))
        for method, config in (("ar", ArConfig()), ("chain", ChainConfig(draft_depth=3)),
                               ("draft-tree", DraftTreeConfig(tree_width=6))):
            assert decoder(method).generate(packed, prompt, 24, config, Clock()).ids == reference, (layout, method)


def test_the_hcmp_splitter_reads_a_packed_model():
    from real.hetero.split_model import SplitTarget

    model = pack(copy.deepcopy(_model(4)), "in-out")
    split = SplitTarget(model, None, 0.5, ("cpu", "cpu"))
    ref = SplitTarget(_model(4), None, 0.5, ("cpu", "cpu"))
    for a, b in zip(split.layers[0], ref.layers[0]):
        torch.testing.assert_close(a.qkv, b.qkv)
        torch.testing.assert_close(a.down, b.down)


def test_layout_policy_and_placement():
    assert layout_for("cpu", 1) == layout_for("cpu", 2) == "in-out"
    assert layout_for("cpu", 4) == layout_for("cpu", 64) == "hf"
    assert layout_for("cuda", 1) == layout_for("cuda", 64) == "fused"
    target, draft = _model(6), _model(7, layers=1)
    models = DecodeModels(target, draft=draft)
    placed = place_models(models, Placement("cpu", "fp32", graphs=False), target_tokens=1)
    assert placed.target.layout == "in-out" and placed.draft.layout == "in-out"
    assert getattr(target, "layout", "hf") == "hf" and target.model.layers[0].self_attn.qkv is None   # untouched
    verifier = place_models(models, Placement("cpu", "fp32", graphs=False), target_tokens=8)
    assert verifier.target is target and verifier.draft.layout == "in-out"
    kept = place_models(models, Placement("cpu", "fp32", graphs=False))
    assert kept.target is target and kept.draft.layout == "in-out"
