"""LLMCad weight streaming: streamed weights give the same tokens as resident ones; the memory plan; errors."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from demo_helpers import evaluation_prompts, reference_ids

from hwmodels.errors import HetSpecError
from real.decode.draft_tree import DraftTreeConfig
from real.hetero.request import parse_bytes
from real.hetero.runner import assign_load_steps, run_runtime
from real.hetero.streaming import (
    close_streamed,
    plan_memory,
    read_into,
    streamed_target,
    tensor_locations,
)
from sim.trace import TraceRecord

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def setup(tiny_demo):
    prompts = evaluation_prompts(tiny_demo, 2, 32, seed=4)
    return tiny_demo, prompts, reference_ids(tiny_demo, prompts, 24, "draft-tree", DraftTreeConfig())


def _layer_and_fixed(folder, spec):
    from real.model.checkpoint import check_shapes

    locs = tensor_locations(check_shapes(folder, spec))
    layer = sum(l.nbytes for n, l in locs.items() if n.startswith("model.layers.0."))
    fixed = sum(l.nbytes for n, l in locs.items() if not n.startswith("model.layers."))
    return layer, fixed


@pytest.fixture(scope="module")
def four_layer_target(setup, tmp_path_factory):
    """A random-weight 4-layer target with the demo's vocabulary, on disk (room for resident + streamed layers)."""
    from real.model.checkpoint import load_model, save_model
    from real.model.transformer import Transformer
    from real.train.loops import init_weights

    demo, prompts, _ = setup
    spec = replace(demo.target.spec, name="stream-test", n_layers=4, hidden=64, intermediate=128, n_heads=4,
                   n_kv_heads=2)
    folder = tmp_path_factory.mktemp("stream") / "target"
    save_model(init_weights(Transformer(spec), seed=5), folder)
    model = load_model(folder).requires_grad_(False)
    return folder, model, reference_ids(replace(demo, target=model), prompts, 24, "draft-tree", DraftTreeConfig())


@pytest.mark.parametrize("resident_layers", [0, 2])
@pytest.mark.parametrize("drop_page_cache", [True, False])
def test_streamed_weights_give_the_same_tokens_as_resident_ones(setup, four_layer_target, resident_layers,
                                                                drop_page_cache):
    demo, prompts, _ = setup
    folder, model, reference = four_layer_target
    layer, fixed = _layer_and_fixed(folder, model.spec)
    budget = fixed + (resident_layers + 1) * layer + 10          # one staging buffer + the resident layers
    target, plan = streamed_target(folder, budget, drop_page_cache=drop_page_cache)
    try:
        assert plan.resident_layers == resident_layers and plan.streams
        assert plan.streamed_layers == tuple(range(resident_layers, 4))
        layers = target.model.layers
        out = run_runtime(replace(demo, target=target), "draft-tree", DraftTreeConfig(), prompts, 24, worker="cpu",
                          warmup=False, on_clock=lambda c: setattr(layers, "clock", c))
        stats = layers.stats.summary()
    finally:
        close_streamed(target)
    assert [r.ids for r in out.results] == reference
    # every forward re-read every streamed layer from the file, in full
    assert stats["layer_loads"] >= stats["forwards"] * len(plan.streamed_layers) - 1
    assert stats["loaded_bytes"] == stats["layer_loads"] * layer
    loads = [r for r in assign_load_steps(out.records) if r.phase == "load"]
    assert loads and {r.device for r in loads} == {"storage"}
    steps = {r.step for r in out.records if r.phase == "verify"}
    assert {r.step for r in loads} <= steps | {-1}


def test_the_demo_target_streams_too(setup):
    demo, prompts, reference = setup
    layer, fixed = _layer_and_fixed(demo.folder / "target", demo.target.spec)
    target, plan = streamed_target(demo.folder / "target", fixed + layer + 10)
    try:
        assert plan.resident_layers == 0 and plan.streamed_layers == (0, 1)
        out = run_runtime(replace(demo, target=target), "draft-tree", DraftTreeConfig(), prompts, 24, worker="cpu",
                          warmup=False)
    finally:
        close_streamed(target)
    assert [r.ids for r in out.results] == reference


def test_a_budget_that_holds_everything_streams_nothing(setup):
    demo, prompts, reference = setup
    target, plan = streamed_target(demo.folder / "target", 10**9)
    try:
        assert not plan.streams and plan.resident_layers == demo.target.spec.n_layers
        out = run_runtime(replace(demo, target=target), "draft-tree", DraftTreeConfig(), prompts, 24, worker="cpu",
                          warmup=False)
        assert target.model.layers.stats.summary()["layer_loads"] == 0
    finally:
        close_streamed(target)
    assert [r.ids for r in out.results] == reference


def test_memory_plan_accounting():
    plan = plan_memory(n_layers=8, layer_bytes=100, fixed_bytes=50, draft_bytes=30, kv_bytes=20, budget_bytes=500)
    # 500 - (30 + 20 + 50) - 1 staging layer = 300 -> 3 resident layers, 5 streamed
    assert plan.resident_layers == 3 and plan.streamed_layers == (3, 4, 5, 6, 7) and plan.used == 500
    full = plan_memory(8, 100, 50, 30, 20, 900)
    assert not full.streams and full.resident_layers == 8
    with pytest.raises(HetSpecError, match="memory budget 0.00 MB is too small") as err:
        plan_memory(8, 100, 50, 30, 20, 199)
    assert "\n" not in str(err.value)


def test_read_into_checks_the_buffer(setup, tmp_path):
    demo, _, _ = setup
    from real.model.checkpoint import check_shapes

    locs = tensor_locations(check_shapes(demo.folder / "target", demo.target.spec))
    loc = locs["model.norm.weight"]
    import os

    fd = os.open(loc.path, os.O_RDONLY)
    try:
        buf = torch.empty(loc.shape)
        read_into(fd, loc, buf)
        assert torch.equal(buf, demo.target.model.norm.weight)
        with pytest.raises(HetSpecError, match="stream a checkpoint in the model's dtype"):
            read_into(fd, loc, torch.empty(loc.shape, dtype=torch.float16))
    finally:
        os.close(fd)


@pytest.mark.parametrize("text,expected", [("60MB", 60_000_000), ("0.5GB", 500_000_000), ("48MiB", 48 * 2**20),
                                           ("12", 12_000_000), (3, 3_000_000)])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["x", "0", "-1MB", "5XB"])
def test_parse_bytes_errors(text):
    with pytest.raises(HetSpecError, match="memory budget"):
        parse_bytes(text)


def test_load_records_are_given_the_step_they_feed():
    rec = [TraceRecord(-1, "load", "storage", 0.0, 0.1, op="layer1"), TraceRecord(-1, "prefill", "cpu", 0.0, 0.2),
           TraceRecord(-1, "load", "storage", 0.3, 0.4, op="layer1"), TraceRecord(0, "draft", "cpu", 0.2, 0.5),
           TraceRecord(0, "verify", "cpu", 0.5, 0.6)]
    out = assign_load_steps(rec)
    assert [r.step for r in out if r.phase == "load"] == [-1, 0]
