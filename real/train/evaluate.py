"""Quality metrics of the demo models, all in fp32 inference as the decoders run them, on the
device the model is on (the data moved there).

- :func:`perplexity`: exp of the mean next-token cross-entropy over non-overlapping windows.
- :func:`greedy_agreement`: along the target's own greedy continuation, the fraction of
  positions where the draft's argmax equals the target's token (the draft's chance that a
  greedy proposal is accepted, position by position).
- :func:`head_topk_accuracy`: Medusa head k at position t against the target's token at
  t+k+1, top-1..top-N; :func:`rank_accuracies` turns it into the per-rank accuracies
  (top-i minus top-(i-1)) that Medusa's sparse-tree construction uses (§2.3.3).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from hwmodels.errors import HetSpecError
from real.model.medusa_heads import MedusaHeads
from real.model.transformer import Transformer
from real.train.generate import Continuations

#: Medusa's optimized tree uses up to the top-10 candidates of a head (Fig. 6), so accuracies
#: are reported to rank 10.
TOP_K = 10


def perplexity(model: Transformer, stream: Tensor, seq_len: int, max_windows: int, batch: int = 8) -> float:
    """Perplexity on the first ``max_windows`` non-overlapping windows of ``stream``."""
    window = seq_len + 1
    n = min(max_windows, stream.numel() // window)
    if n == 0:
        raise HetSpecError(f"perplexity: stream of {stream.numel()} tokens is shorter than one window")
    windows = stream[: n * window].view(n, window)
    total, count = 0.0, 0
    with torch.inference_mode():
        for lo in range(0, n, batch):
            chunk = windows[lo:lo + batch].to(model.lm_head.weight.device)
            logits = model(chunk[:, :-1])                                    # [b, T, V]
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1),
                                   reduction="sum")
            total += float(loss)
            count += chunk[:, 1:].numel()
    return math.exp(total / count)


def greedy_agreement(draft: Transformer, data: Continuations) -> float:
    """Fraction of generated positions where the draft's argmax (teacher-forced on the target's
    continuation) equals the target's greedy token."""
    p = data.prompt_len
    tokens = data.tokens.to(draft.lm_head.weight.device)
    with torch.inference_mode():
        logits = draft(tokens[:, :-1])                                       # [n, L-1, V]
    pred = logits[:, p - 1:].argmax(-1)                                       # predicts tokens p..L-1
    return float((pred == tokens[:, p:]).float().mean())


def head_topk_accuracy(heads: MedusaHeads, data: Continuations, top_k: int = TOP_K) -> list[list[float]]:
    """``acc[k-1][i-1]``: fraction of positions where the target's token at t+k+1 is among head
    k's top-i at t (t from the last prompt position on, while t+k+1 is generated)."""
    p, length = data.prompt_len, data.tokens.shape[1]
    device = heads.w1.device
    out: list[list[float]] = []
    with torch.inference_mode():
        positions = torch.arange(p - 1, length - 2)                          # heads need t+2 <= L-1
        logits = heads(data.hidden[:, positions].to(device))                 # [K, n, m, V]
        top = logits.topk(top_k, dim=-1).indices                             # [K, n, m, top_k]
        for k in range(1, heads.n_heads + 1):
            valid = positions + k + 1 < length
            if not bool(valid.any()):
                raise HetSpecError(f"head {k}: continuation of {data.new_tokens} tokens is too short")
            truth = data.tokens[:, positions[valid] + k + 1].to(device)      # [n, m_k]
            hits = top[k - 1][:, valid] == truth.unsqueeze(-1)               # [n, m_k, top_k]
            cumulative = hits.cumsum(-1).clamp(max=1).float().mean(dim=(0, 1))
            out.append([float(v) for v in cumulative])
    return out


def rank_accuracies(topk: list[list[float]]) -> list[list[float]]:
    """Per-rank accuracies: top-i minus top-(i-1) of every head."""
    return [[row[0]] + [max(0.0, row[i] - row[i - 1]) for i in range(1, len(row))] for row in topk]
