"""Convert measured operator latencies into HetSpec's profile format (:mod:`hwmodels.profile`).

Two inputs:

- **Vidur** (Agrawal et al., "Vidur: A Large-Scale Simulation Framework for LLM Inference", MLSys 2024;
  profiling data of the microsoft/vidur repository, MIT licence): its ``mlp.csv`` (one row per token
  count, ``time_stats.<operator>.median`` in ms of CUDA kernel time from the torch profiler, no launch
  gaps) and optionally its ``attention.csv`` (``time_stats.attn_prefill.median`` /
  ``time_stats.attn_decode.median`` per batch, chunk and KV-cache size). Kernel time only: rows get
  ``graph_launch_us`` 0 (a CUDA graph replays kernels back to back) and ``eager_launch_us`` ``-``.
- HetSpec's **GPU operator probe** (``op, shape, q, s, ms``: one operator call launched from Python,
  timed with CUDA events, launch and dispatch included): rows are launch-inclusive, imported for
  eager mode (``kernel_us`` = the whole call, ``eager_launch_us`` 0, ``graph_launch_us`` ``-``).

How Vidur's operators map to the step graph's (:mod:`sim.step_graph`), which prices q, k, v and gate, up
as separate GEMMs (as HetSpec's real model and Medusa's code run them): a fused GEMM is **split** into
shares in proportion to its output columns (equal FLOPs and weight bytes per column): ``attn_pre_proj``
(d -> (heads + 2 kv heads) x head dim) gives ``d x heads*hd`` and ``d x kv*hd``; ``mlp_up_proj``
(d -> 2 i, gated) gives ``d x i`` (gate and up, half each). A shape measured directly wins over a share
of a fused GEMM: ``attn_post_proj`` (o_proj, heads*hd -> d) *is* a ``d x d`` GEMM, so for a model whose
q (and, with MHA, k and v) projection is ``d x d`` the direct o_proj row prices them and the q/k/v share
is not used (it is kept as a cross-check in the summary). ``input_layernorm`` and
``post_attention_layernorm`` time one kernel on one shape: a ``norm`` row takes the mean of the two.
Vidur repeats some token counts (2048, 4096): the mean of the repeats is kept.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from hwmodels.errors import HetSpecError, PresetError
from hwmodels.profile import write_profile

NAN = math.nan

VIDUR_CITATION = ('Agrawal et al., "Vidur: A Large-Scale Simulation Framework for LLM Inference", MLSys 2024; '
                  "profiling data from the microsoft/vidur repository (MIT licence)")
VIDUR_OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
             "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
_VIDUR_MODEL = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp")
_VIDUR_ATTN = ("n_q_head", "n_kv_head", "n_embd", "batch_size", "prefill_chunk_size", "kv_cache_size", "is_prefill")


def _read_csv(path: str | Path, what: str) -> list[dict[str, str]]:
    path = Path(path)
    if not path.is_file():
        raise HetSpecError(f"{what} {path} does not exist")
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise HetSpecError(f"cannot read {what} {path}: {exc}") from None
    if not rows:
        raise PresetError(str(path), "header", f"{what} has no rows")
    return rows


def _need(path, rows: list[dict], columns: Iterable[str]) -> None:
    for col in columns:
        if col not in rows[0]:
            raise PresetError(str(path), f"header: {col}", "missing column (Vidur's profile format)")


def _num(path, row_no: int, row: dict, col: str) -> float:
    text = (row.get(col) or "").strip()
    try:
        value = float(text)
    except ValueError:
        raise PresetError(str(path), f"row {row_no}: {col}", f"must be a number (got {text!r})") from None
    if not math.isfinite(value) or value < 0:
        raise PresetError(str(path), f"row {row_no}: {col}", f"must be a finite number >= 0 (got {text!r})")
    return value


def _truth(text: str) -> bool:
    return str(text).strip().lower() in ("true", "1", "yes")


def _tp1(path, rows: list[dict]) -> list[tuple[int, dict]]:
    """Rows with one tensor-parallel worker (all rows if the column is absent), numbered as in the file."""
    out = [(i, r) for i, r in enumerate(rows, start=1)
           if "num_tensor_parallel_workers" not in r or str(r["num_tensor_parallel_workers"]).strip() == "1"]
    if not out:
        raise PresetError(str(path), "num_tensor_parallel_workers", "no rows with one tensor-parallel worker")
    return out


def _one_value(path, rows: list[tuple[int, dict]], col: str) -> str:
    values = {r[col].strip() for _, r in rows}
    if len(values) != 1:
        raise PresetError(str(path), col, f"one model per file expected; found {', '.join(sorted(values))}")
    return values.pop()


def import_vidur(mlp_csv: str | Path, attention_csv: str | Path | None, out: str | Path, device: str,
                 source: str) -> dict:
    """Convert Vidur's ``mlp.csv`` (and ``attention.csv``) into a profile file; returns a summary."""
    rows = _tp1(mlp_csv, _read_csv(mlp_csv, "Vidur mlp.csv"))
    _need(mlp_csv, [r for _, r in rows], (*_VIDUR_MODEL, "num_tokens", *(f"time_stats.{op}.median" for op in VIDUR_OPS)))
    nh, nkv, h, i = (int(float(_one_value(mlp_csv, rows, c))) for c in ("n_head", "n_kv_head", "n_embd",
                                                                          "n_expanded_embd"))
    gated = _truth(_one_value(mlp_csv, rows, "use_gated_mlp"))
    if h % nh:
        raise PresetError(str(mlp_csv), "n_embd", f"{h} is not divisible by n_head {nh}")
    hd = h // nh
    # per operator and token count, the medians of every repeat of that count
    times: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row_no, r in rows:
        tokens = _num(mlp_csv, row_no, r, "num_tokens")
        if tokens < 1 or tokens != int(tokens):
            raise PresetError(str(mlp_csv), f"row {row_no}: num_tokens", f"must be an integer >= 1 (got {tokens:g})")
        for op in VIDUR_OPS:
            times[op][int(tokens)].append(_num(mlp_csv, row_no, r, f"time_stats.{op}.median") * 1e3)  # ms -> us
    mean = {op: {t: statistics.fmean(v) for t, v in by_t.items()} for op, by_t in times.items()}
    repeats = sorted(t for t, v in times["emb"].items() if len(v) > 1)

    qkv = nh * hd + 2 * nkv * hd
    direct: dict[tuple[str, str], dict[int, float]] = {
        ("embedding", str(h)): mean["emb"],
        ("norm", str(h)): {t: (mean["input_layernorm"][t] + mean["post_attention_layernorm"][t]) / 2
                           for t in mean["input_layernorm"]},
        ("rope", f"h{nh}kv{nkv}d{hd}"): mean["attn_rope"],
        ("linear", f"{nh * hd}x{h}"): mean["attn_post_proj"],
        ("linear", f"{i}x{h}"): mean["mlp_down_proj"],
        ("act_mul" if gated else "gelu", str(i)): mean["mlp_act"],
        ("add", str(h)): mean["add"],
    }
    shares: dict[tuple[str, str], dict[int, float]] = {}
    up_share = 0.5 if gated else 1.0
    shares[("linear", f"{h}x{i}")] = {t: v * up_share for t, v in mean["mlp_up_proj"].items()}
    for cols in (nh * hd, nkv * hd):
        shares.setdefault(("linear", f"{h}x{cols}"), {t: v * cols / qkv for t, v in mean["attn_pre_proj"].items()})
    used_shares = {k: v for k, v in shares.items() if k not in direct}
    dropped = [f"{k[0]} {k[1]}" for k in shares if k in direct]
    tables = {**direct, **used_shares}
    out_rows = [(op, shape, t, 0, v, NAN, 0.0) for (op, shape), by_t in tables.items() for t, v in by_t.items()]
    summary = {"model": {"hidden": h, "intermediate": i, "heads": nh, "kv_heads": nkv, "head_dim": hd,
                         "gated_mlp": gated},
               "tokens": [min(times["emb"]), max(times["emb"])], "repeated_token_counts": repeats,
               "split": {"attn_pre_proj": f"{h}x{qkv} -> q {h}x{nh * hd}, k/v {h}x{nkv * hd} (by output columns)",
                         "mlp_up_proj": f"{h}x{2 * i if gated else i} -> gate/up {h}x{i}" if gated else "not fused"},
               "shares_replaced_by_direct_rows": dropped}
    if dropped:
        key = ("linear", f"{h}x{nh * hd}")
        ratio = [shares[key][t] / direct[key][t] for t in direct[key] if direct[key][t] > 0]
        summary["qkv_share_over_direct_o_proj_median"] = round(statistics.median(ratio), 3)
    notes = [
        "Fused GEMMs are split by output columns (the step graph prices q, k, v and gate, up separately): "
        f"attn_pre_proj {h}x{qkv} -> q {h}x{nh * hd} and k, v {h}x{nkv * hd} shares; "
        + (f"mlp_up_proj {h}x{2 * i} -> gate, up {h}x{i} (half each). " if gated else "")
        + "A shape measured directly wins over a share: "
        + (", ".join(dropped) + " from attn_post_proj (o_proj)" if dropped else "none")
        + ". norm = mean of input_layernorm and post_attention_layernorm; repeated token counts "
        f"({', '.join(map(str, repeats)) or 'none'}): their mean.",
    ]
    if attention_csv is not None:
        attn_rows, attn_summary = _vidur_attention(attention_csv, nh, nkv, h)
        out_rows += attn_rows
        summary["attention"] = attn_summary
        notes.append("Attention: prefill rows (batch 1, chunk q over kv_cache_size s: keys s + q, causal) and decode "
                     "rows (q 1, keys s + 1, per batch: shape ...b<batch> above 1); attn_prefill / attn_decode medians "
                     "(the KV-cache save and reshapes are separate Vidur operators, not included).")
    header = {
        "dtype": "fp16",
        "device": device,
        "source": source,
        "launch_us.graph": "0",
        "launch_us.graph.source": "Vidur records CUDA kernel time with the torch profiler, no launch gaps; a CUDA "
                                  "graph replays kernels back to back: no launch cost in graph mode",
    }
    path = write_profile(out, header, out_rows, notes)
    summary |= {"out": str(path), "rows": len(out_rows)}
    return summary


def _vidur_attention(path, nh: int, nkv: int, h: int) -> tuple[list[tuple], dict]:
    rows = _tp1(path, _read_csv(path, "Vidur attention.csv"))
    _need(path, [r for _, r in rows], _VIDUR_ATTN)
    for col, want in (("n_q_head", nh), ("n_kv_head", nkv), ("n_embd", h)):
        got = int(float(_one_value(path, rows, col)))
        if got != want:
            raise PresetError(str(path), col, f"{got}, but mlp.csv's model has {want}: not the same model")
    hd = h // nh
    acc: dict[tuple[str, int, int], list[float]] = defaultdict(list)
    for row_no, r in rows:
        prefill = _truth(r["is_prefill"])
        batch = int(_num(path, row_no, r, "batch_size"))
        s = int(_num(path, row_no, r, "kv_cache_size"))
        if prefill:
            q = int(_num(path, row_no, r, "prefill_chunk_size"))
            col = "time_stats.attn_prefill.median"
        else:
            q = 1
            col = "time_stats.attn_decode.median"
        if col not in r:
            raise PresetError(str(path), f"header: {col}", "missing column (Vidur's profile format)")
        if q < 1 or batch < 1:
            continue
        shape = f"h{nh}kv{nkv}d{hd}" + (f"b{batch}" if batch != 1 else "")
        acc[(shape, s + q, q)].append(_num(path, row_no, r, col) * 1e3)
    out = [("attention", shape, q, keys, statistics.fmean(v), NAN, 0.0) for (shape, keys, q), v in acc.items()]
    return out, {"rows": len(out), "shapes": sorted({k[0] for k in acc})}


# ---------------------------------------------------------------------- HetSpec's GPU operator probe
#: Kernels of the probe's eager RMSNorm (``x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps).half()``):
#: float, pow, mean, add, rsqrt, half, mul.
PROBE_RMSNORM_KERNELS = 7


def import_probe(events_csv: str | Path, out: str | Path, device: str, source: str) -> dict:
    """Convert the GPU operator probe's ``op, shape, q, s, ms`` (launch-inclusive eager calls) into a profile.

    ``linear`` rows -> ``linear`` (``<d_in>x<d_out>``, tokens q); ``sdpa_mask_*`` (``h<heads>kv<kv>d<hd>``: q
    queries over s keys, a boolean mask) -> ``attention`` (keys s); ``rmsnorm_eager`` -> ``norm``. Every row is
    launch-inclusive: ``kernel_us`` = the call, ``eager_launch_us`` 0, ``graph_launch_us`` ``-``. The launch cost
    of one eager kernel (operators the probe did not time) is the eager RMSNorm's time over its
    :data:`PROBE_RMSNORM_KERNELS` kernels (out-of-place elementwise kernels, as the model's RoPE, residual
    adds, SiLU and cache copies are); the probe's in-place ``tiny_op`` loop is the lower bound, in the source.
    """
    rows = _read_csv(events_csv, "probe events CSV")
    _need(events_csv, rows, ("op", "shape", "q", "s", "ms"))
    out_rows: list[tuple] = []
    skipped: dict[str, int] = defaultdict(int)
    rms = tiny = None
    for row_no, r in enumerate(rows, start=1):
        op, shape = r["op"].strip(), r["shape"].strip()
        q = int(_num(events_csv, row_no, r, "q"))
        s = int(_num(events_csv, row_no, r, "s"))
        us = _num(events_csv, row_no, r, "ms") * 1e3
        if op == "linear":
            out_rows.append(("linear", shape, q, 0, us, 0.0, NAN))
        elif op.startswith("sdpa_mask_"):
            out_rows.append(("attention", shape, q, s, us, 0.0, NAN))
        elif op == "rmsnorm_eager":
            out_rows.append(("norm", shape, q, 0, us, 0.0, NAN))
            rms = us
        elif op == "tiny_op":
            tiny = us
            skipped[op] += 1
        else:
            skipped[op] += 1
    if rms is None:
        raise PresetError(str(events_csv), "op", "no rmsnorm_eager row: the eager launch cost is measured from it")
    launch = rms / PROBE_RMSNORM_KERNELS
    tiny_txt = f"; the in-place tiny_op loop (z.add_(1) on 8 elements, 200 calls) gives {tiny:.2f} us, the lower bound" \
        if tiny is not None else ""
    header = {
        "dtype": "fp16",
        "device": device,
        "source": source,
        "launch_us.eager": f"{launch:.4f}",
        "launch_us.eager.source": f"measured: the probe's eager RMSNorm, {rms:.2f} us for its "
                                  f"{PROBE_RMSNORM_KERNELS} out-of-place kernels{tiny_txt}",
    }
    notes = ["Launch-inclusive eager calls (CUDA events around one call launched from Python): kernel_us is the "
             "whole call, eager_launch_us 0, graph_launch_us not measured (-). Not operator rows, skipped: "
             + ", ".join(f"{k} ({v})" for k, v in sorted(skipped.items())) + " (sdpa_nomask: the model passes a mask)."]
    path = write_profile(out, header, out_rows, notes)
    return {"out": str(path), "rows": len(out_rows), "launch_us.eager": launch, "tiny_op_us": tiny,
            "skipped": dict(skipped)}
