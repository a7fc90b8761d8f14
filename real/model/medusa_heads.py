"""Medusa decoding heads (Medusa, Cai et al., ICML 2024, §2.1).

Head k (k = 1..K) reads the target's last hidden state h_t (after the final norm) and predicts
the token k+1 positions after the one the LM head predicts from h_t:

    p_t^(k) = softmax( W2_k · ( SiLU(W1_k · h_t + b1_k) + h_t ) )

W1_k, b1_k start at zero and W2_k as a copy of the target's LM head, so an untrained head
predicts exactly what the LM head does. The K heads are stored stacked (``w1: [K, d, d]``,
``w2: [K, V, d]``) so one batched matmul serves all heads, which matters on a CPU where each
operator costs a fixed dispatch overhead.

Departure from the reference code (FasterDecoding/Medusa ``ResBlock``): there the bias b1 keeps
``nn.Linear``'s random initialisation, so an untrained head is only close to the LM head; here
it starts at zero, as the paper states the head "starts out equal to the base model".

Files: ``medusa_config.json`` + ``medusa_heads.safetensors`` with per-head tensors named as in
the reference code's ``medusa_lm_head`` (``{k}.0.linear.weight``, ``{k}.0.linear.bias``,
``{k}.1.weight``, k 0-based), so trained heads can be exchanged with it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hwmodels.atomic_files import write_text
from hwmodels.errors import HetSpecError
from real.model.checkpoint import open_safetensors, save_safetensors
from sim.model_spec import ModelSpec

CONFIG_FILE = "medusa_config.json"
WEIGHTS_FILE = "medusa_heads.safetensors"


class MedusaHeads(nn.Module):
    def __init__(self, spec: ModelSpec, n_heads: int, lm_head: Tensor | None = None):
        """``lm_head``: the target's LM-head weight ``[vocab, hidden]`` to copy into every W2_k
        (random when None, e.g. before loading saved heads)."""
        super().__init__()
        if not isinstance(n_heads, int) or n_heads <= 0:
            raise HetSpecError(f"Medusa heads: n_heads must be a positive integer, got {n_heads!r}")
        self.spec, self.n_heads = spec, n_heads
        d, v = spec.hidden, spec.vocab
        self.w1 = nn.Parameter(torch.zeros(n_heads, d, d))   # [K, d_out, d_in], zero: SiLU(0)=0
        self.b1 = nn.Parameter(torch.zeros(n_heads, d))      # [K, d]
        if lm_head is not None:
            if tuple(lm_head.shape) != (v, d):
                raise HetSpecError(f"Medusa heads: lm_head shape {list(lm_head.shape)} != [{v}, {d}]")
            w2 = lm_head.detach().to(torch.float32).unsqueeze(0).repeat(n_heads, 1, 1)
        else:
            w2 = torch.randn(n_heads, v, d) * d ** -0.5
        self.w2 = nn.Parameter(w2.contiguous())              # [K, V, d]

    @classmethod
    def from_target(cls, target: nn.Module, n_heads: int) -> "MedusaHeads":
        """Untrained heads for ``target`` (a :class:`real.model.transformer.Transformer`)."""
        heads = cls(target.spec, n_heads, target.lm_head.weight)
        return heads.to(target.lm_head.weight.device)

    def residual(self, hidden: Tensor) -> Tensor:
        """``SiLU(W1 h + b1) + h`` of every head: hidden ``[b, q, d]`` -> ``[K, b*q, d]``."""
        b, q, d = hidden.shape
        h = hidden.reshape(1, b * q, d)                           # [1, bq, d]
        z = torch.matmul(h, self.w1.transpose(1, 2)) + self.b1.unsqueeze(1)  # [K, bq, d]
        return F.silu(z) + h

    def forward(self, hidden: Tensor) -> Tensor:
        """hidden ``[b, q, d]`` (the target's final normed hidden state) -> logits
        ``[K, b, q, vocab]``; head k (index k-1) predicts the token k+1 after the LM head's."""
        b, q, _ = hidden.shape
        logits = torch.matmul(self.residual(hidden), self.w2.transpose(1, 2))  # [K, bq, V]
        return logits.view(self.n_heads, b, q, -1)

    # ------------------------------------------------------------------ files
    def save(self, folder: str | Path) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        config = {"medusa_num_heads": self.n_heads, "medusa_num_layers": 1,
                  "hidden_size": self.spec.hidden, "vocab_size": self.spec.vocab,
                  "base_model": self.spec.name}
        write_text(folder / CONFIG_FILE, json.dumps(config, indent=2) + "\n")
        tensors = {}
        for k in range(self.n_heads):
            tensors[f"{k}.0.linear.weight"] = self.w1[k].detach().cpu().contiguous().clone()
            tensors[f"{k}.0.linear.bias"] = self.b1[k].detach().cpu().contiguous().clone()
            tensors[f"{k}.1.weight"] = self.w2[k].detach().cpu().contiguous().clone()
        save_safetensors(tensors, folder / WEIGHTS_FILE)
        return folder

    @classmethod
    def load(cls, folder: str | Path, spec: ModelSpec, dtype: torch.dtype = torch.float32,
             device: str | torch.device = "cpu") -> "MedusaHeads":
        """Heads saved by :meth:`save` for a target of shape ``spec``; shapes are checked."""
        folder = Path(folder)
        cfg_path, weights = folder / CONFIG_FILE, folder / WEIGHTS_FILE
        for path in (cfg_path, weights):
            if not path.exists():
                raise HetSpecError(f"Medusa heads {folder}: {path.name} does not exist")
        try:
            config = json.loads(cfg_path.read_text())
            n_heads = config["medusa_num_heads"]
        except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
            raise HetSpecError(f"{cfg_path}: needs an integer 'medusa_num_heads'") from None
        if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1:
            raise HetSpecError(f"{cfg_path}: medusa_num_heads must be an integer >= 1, got {n_heads!r}")
        d, v = spec.hidden, spec.vocab
        for key, want in (("hidden_size", d), ("vocab_size", v)):
            if key in config and config[key] != want:
                raise HetSpecError(f"{cfg_path}: {key} {config[key]!r} disagrees with the target "
                                   f"{spec.name} ({want}): these heads belong to another model")
        heads = cls(spec, n_heads)
        expected = {}
        for k in range(n_heads):
            expected[f"{k}.0.linear.weight"] = (d, d)
            expected[f"{k}.0.linear.bias"] = (d,)
            expected[f"{k}.1.weight"] = (v, d)
        with open_safetensors(weights) as f:
            names = set(f.keys())
            stored = {int(n.split(".", 1)[0]) for n in names if n.split(".", 1)[0].isdigit()}
            if stored and len(stored) != n_heads:
                raise HetSpecError(f"{cfg_path}: medusa_num_heads {n_heads} disagrees with {weights}, which holds "
                                   f"{len(stored)} heads")
            for name, shape in expected.items():
                if name not in names:
                    raise HetSpecError(f"Medusa heads {weights}: tensor {name} is missing "
                                       f"(expected shape {list(shape)})")
                found = tuple(f.get_slice(name).get_shape())
                if found != shape:
                    raise HetSpecError(f"Medusa heads {weights}: tensor {name} has shape {list(found)}, "
                                       f"expected {list(shape)}")
            with torch.no_grad():
                for k in range(n_heads):
                    heads.w1[k].copy_(f.get_tensor(f"{k}.0.linear.weight"))
                    heads.b1[k].copy_(f.get_tensor(f"{k}.0.linear.bias"))
                    heads.w2[k].copy_(f.get_tensor(f"{k}.1.weight"))
        return heads.to(device=device, dtype=dtype).eval()
