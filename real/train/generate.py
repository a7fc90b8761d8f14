"""The target's greedy continuations, with the hidden states that produced them.

One batched, KV-cached greedy pass gives both the self-distillation data of the Medusa heads
(hidden state at t -> the target's tokens at t+2, t+3, ...) and the reference continuation
every agreement metric is measured along.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from tqdm.auto import tqdm

from hwmodels.errors import HetSpecError
from real.model.transformer import Transformer


@dataclass(frozen=True)
class Continuations:
    tokens: Tensor   # [n, prompt_len + new_tokens] prompt ids then the target's greedy tokens
    hidden: Tensor   # [n, prompt_len + new_tokens - 1, d]: final normed hidden state at positions
                     # 0 .. L-2 (position t's LM-head argmax is tokens[:, t+1] in the generated part)
    prompt_len: int

    @property
    def new_tokens(self) -> int:
        return self.tokens.shape[1] - self.prompt_len


def greedy_continuations(model: Transformer, prompts: list[list[int]] | Tensor, new_tokens: int,
                         batch: int = 32, keep_hidden: bool = True, progress: bool = False,
                         desc: str = "generate") -> Continuations:
    """Greedy continuations of equal-length prompts, ``batch`` prompts per cached pass."""
    ids = torch.as_tensor(prompts, dtype=torch.long)
    if ids.dim() != 2 or ids.shape[0] == 0:
        raise HetSpecError("greedy_continuations: prompts must be a non-empty list of equal-length id lists")
    if new_tokens <= 0:
        raise HetSpecError(f"greedy_continuations: new_tokens must be positive, got {new_tokens}")
    n, p = ids.shape
    total = p + new_tokens
    device = model.lm_head.weight.device
    out_tokens, out_hidden = [], []
    bar = tqdm(total=n * new_tokens, desc=desc, unit="tok", disable=not progress, leave=False)
    with torch.inference_mode():
        for lo in range(0, n, batch):
            chunk = ids[lo:lo + batch].to(device)
            b = chunk.shape[0]
            cache = model.new_cache(total, b)
            logits, hidden = model(chunk, cache=cache, return_hidden=True)   # [b, p, V], [b, p, d]
            cache.keep(range(p))
            seq, hid = [chunk], [hidden]
            nxt = logits[:, -1].argmax(-1, keepdim=True)                     # [b, 1]
            for i in range(new_tokens):
                seq.append(nxt)
                if i == new_tokens - 1:
                    break
                logits, hidden = model(nxt, cache=cache, return_hidden=True)  # [b, 1, V], [b, 1, d]
                cache.keep([0])
                hid.append(hidden)
                nxt = logits[:, -1].argmax(-1, keepdim=True)
                bar.update(b)
            bar.update(b)
            out_tokens.append(torch.cat(seq, dim=1).cpu())
            if keep_hidden:
                out_hidden.append(torch.cat(hid, dim=1).float().cpu())
    bar.close()
    hidden_all = torch.cat(out_hidden) if keep_hidden else torch.empty(0)
    return Continuations(torch.cat(out_tokens), hidden_all, p)
