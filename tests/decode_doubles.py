"""Random models and test doubles shared by the decode tests (imported by the tests, like
``cli_runner``): a Llama-shaped spec over a small vocabulary and Medusa heads that know the answer."""

from __future__ import annotations

import torch

from sim.model_spec import ModelSpec

VOCAB = 61
#: Scale of the random LM head: makes the random target's distributions peaked, like a trained
#: model's, so a noisy copy of it agrees often and sometimes branches.
SHARPEN = 6.0


def random_spec(name: str, layers: int, hidden: int, n_kv: int = 2) -> ModelSpec:
    return ModelSpec(name=name, n_layers=layers, hidden=hidden, intermediate=2 * hidden, n_heads=4,
                     n_kv_heads=n_kv, vocab=VOCAB, dtype="fp32", max_position=512)


class OracleHeads(torch.nn.Module):
    """Test double for Medusa heads that knows the target's greedy continuation of one prompt.

    It finds the position of a hidden state by nearest neighbour among the reference hidden states
    and proposes the true future token at rank 0 — except at every third position, where rank 0 is
    wrong and the truth sits at rank 1 — so accepted paths go deep and through rank-1 nodes.
    """

    def __init__(self, hiddens: torch.Tensor, seq: list[int], n_heads: int):
        super().__init__()
        self.hiddens, self.seq, self.n_heads = hiddens, seq, n_heads      # [L, d], L ids

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        b, q, _ = hidden.shape
        out = torch.zeros(self.n_heads, b, q, VOCAB)
        for i in range(q):
            t = int(torch.cdist(hidden[0, i: i + 1], self.hiddens).argmin())
            for k in range(1, self.n_heads + 1):
                truth = self.seq[t + k + 1] if t + k + 1 < len(self.seq) else 0
                wrong = (truth + 1) % VOCAB
                ranked = [wrong, truth] if (t + k) % 3 == 0 else [truth, wrong]
                out[k - 1, 0, i, ranked[0]], out[k - 1, 0, i, ranked[1]] = 10.0, 5.0
        return out
