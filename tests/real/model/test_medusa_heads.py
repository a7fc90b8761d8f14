"""Medusa heads: untrained heads equal the LM head; shapes; save/load; training helpers."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from hwmodels.errors import HetSpecError
from real.model.medusa_heads import WEIGHTS_FILE, MedusaHeads
from real.model.transformer import Transformer
from real.train.generate import Continuations, greedy_continuations
from real.train.loops import (
    IGNORE,
    MEDUSA_LAMBDA_BASE,
    TrainConfig,
    medusa_examples,
    medusa_loss,
    train_medusa_heads,
)
from sim.model_spec import ModelSpec

SPEC = ModelSpec("heads-test", n_layers=1, hidden=32, intermediate=64, n_heads=4, n_kv_heads=2, vocab=50,
                 dtype="fp32", max_position=128)


@pytest.fixture()
def target():
    torch.manual_seed(0)
    return Transformer(SPEC).eval().requires_grad_(False)


def test_untrained_heads_equal_the_lm_head_prediction(target):
    heads = MedusaHeads.from_target(target, 3)
    x = torch.randint(0, SPEC.vocab, (2, 7))
    with torch.inference_mode():
        logits, hidden = target(x, return_hidden=True)
        head_logits = heads(hidden)
    assert head_logits.shape == (3, 2, 7, SPEC.vocab)
    for k in range(3):
        assert torch.allclose(head_logits[k], logits, atol=1e-5)


def test_head_is_residual_silu_block_then_w2(target):
    heads = MedusaHeads.from_target(target, 2)
    with torch.no_grad():
        heads.w1.normal_()
        heads.b1.normal_()
        heads.w2.normal_()
    h = torch.randn(1, 3, SPEC.hidden)
    out = heads(h)
    for k in range(2):
        ref = (torch.nn.functional.silu(h @ heads.w1[k].T + heads.b1[k]) + h) @ heads.w2[k].T
        assert torch.allclose(out[k], ref, atol=1e-4)


def test_save_load_round_trip_with_reference_names(target, tmp_path):
    heads = MedusaHeads.from_target(target, 2)
    with torch.no_grad():
        heads.w1.normal_()
    heads.save(tmp_path)
    names = set(load_file(str(tmp_path / WEIGHTS_FILE)))
    assert names == {"0.0.linear.weight", "0.0.linear.bias", "0.1.weight",
                     "1.0.linear.weight", "1.0.linear.bias", "1.1.weight"}
    loaded = MedusaHeads.load(tmp_path, SPEC)
    h = torch.randn(2, 4, SPEC.hidden)
    assert loaded.n_heads == 2
    assert torch.equal(heads(h), loaded(h))


def test_load_errors_name_the_tensor(target, tmp_path):
    MedusaHeads.from_target(target, 2).save(tmp_path)
    other = ModelSpec("other", n_layers=1, hidden=32, intermediate=64, n_heads=4, n_kv_heads=2, vocab=60,
                      dtype="fp32", max_position=128)
    with pytest.raises(HetSpecError, match=r"medusa_config.json: vocab_size 50 disagrees with the target other \(60\)"):
        MedusaHeads.load(tmp_path, other)
    tensors = load_file(str(tmp_path / WEIGHTS_FILE))
    del tensors["1.0.linear.bias"]
    save_file(tensors, str(tmp_path / WEIGHTS_FILE))
    with pytest.raises(HetSpecError, match=r"tensor 1\.0\.linear\.bias is missing"):
        MedusaHeads.load(tmp_path, SPEC)
    with pytest.raises(HetSpecError, match="medusa_config.json does not exist"):
        MedusaHeads.load(tmp_path / "nowhere", SPEC)
    with pytest.raises(HetSpecError, match="n_heads must be a positive integer"):
        MedusaHeads(SPEC, 0)


def test_greedy_continuations_match_uncached_greedy(target):
    prompts = torch.randint(0, SPEC.vocab, (3, 5)).tolist()
    data = greedy_continuations(target, prompts, 6, batch=2)
    assert data.tokens.shape == (3, 11) and data.hidden.shape == (3, 10, SPEC.hidden)
    with torch.inference_mode():
        for row in range(3):
            seq = torch.tensor([prompts[row]])
            for _ in range(6):                                     # uncached greedy, one token at a time
                seq = torch.cat([seq, target(seq)[:, -1].argmax(-1, keepdim=True)], dim=1)
            assert torch.equal(seq[0], data.tokens[row])
            _, hidden = target(seq[:, :-1], return_hidden=True)
            assert torch.allclose(hidden[0], data.hidden[row], atol=1e-5)


def test_medusa_examples_align_head_k_with_token_t_plus_k_plus_1():
    tokens = torch.arange(10).view(1, 10)                          # token at position t is t
    hidden = torch.arange(9, dtype=torch.float32).view(1, 9, 1)    # hidden at position t is t
    data = Continuations(tokens, hidden, prompt_len=4)
    h, y = medusa_examples(data, n_heads=3)
    assert h[:, 0].tolist() == [3, 4, 5, 6, 7, 8]                  # from the last prompt position
    for row, t in enumerate(h[:, 0].long().tolist()):
        for k in (1, 2, 3):
            expected = t + k + 1 if t + k + 1 < 10 else IGNORE
            assert int(y[row, k - 1]) == expected


def test_medusa_loss_weights_are_0_8_to_the_k():
    logits = torch.zeros(3, 4, 5)                                  # uniform: CE = log 5 for every head
    labels = torch.zeros(4, 3, dtype=torch.long)
    expected = sum(MEDUSA_LAMBDA_BASE ** k for k in (1, 2, 3)) * torch.log(torch.tensor(5.0))
    assert torch.allclose(medusa_loss(logits, labels), expected)
    labels[:, 2] = IGNORE                                          # head 3 has no label: no term
    expected = sum(MEDUSA_LAMBDA_BASE ** k for k in (1, 2)) * torch.log(torch.tensor(5.0))
    assert torch.allclose(medusa_loss(logits, labels), expected)


def test_training_heads_lowers_their_loss_and_leaves_the_target_alone(target):
    prompts = torch.randint(0, SPEC.vocab, (16, 6), generator=torch.Generator().manual_seed(1)).tolist()
    data = greedy_continuations(target, prompts, 12)
    heads = MedusaHeads.from_target(target, 2)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    h, y = medusa_examples(data, 2)
    with torch.no_grad():
        loss0 = float(medusa_loss(heads(h.unsqueeze(0))[:, 0], y))
    train_medusa_heads(heads, data, TrainConfig(steps=60, batch=64, seq_len=0, lr=1e-2, warmup_steps=5),
                       progress=False)
    with torch.no_grad():
        loss1 = float(medusa_loss(heads(h.unsqueeze(0))[:, 0], y))
    assert loss1 < 0.7 * loss0
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())
