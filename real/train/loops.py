"""Training of the demo models: causal LMs (target, draft) and Medusa heads.

- :func:`train_causal_lm`: next-token cross-entropy on random windows of a token stream,
  AdamW, linear warmup then cosine decay.
- :func:`distill_on_continuations`: the draft learns the target's own greedy continuations
  (sequence-level distillation; loss only on the generated tokens). This raises the draft's
  greedy agreement with the target, which is what draft speculation needs.
- :func:`train_medusa_heads`: Medusa-1 self-distillation. The target is frozen; its hidden
  states along its own greedy continuations (:mod:`real.train.generate`) are the inputs, its
  tokens the labels, and the loss is ``sum_k 0.8^k * CE(head_k(h_t), y_{t+k+1})``.

Every run is seeded (weights and batch order), shows a tqdm bar with the running loss, and
runs the matrix products in bfloat16 autocast where the device has native bf16 (master weights
and optimizer state stay fp32). Training runs on the device the model's parameters are on: the
batches are drawn on the CPU (seeded, the same on every device) and moved there.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from hwmodels.errors import HetSpecError
from real.model.medusa_heads import MedusaHeads
from real.model.tokenizer import BPETokenizer
from real.model.transformer import Transformer
from real.train.generate import Continuations
from sim.records.machine import x86_cpu_flags

#: Medusa-1 loss weight of head k is LAMBDA_BASE ** k (Medusa §2.2, λ_k = 0.8^k).
MEDUSA_LAMBDA_BASE = 0.8

#: Seconds between a bar's refreshes on a terminal (True) and in a log (False), where each refresh is a line.
REFRESH_S = {True: 0.5, False: 30.0}

#: Labels to skip in cross-entropy (PyTorch's default ignore_index).
IGNORE = -100

#: Weight of the running-loss average in the progress bar (about the last 50 steps).
LOSS_EMA = 0.98

#: Initial weight std of the demo models (GPT-2 / Llama's 0.02); output projections are scaled
#: by 1/sqrt(2 * n_layers) (GPT-2) so the residual stream does not grow with depth.
INIT_STD = 0.02


@dataclass(frozen=True)
class TrainConfig:
    steps: int
    batch: int              # sequences (LM) or positions (Medusa heads) per step
    seq_len: int            # tokens per sequence (LM training); unused for heads
    lr: float               # peak learning rate
    warmup_steps: int
    min_lr_ratio: float = 0.1      # cosine decays to lr * min_lr_ratio
    weight_decay: float = 0.1
    beta2: float = 0.95            # AdamW (0.9, 0.95) as in Llama training
    grad_clip: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps <= 0 or self.batch <= 0 or self.lr <= 0 or not 0 <= self.warmup_steps <= self.steps:
            raise HetSpecError(f"bad training config {self}")


@dataclass(frozen=True)
class TrainResult:
    steps: int
    tokens: int             # supervised tokens (labels) seen
    final_loss: float       # running average over the last steps
    seconds: float


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup over ``warmup_steps`` then cosine decay to ``lr * min_lr_ratio``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


#: x86 CPU flags (``/proc/cpuinfo``) of native bf16 matrix instructions: AVX512-BF16 and AMX-BF16.
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def bf16_supported(cpu_flags: frozenset[str] | None = None) -> bool:
    """True where the CPU has native bf16 matrix instructions; bf16 autocast is slower than fp32
    without them. oneDNN's own check also says yes on any AVX-512 CPU, which only emulates bf16:
    on an AVX-512 Xeon without AVX512-BF16 a training step of the small target takes about twice
    as long under bf16 autocast as in fp32 (docs/demo-models.md). So on x86 the CPU's flags decide (``cpu_flags``:
    the flags to judge, default :func:`x86_cpu_flags`); elsewhere, or where they cannot be read,
    oneDNN's check."""
    try:
        onednn = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False
    flags = x86_cpu_flags() if cpu_flags is None else cpu_flags
    return onednn if not flags else onednn and bool(NATIVE_BF16_FLAGS & flags)


def bf16_autocast(device: torch.device | str) -> bool:
    """Whether training on ``device`` runs its matrix products in bf16 autocast: on a CPU with native
    bf16 (:func:`bf16_supported`), on a GPU that supports bf16 (``torch.cuda.is_bf16_supported``)."""
    device = torch.device(device)
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    return bf16_supported()


def init_weights(model: Transformer, seed: int) -> Transformer:
    """Seeded GPT-2 style initialisation: normal(0, 0.02), residual outputs scaled by depth."""
    gen = torch.Generator().manual_seed(seed)
    out_std = INIT_STD / math.sqrt(2 * model.spec.n_layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.fill_(1.0)
            elif name.endswith(("o_proj.weight", "down_proj.weight")):
                p.copy_(torch.randn(p.shape, generator=gen) * out_std)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * INIT_STD)
    return model


def token_stream(tokenizer: BPETokenizer, texts: list[str]) -> Tensor:
    """1-D ``long`` tensor: every text's ids, each followed by the end-of-text id."""
    ids: list[int] = []
    for enc in tokenizer.encode_batch(texts):
        ids.extend(enc)
        ids.append(tokenizer.eos_id)
    return torch.tensor(ids, dtype=torch.long)


def _optimizer(params: list[nn.Parameter], cfg: TrainConfig) -> torch.optim.AdamW:
    # No weight decay on gains (norm weights, biases): the usual split for transformers.
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, cfg.beta2))


def _run(params: list[nn.Parameter], loss_fn: Callable[[int, torch.Generator], tuple[Tensor, int]],
         cfg: TrainConfig, desc: str, progress: bool) -> TrainResult:
    """The shared loop: ``loss_fn(step, gen) -> (loss, supervised tokens)``; AdamW, schedule,
    gradient clipping, a tqdm bar showing the running loss."""
    opt = _optimizer(params, cfg)
    gen = torch.Generator().manual_seed(cfg.seed)
    device = params[0].device
    autocast = bf16_autocast(device)
    ema, tokens = None, 0
    start = time.perf_counter()
    bar = tqdm(range(cfg.steps), desc=desc, disable=not progress, dynamic_ncols=True,
               mininterval=REFRESH_S[sys.stderr.isatty()])
    for step in bar:
        lr = lr_at(step, cfg)
        for group in opt.param_groups:
            group["lr"] = lr
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            loss, n = loss_fn(step, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        value = float(loss.detach())
        if not math.isfinite(value):
            raise HetSpecError(f"{desc}: loss became {value} at step {step} (lower the learning rate)")
        ema = value if ema is None else LOSS_EMA * ema + (1 - LOSS_EMA) * value
        tokens += n
        if progress and (step % 5 == 0 or step == cfg.steps - 1):
            bar.set_postfix(loss=f"{ema:.3f}", lr=f"{lr:.1e}", refresh=False)   # shown at the next refresh
    bar.close()
    return TrainResult(cfg.steps, tokens, float(ema), time.perf_counter() - start)


def _lm_loss(model: Transformer, batch: Tensor, first_label: int = 0) -> tuple[Tensor, int]:
    """Next-token cross-entropy of ``batch [b, T+1]`` (moved to the model's device); labels before
    ``first_label`` ignored."""
    batch = batch.to(model.lm_head.weight.device)
    inputs, labels = batch[:, :-1], batch[:, 1:].clone()
    if first_label:
        labels[:, :first_label] = IGNORE
    logits = model(inputs)                                                  # [b, T, V]
    loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=IGNORE)
    return loss, int((labels != IGNORE).sum())


def train_causal_lm(model: Transformer, stream: Tensor, cfg: TrainConfig, desc: str = "train",
                    progress: bool = True) -> TrainResult:
    """Next-token training on ``cfg.batch`` random windows of ``cfg.seq_len`` tokens per step."""
    window = cfg.seq_len + 1
    if stream.numel() <= window:
        raise HetSpecError(f"{desc}: token stream of {stream.numel()} tokens is shorter than one window")
    model.train()

    def loss_fn(step: int, gen: torch.Generator) -> tuple[Tensor, int]:
        starts = torch.randint(0, stream.numel() - window, (cfg.batch,), generator=gen)
        batch = torch.stack([stream[s:s + window] for s in starts.tolist()])   # [b, T+1]
        return _lm_loss(model, batch)

    result = _run([p for p in model.parameters() if p.requires_grad], loss_fn, cfg, desc, progress)
    model.eval()
    return result


def distill_on_continuations(model: Transformer, data: Continuations, cfg: TrainConfig,
                             stream: Tensor | None = None, desc: str = "distill",
                             progress: bool = True) -> TrainResult:
    """Train ``model`` to reproduce the target's greedy continuations (loss on generated tokens:
    each row's prompt is context only). With ``stream``, every step adds the next-token loss
    on ``cfg.batch`` corpus windows of ``cfg.seq_len`` tokens, so the draft keeps modelling
    real text instead of memorising the continuations (which alone ruins its perplexity)."""
    seqs = data.tokens
    model.train()

    def loss_fn(step: int, gen: torch.Generator) -> tuple[Tensor, int]:
        rows = torch.randint(0, seqs.shape[0], (cfg.batch,), generator=gen)
        # label j is token j+1: the first generated token (index prompt_len) is label prompt_len-1
        loss, n = _lm_loss(model, seqs[rows], first_label=data.prompt_len - 1)
        if stream is not None:
            window = cfg.seq_len + 1
            starts = torch.randint(0, stream.numel() - window, (cfg.batch,), generator=gen)
            corpus_loss, m = _lm_loss(model, torch.stack([stream[s:s + window] for s in starts.tolist()]))
            loss, n = loss + corpus_loss, n + m
        return loss, n

    result = _run([p for p in model.parameters() if p.requires_grad], loss_fn, cfg, desc, progress)
    model.eval()
    return result


def medusa_examples(data: Continuations, n_heads: int) -> tuple[Tensor, Tensor]:
    """Medusa-1 training pairs along the target's continuations.

    Returns hidden ``[M, d]`` (position t, from the last prompt position on) and labels
    ``[M, K]``: column k-1 is the target's token at t+k+1, or IGNORE past the end.
    """
    p, length = data.prompt_len, data.tokens.shape[1]
    positions = torch.arange(p - 1, length - 1)                            # t with a generated t+1
    hidden = data.hidden[:, positions]                                     # [n, m, d]
    labels = torch.full((data.tokens.shape[0], positions.numel(), n_heads), IGNORE, dtype=torch.long)
    for k in range(1, n_heads + 1):
        target_pos = positions + k + 1
        ok = target_pos < length
        labels[:, ok, k - 1] = data.tokens[:, target_pos[ok]]
    return hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1, n_heads)


def medusa_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """``sum_k 0.8^k CE_k``: logits ``[K, m, V]``, labels ``[m, K]`` (IGNORE skipped)."""
    total = logits.new_zeros((), dtype=torch.float32)
    for k in range(logits.shape[0]):
        col = labels[:, k]
        if (col != IGNORE).any():
            total = total + MEDUSA_LAMBDA_BASE ** (k + 1) * F.cross_entropy(
                logits[k].float(), col, ignore_index=IGNORE)
    return total


def train_medusa_heads(heads: MedusaHeads, data: Continuations, cfg: TrainConfig,
                       desc: str = "medusa heads", progress: bool = True) -> TrainResult:
    """Medusa-1 self-distillation on the frozen target's continuations (``cfg.batch`` positions
    per step, sampled without replacement within each pass over the data)."""
    hidden, labels = medusa_examples(data, heads.n_heads)
    m = hidden.shape[0]
    if m == 0:
        raise HetSpecError(f"{desc}: no training positions")
    heads.train()
    device = heads.w1.device
    order: list[Tensor] = []

    def loss_fn(step: int, gen: torch.Generator) -> tuple[Tensor, int]:
        if not order or order[0].numel() < cfg.batch:
            order[:] = [torch.randperm(m, generator=gen)]
        idx, order[0] = order[0][:cfg.batch], order[0][cfg.batch:]
        logits = heads(hidden[idx].to(device).unsqueeze(0))[:, 0]           # [K, batch, V]
        y = labels[idx].to(device)
        return medusa_loss(logits, y), int((y != IGNORE).sum())

    result = _run([p for p in heads.parameters() if p.requires_grad], loss_fn, cfg, desc, progress)
    heads.eval()
    return result
