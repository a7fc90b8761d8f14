"""Weight layouts for inference: how a loaded :class:`real.model.transformer.Transformer` stores its
linear weights in memory. Files keep Hugging Face's layout (``[out, in]`` per projection); a model is
packed after it is loaded and placed, for decoding only (a packed model is not saved or trained).

- ``hf``: as loaded, ``F.linear(x, W)`` with ``W [out, in]``, q/k/v and gate/up separate.
- ``fused``: q/k/v one ``[nq + 2 kv, in]`` weight and gate/up one ``[2 I, in]`` weight (3 and 2
  products become 1 each: fewer kernels per layer, the eager launch count on a GPU).
- ``in-out``: fused, and every linear stored transposed, ``[in, out]`` contiguous, computed as
  ``x @ W``; on a CPU the matrix-vector product of one token then streams each weight row by row.

The three views ``q_proj`` / ``k_proj`` / ``v_proj`` (and ``gate_proj`` / ``up_proj``) stay, their
weights views into the fused tensor, so code that reads a projection's weight (the hcmp splitter)
still finds it.

Which is faster depends on the device and the token count; measured on this project's 2-core CPU
(``python -m real.run.bench --layouts``; docs/decode-methods.md): ``in-out`` streams one token
~15 % faster than ``hf`` and two tokens ~40 % faster, but 4 to 16 tokens 5-20 % slower; fusing
helps one token a little and hurts 4+ tokens with ``[out, in]``. :func:`layout_for` picks by device
and by the token counts a model's forwards run.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from hwmodels.errors import HetSpecError

LAYOUTS = ("hf", "fused", "in-out")


class InOutLinear(nn.Module):
    """A bias-free linear stored as ``weight_t [in, out]`` (contiguous), computed as ``x @ weight_t``.
    ``weight`` is the ``[out, in]`` view, for code that reads a projection's weight."""

    def __init__(self, weight_t: Tensor):
        super().__init__()
        self.weight_t = nn.Parameter(weight_t.contiguous(), requires_grad=False)
        self.in_features, self.out_features = weight_t.shape

    @property
    def weight(self) -> Tensor:
        return self.weight_t.t()

    def forward(self, x: Tensor) -> Tensor:
        return torch.matmul(x, self.weight_t)


def _linear(weight: Tensor, layout: str) -> nn.Module:
    """A linear of ``weight [out, in]`` in ``layout`` (a new tensor: the caller drops the old module)."""
    if layout == "in-out":
        return InOutLinear(weight.detach().t().contiguous())
    out = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device=weight.device, dtype=weight.dtype)
    out.weight = nn.Parameter(weight.detach().contiguous(), requires_grad=False)
    return out


def _view_of(module: nn.Linear, rows: Tensor) -> None:
    """Make ``module.weight`` a view of ``rows`` (of a fused weight): no second copy in memory."""
    module.weight = nn.Parameter(rows, requires_grad=False)


def layout_for(device_type: str, max_tokens: int) -> str:
    """The layout for a model whose forwards run at most ``max_tokens`` tokens (prefill aside) on a device:
    on a CPU ``in-out`` for one or two tokens (ar, draft models), ``hf`` for verification passes;
    ``fused`` on CUDA."""
    if device_type == "cuda":
        return "fused"
    return "in-out" if max_tokens <= 2 else "hf"


def pack(model, layout: str):
    """Store ``model``'s linear weights in ``layout`` (in place; returns the model). Call it after the
    model has its device and dtype: moving a packed model copies the views apart."""
    if layout not in LAYOUTS:
        raise HetSpecError(f"weight layout {layout!r}: give one of {', '.join(LAYOUTS)}")
    if layout == "hf" or getattr(model, "layout", "hf") != "hf":
        return model
    with torch.no_grad():
        for layer in model.model.layers:
            a, mlp = layer.self_attn, layer.mlp
            nq, nkv = a.q_proj.weight.shape[0], a.k_proj.weight.shape[0]
            a.qkv = _linear(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]), layout)
            w = a.qkv.weight
            _view_of(a.q_proj, w[:nq])
            _view_of(a.k_proj, w[nq:nq + nkv])
            _view_of(a.v_proj, w[nq + nkv:])
            inter = mlp.gate_proj.weight.shape[0]
            mlp.gate_up = _linear(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]), layout)
            w = mlp.gate_up.weight
            _view_of(mlp.gate_proj, w[:inter])
            _view_of(mlp.up_proj, w[inter:])
            if layout == "in-out":
                a.o_proj = _linear(a.o_proj.weight, layout)
                mlp.down_proj = _linear(mlp.down_proj.weight, layout)
        if layout == "in-out":     # a tied LM head gets a transposed copy; the embedding keeps its rows
            model.lm_head = _linear(model.lm_head.weight, layout)
    model.layout = layout
    return model
