"""Medusa (Cai et al., ICML 2024) against HetSpec: the App. G.2 roofline tables, the App. G.3 simulation,
Table 1 overheads (``hetspec reproduce medusa``).

What is reproduced, all on the ``a100-80gb-pcie`` preset (the GPU of the paper's roofline study):

1. Appendix G.2 Tables 6-8 (Llama-33B operators): the arithmetic intensities exactly
   (:mod:`sim.step_graph` follows the paper's accounting), and the achieved TFLOP/s = FLOPs /
   roofline time. The preset's two efficiencies and its GEMM tile were read from these very
   tables, so the TFLOP/s cells are ``fit`` rows (shown, not counted).
2. The App. G.3 simulator: one Llama-7B block (XW_Q, XW_K, XW_V, QK^T, PV, XW_u, XW_g, XW_d run one
   after another), acceleration rate from the fitted curve ``1 + 0.477 ln(n)`` (the
   ``medusa-log`` acceptance preset), speedup = acceleration / (block latency at n candidates /
   block latency at 1): Fig. 21 (batch 1), Fig. 22 (batch 1-64), Fig. 23 (batch 4, s = 128-8192)
   and the best candidate count the paper's method picks from 16..112.
3. Table 1 / Table 4 / Fig. 4: the per-step overhead of a Medusa step (the whole target model on
   the tree plus the heads, :mod:`sim.strategies.medusa`) over a vanilla step
   (:mod:`sim.strategies.ar`), and the speedup it implies with the paper's acceleration rates.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Mapping
from pathlib import Path

from hwmodels.loader import get_platform
from hwmodels.platform import Device
from sim.acceptance import AcceptanceModel
from sim.acceptance_loader import load_acceptance
from sim.model_spec import ModelSpec, get_model
from sim.plots import new_figure, save_figure
from sim.reproduce import medusa_profile
from sim.reproduce.report import Comparison, Figure, Fit, PaperReport
from sim.step_graph import build_step_graph
from sim.step_timing import price_op
from sim.strategies import Problem, StrategyConfig, get_strategy
from sim.tree import TokenTree

TITLE = "Medusa: Simple LLM Inference Acceleration Framework with Multiple Decoding Heads"
CITATION = f"Cai, Li, Geng, Peng, Lee, Chen, Dao: \"{TITLE}\", ICML 2024"
PLATFORM = "a100-80gb-pcie"
DEVICE = "gpu"
ACCEPTANCE = "medusa-log"
#: Llama-33B shape of the roofline tables (h = 6656, i = 17920, 52 heads of 128).
TABLES_MODEL = "vicuna-33b"
#: "Llama-7B" of App. G.3: LLaMA-7B and Llama-2-7B have the same shape (h = 4096, i = 11008, 32 heads).
APPG_MODEL = "llama2-7b"

# ---------------------------------------------------------------------- paper numbers
# App. G.2, Tables 6-8 (Llama-33B on A100-80GB-PCIe). Columns: autoregressive (q = 1), then q = 16..112 candidates.
Q_COLUMNS = (1, 16, 32, 48, 64, 80, 96, 112)
#: Table 6, attention (QK^T) at batch 16, rows = KV length s: (TFLOP/s, operational intensity) per column.
TABLE6 = {
    128: ((0.54, 0.98), (7.87, 12.8), (14.73, 21.33), (19.78, 27.43),
          (25.25, 32.0), (28.63, 35.56), (32.58, 38.4), (36.57, 40.73)),
    256: ((0.75, 0.99), (11.2, 13.47), (21.29, 23.27), (28.69, 30.72),
          (36.59, 36.57), (41.2, 41.29), (45.99, 45.18), (52.33, 48.43)),
    512: ((1.02, 0.99), (14.69, 13.84), (27.47, 24.38), (37.35, 32.68),
          (47.09, 39.38), (52.24, 44.91), (59.55, 49.55), (66.35, 53.49)),
    1024: ((1.24, 0.99), (17.42, 14.03), (32.15, 24.98), (43.89, 33.76),
           (54.8, 40.96), (60.19, 46.97), (68.28, 52.07), (75.45, 56.44)),
    2048: ((1.39, 0.99), (19.03, 14.12), (35.05, 25.28), (48.03, 34.32),
           (59.66, 41.8), (63.91, 48.08), (72.83, 53.43), (80.05, 58.04)),
    4096: ((1.48, 0.99), (19.8, 14.17), (36.59, 25.44), (50.4, 34.61),
           (62.29, 42.23), (65.84, 48.65), (74.86, 54.13), (82.06, 58.87)),
    8192: ((1.53, 0.99), (20.08, 14.2), (36.89, 25.52), (50.44, 34.76),
           (62.11, 42.45), (67.5, 48.94), (76.97, 54.49), (84.5, 59.3)),
}
TABLE6_BATCH = 16
#: Table 7, attention at s = 1024: one intensity per column (batch does not change it), TFLOP/s per batch.
TABLE7_CONTEXT = 1024
TABLE7_OI = (0.99, 14.03, 24.98, 33.76, 40.96, 46.97, 52.07, 56.44)
TABLE7_TFLOPS = {
    1: (0.37, 5.22, 10.15, 15.02, 19.79, 21.52, 25.65, 29.4),
    2: (0.54, 8.25, 16.0, 21.62, 28.24, 31.84, 37.49, 43.04),
    4: (0.75, 11.41, 21.97, 30.02, 38.71, 43.41, 50.06, 56.77),
    8: (1.02, 14.78, 27.78, 38.09, 47.99, 53.32, 61.0, 68.11),
    16: (1.24, 17.42, 32.15, 43.89, 54.8, 60.19, 68.28, 75.45),
    32: (1.39, 18.89, 34.67, 47.57, 58.89, 63.61, 72.17, 79.21),
    64: (1.48, 19.58, 35.87, 49.45, 61.13, 64.84, 73.73, 81.02),
}
#: Table 8, up/gate/down projections, rows = batch (b*q tokens): (TFLOP/s, operational intensity).
TABLE8 = {
    1: ((1.26, 1.0), (19.95, 15.95), (39.69, 31.79), (58.4, 47.53),
        (76.57, 63.17), (94.4, 78.7), (111.91, 94.14), (128.64, 109.47)),
    2: ((2.51, 2.0), (39.66, 31.79), (76.53, 63.17), (112.05, 94.14),
        (145.73, 124.71), (130.67, 154.89), (129.1, 184.69), (148.56, 214.12)),
    4: ((5.03, 4.0), (76.44, 63.17), (145.8, 124.71), (128.85, 184.69),
        (167.85, 243.17), (201.19, 300.21), (236.93, 355.85), (195.91, 410.14)),
    8: ((10.06, 7.99), (145.72, 124.71), (168.26, 243.17), (236.83, 355.85),
        (221.11, 463.14), (207.79, 565.44), (236.95, 663.07), (227.8, 756.36)),
    16: ((19.96, 15.95), (168.35, 243.17), (221.41, 463.14), (237.5, 663.07),
         (224.71, 845.59), (232.49, 1012.87), (241.12, 1166.74), (229.25, 1308.76)),
    32: ((39.69, 31.79), (221.74, 463.14), (224.88, 845.59), (241.33, 1166.74),
         (239.02, 1440.25), (245.83, 1675.97), (243.55, 1881.24), (240.33, 2061.59)),
    64: ((76.57, 63.17), (225.19, 845.59), (239.2, 1440.25), (243.26, 1881.24),
         (246.16, 2221.31), (246.91, 2491.55), (244.52, 2711.46), (246.14, 2893.91)),
}
TABLE8_CONTEXT = 1024  # the linear layers do not depend on s; any value prices them the same
#: App. G.2 text: at batch 16, s = 1024, 64 candidates, attention reaches 44x the FLOP/s and 41x the intensity.
ATTN_GAIN_FLOPS, ATTN_GAIN_OI = 44.0, 41.0

# App. G.3 simulation (figures: values read off, "~"). Candidates on the x axis: 16..112.
CANDIDATES = (16, 32, 48, 64, 80, 96, 112)
APPG_CONTEXT = 1024
FIG21_ACC = {16: 2.4, 32: 2.7, 48: 2.9, 64: 3.05, 80: 3.15, 96: 3.25, 112: 3.3}
FIG21_SPEEDUP = {16: 2.4, 32: 2.7, 48: 2.85, 64: 2.95, 80: 2.8, 96: 2.85, 112: 2.85}
FIG21_LATENCY = {16: 1.0, 32: 1.0, 48: 1.02, 64: 1.04, 80: 1.13, 96: 1.15, 112: 1.18}
#: Fig. 22 (s = 1024) readings for batch >= 2 (batch 1 is Fig. 21).
FIG22_SPEEDUP = {
    2: {16: 2.25, 64: 2.60, 112: 2.40},
    4: {32: 2.25, 64: 2.15, 80: 1.55, 112: 1.50},
    8: {16: 1.80, 32: 1.80, 64: 1.30, 112: 0.90},
    16: {16: 1.40, 64: 0.70, 112: 0.50},
    32: {16: 0.85, 64: 0.40, 112: 0.25},
    64: {16: 0.45, 64: 0.20, 112: 0.15},
}
BATCHES = (1, 2, 4, 8, 16, 32, 64)
#: Best candidate count per batch in Figs. 21/22 (batch 8: 16 and 32 tie at ~1.80 as read off Fig. 22; 16 is
#: taken, as at batch 16). Batches 32 and 64 never beat vanilla decoding: no optimum.
FIG22_BEST = {1: 64, 2: 64, 4: 32, 8: 16, 16: 16}
#: Fig. 23 (batch 4): speedup per KV length at 16..112 candidates; the optimum is 32 for every s.
FIG23_BATCH = 4
FIG23_SPEEDUP = {
    128: (2.38, 2.48, 2.40, 2.36, 1.68, 1.72, 1.60),
    256: (2.34, 2.44, 2.36, 2.32, 1.66, 1.70, 1.58),
    512: (2.27, 2.37, 2.28, 2.24, 1.62, 1.66, 1.54),
    1024: (2.14, 2.24, 2.16, 2.13, 1.56, 1.59, 1.48),
    2048: (1.96, 2.06, 1.99, 1.96, 1.45, 1.48, 1.38),
    4096: (1.70, 1.78, 1.72, 1.68, 1.28, 1.29, 1.21),
    8192: (1.30, 1.36, 1.34, 1.31, 1.04, 1.04, 0.98),
}
FIG23_BEST = 32

# Table 1 (Medusa-2, MT-Bench, batch 1): acceleration rate, overhead, speedup; Table 4 (AlpacaEval):
# acceleration rate, speedup (= Medusa tok/s / baseline tok/s).
TABLE1 = {"vicuna-7b": (3.47, 1.22, 2.83), "zephyr-7b": (3.14, 1.18, 2.66),
          "vicuna-13b": (3.51, 1.23, 2.83), "vicuna-33b": (3.01, 1.27, 2.35)}
TABLE4 = {"vicuna-7b": (3.23, 2.88), "vicuna-13b": (3.28, 3.16), "vicuna-33b": (2.85, 2.26), "zephyr-7b": (3.08, 2.91)}
#: Fig. 4 (Vicuna-7B, MT-Bench writing + roleplay), sparse trees: nodes -> (acceleration ~, tok/s ~);
#: baseline ~45 tok/s.
FIG4_SPARSE = {64: (3.15, 118.0), 128: (3.32, 112.0), 256: (3.48, 82.0)}
FIG4_BASELINE_TOK_S = 45.0
#: Tokens verified per step by the paper's sparse tree (63 nodes + root, Fig. 6; ``mc_sim_7b_63``).
MEDUSA_TREE_WIDTH = 64
#: Depth (= heads run) of that tree (Fig. 6: depth 4); the 128/256-node trees of Fig. 4 are not published.
MEDUSA_TREE_DEPTH = 4
#: KV length Table 1 / Table 4 / Fig. 4 are priced at. Assumed: the paper gives no length; MT-Bench
#: answers run a few hundred tokens, so a step sits mid-way in a ~512-token context.
CHAT_CONTEXT = 512
#: The figures the A100 preset's efficiencies and token tile were fitted to, named on the rows that use them.
KERNEL_FIT = "App. G.2 Tables 6-8 (A100 efficiencies, token tile)"
#: The figure the acceleration curve's intercept was fitted to: its speedup rows and its choice are fits.
CURVE_FIT = "Fig. 21 acceleration rates (log curve's intercept)"


# ---------------------------------------------------------------------- the App. G.3 simulator
#: The paper's simulated block in step-graph operator names: XW_Q, XW_K, XW_V; QK^T and PV over the cached
#: keys and the tree block (Table 5's b(s+q)nd keys); XW_u, XW_g, XW_d. No o_proj, norms, softmax or LM head,
#: as in the paper (App. G.3: the block "sequentially processing XW_Q, XW_K, XW_V, QK^T, PV, XW_u, XW_g, XW_d").
APPG_OPS = ("q_proj", "k_proj", "v_proj", "attn_score", "tree_score", "attn_value", "tree_value",
            "gate_proj", "up_proj", "down_proj")


def block_seconds(model: ModelSpec, device: Device, candidates: int, context: int, batch: int) -> float:
    """One simplified block (:data:`APPG_OPS`, run one after another) for ``candidates`` tokens per sequence."""
    graph = build_step_graph(model, candidates, context, batch)
    return sum(price_op(op, device, graph.dtype).timing.time_s for op in graph.ops if op.name in APPG_OPS)


def simulated_speedup(model: ModelSpec, device: Device, acceptance: AcceptanceModel, candidates: int,
                      context: int, batch: int) -> tuple[float, float]:
    """(normalised latency, speedup) of ``candidates`` over vanilla decoding, App. G.3's way."""
    latency = block_seconds(model, device, candidates, context, batch) / block_seconds(model, device, 1, context, batch)
    return latency, float(acceptance.width_tokens(candidates)) / latency


def best_candidates(speedups: Mapping[int, float]) -> int:
    """The paper's choice: the candidate count with the highest simulated speedup."""
    return max(speedups, key=lambda q: speedups[q])


# ---------------------------------------------------------------------- Table 1: whole-model overhead
def pricing_tree(width: int, depth: int = MEDUSA_TREE_DEPTH) -> TokenTree:
    """A ``width``-token tree of ``depth`` levels: a chain of ``depth`` tokens plus the rest under the root.

    Stand-in for the paper's unpublished 128- and 256-node sparse trees: on a GPU without a sparse
    attention kernel (the preset's ``sparse_attn_efficiency`` 0) a tree is priced by its size and
    its depth (heads run) only, so any tree with these two numbers costs the same.
    """
    return TokenTree.from_parents([-1, *range(depth)] + [0] * (width - 1 - depth))


def medusa_overhead(model: ModelSpec, width: int = MEDUSA_TREE_WIDTH, context: int = CHAT_CONTEXT) -> dict[str, float]:
    """Medusa step seconds (target on the tree + heads) / vanilla step seconds at batch 1 (``overhead``), the
    heads' share of a vanilla step (``heads``) and the vanilla tokens/s (``vanilla_tok_s``)."""
    problem = Problem(model, get_platform(PLATFORM), load_acceptance(ACCEPTANCE), context=context, batch=1)
    medusa, ar = get_strategy("medusa"), get_strategy("ar")
    if width == MEDUSA_TREE_WIDTH:
        config = StrategyConfig(tree_width=width, tree_shape="medusa-list")  # the 63-node list itself
    else:
        config = StrategyConfig(tree=pricing_tree(width))
    step = medusa.estimate(problem, medusa.resolve(problem, config))
    vanilla = ar.estimate(problem, ar.resolve(problem, StrategyConfig())).step_s
    return {"overhead": step.step_s / vanilla, "heads": step.breakdown["heads"] / vanilla, "vanilla_tok_s": 1 / vanilla}


# ---------------------------------------------------------------------- rows
def table_rows(model: ModelSpec, device: Device) -> tuple[list[Comparison], dict]:
    """Tables 6-8: intensities (exact) and achieved TFLOP/s (fit), plus the 44x / 41x claims."""
    rows: list[Comparison] = []
    # per table: (paper intensity, HetSpec intensity, paper TFLOP/s, HetSpec TFLOP/s) of every cell, for the plot
    points: dict[str, list[tuple[float, float, float, float]]] = {"T6": [], "T7": [], "T8": []}

    def tflops(op_name: str, q: int, s: int, b: int) -> tuple[float, float]:
        op = build_step_graph(model, q, s, b).op(op_name)
        return op.intensity, op.flops / price_op(op, device, model.dtype).timing.time_s / 1e12

    for s, cells in TABLE6.items():
        for q, (paper_tf, paper_oi) in zip(Q_COLUMNS, cells):
            oi, tf = tflops("attn_score", q, s, TABLE6_BATCH)
            where, what = "Table 6", f"attention QK^T, bs 16, s={s}, q={q}"
            rows.append(Comparison(where, f"{what}: intensity", paper_oi, round(oi, 2), "consistency", "FLOP/B"))
            rows.append(Comparison(where, f"{what}: achieved", paper_tf, tf, "fit", "TFLOP/s", fitted_to=KERNEL_FIT))
            points["T6"].append((paper_oi, oi, paper_tf, tf))
    for col, q in enumerate(Q_COLUMNS):
        ois = {b: tflops("attn_score", q, TABLE7_CONTEXT, b)[0] for b in TABLE7_TFLOPS}
        worst = max(ois.values(), key=lambda v: abs(round(v, 2) - TABLE7_OI[col]))
        rows.append(Comparison("Table 7", f"attention QK^T, s=1024, q={q}: intensity, every batch 1-64",
                               TABLE7_OI[col], round(worst, 2), "consistency", "FLOP/B"))
    for b, cells in TABLE7_TFLOPS.items():
        for q, paper_tf in zip(Q_COLUMNS, cells):
            oi, tf = tflops("attn_score", q, TABLE7_CONTEXT, b)
            rows.append(Comparison("Table 7", f"attention QK^T, s=1024, bs {b}, q={q}: achieved", paper_tf, tf, "fit",
                                   "TFLOP/s", fitted_to=KERNEL_FIT))
            points["T7"].append((TABLE7_OI[Q_COLUMNS.index(q)], oi, paper_tf, tf))
    for b, cells in TABLE8.items():
        for q, (paper_tf, paper_oi) in zip(Q_COLUMNS, cells):
            oi, tf = tflops("up_proj", q, TABLE8_CONTEXT, b)
            what = f"up/gate/down, bs {b}, q={q} ({b * q} tokens)"
            rows.append(Comparison("Table 8", f"{what}: intensity", paper_oi, round(oi, 2), "consistency", "FLOP/B"))
            rows.append(Comparison("Table 8", f"{what}: achieved", paper_tf, tf, "fit", "TFLOP/s", fitted_to=KERNEL_FIT))
            points["T8"].append((paper_oi, oi, paper_tf, tf))
    # App. G.2: 44x FLOP/s, 41x intensity (bs 16, s 1024, q 64 vs autoregressive). The FLOP/s ratio does not
    # depend on the fitted bandwidth efficiency (both ends are memory-bound), so it is a prediction.
    oi_ar, tf_ar = tflops("attn_score", 1, 1024, 16)
    oi_64, tf_64 = tflops("attn_score", 64, 1024, 16)
    rows.append(Comparison("App. G.2 text", "attention FLOP/s gain, q=64 vs autoregressive (bs 16, s 1024)",
                           ATTN_GAIN_FLOPS, tf_64 / tf_ar, "prediction", "x"))
    rows.append(Comparison("App. G.2 text", "attention intensity gain, q=64 vs autoregressive (bs 16, s 1024)",
                           ATTN_GAIN_OI, round(oi_64 / oi_ar), "consistency", "x", "rounded as printed"))
    return rows, points


def appg_rows(model: ModelSpec, device: Device, acceptance: AcceptanceModel) -> tuple[list[Comparison], dict]:
    """Figs. 21-23: simulated latency and speedup, and the best candidate count per batch / KV length."""
    rows: list[Comparison] = []
    batch_curves = {b: {q: simulated_speedup(model, device, acceptance, q, APPG_CONTEXT, b) for q in CANDIDATES}
                    for b in BATCHES}
    seq_curves = {s: {q: simulated_speedup(model, device, acceptance, q, s, FIG23_BATCH) for q in CANDIDATES}
                  for s in FIG23_SPEEDUP}
    bs1 = batch_curves[1]
    for q in CANDIDATES:
        rows.append(Comparison("Fig. 21", f"acceleration rate at {q} candidates", FIG21_ACC[q],
                               float(acceptance.width_tokens(q)), "fit", note="~", fitted_to=CURVE_FIT))
    for q in CANDIDATES:
        rows.append(Comparison("Fig. 21", f"normalised block latency, bs 1, s 1024, {q} candidates",
                               FIG21_LATENCY[q], bs1[q][0], note="~", fitted_to=KERNEL_FIT))
    both = f"{CURVE_FIT}; {KERNEL_FIT}"
    for q in CANDIDATES:    # speedup = the fitted acceleration curve / latency: a fit on its own figure
        rows.append(Comparison("Fig. 21", f"simulated speedup, bs 1, s 1024, {q} candidates", FIG21_SPEEDUP[q],
                               bs1[q][1], "fit", note="~", fitted_to=both))
    for b, readings in FIG22_SPEEDUP.items():
        for q, paper in readings.items():
            rows.append(Comparison("Fig. 22", f"simulated speedup, bs {b}, s 1024, {q} candidates", paper,
                                   batch_curves[b][q][1], note="~", fitted_to=both))
    for s, readings in FIG23_SPEEDUP.items():
        for q, paper in zip(CANDIDATES, readings):
            rows.append(Comparison("Fig. 23", f"simulated speedup, bs 4, s {s}, {q} candidates", paper,
                                   seq_curves[s][q][1], note="~", fitted_to=both))
    for b, paper_best in FIG22_BEST.items():
        ours = best_candidates({q: v[1] for q, v in batch_curves[b].items()})
        # batch 1's choice is Fig. 21's peak, which the curve fitted to Fig. 21 decides
        rows.append(Comparison("Figs. 21/22" if b == 1 else "Fig. 22", f"best number of candidates, bs {b}, s 1024",
                               paper_best, ours, "fit-choice" if b == 1 else "choice", fitted_to=both))
    for s in FIG23_SPEEDUP:
        ours = best_candidates({q: v[1] for q, v in seq_curves[s].items()})
        rows.append(Comparison("Fig. 23", f"best number of candidates, bs 4, s {s}", FIG23_BEST, ours, "choice",
                               fitted_to=both))
    return rows, {"batch": batch_curves, "seq": seq_curves}


def overhead_rows() -> tuple[list[Comparison], dict]:
    """Table 1 overhead and speedup, Table 4 speedup, Fig. 4 sparse-tree speed over the baseline."""
    rows: list[Comparison] = []
    details = {name: medusa_overhead(get_model(name)) for name in TABLE1}
    overheads = {name: d["overhead"] for name, d in details.items()}
    for name, (acc, paper_overhead, paper_speedup) in TABLE1.items():
        rows.append(Comparison("Table 1", f"{name}: overhead (Medusa step / vanilla step), 64-token tree",
                               paper_overhead, overheads[name], note=f"s={CHAT_CONTEXT}"))
    for name, (acc, paper_overhead, paper_speedup) in TABLE1.items():
        rows.append(Comparison("Table 1", f"{name}: speedup given acceleration rate {acc}", paper_speedup,
                               acc / overheads[name]))
    for name, (acc, paper_speedup) in TABLE4.items():
        rows.append(Comparison("Table 4", f"{name} (AlpacaEval): speedup given acceleration rate {acc}",
                               paper_speedup, acc / overheads[name]))
    sparse = {n: medusa_overhead(get_model("vicuna-7b"), width=n)["overhead"] for n in FIG4_SPARSE}
    speed = {n: acc / sparse[n] for n, (acc, _) in FIG4_SPARSE.items()}      # predicted speed / baseline
    for n, (acc, tok_s) in FIG4_SPARSE.items():
        tree = "mc_sim_7b_63" if n == MEDUSA_TREE_WIDTH else f"stand-in tree, {MEDUSA_TREE_DEPTH} heads"
        rows.append(Comparison("Fig. 4", f"vicuna-7b sparse tree, {n} nodes: speed / baseline speed given "
                               f"acceleration ~{acc}", tok_s / FIG4_BASELINE_TOK_S, speed[n], note=f"~; {tree}"))
    # the paper's tree for every speed result: the fastest sparse tree of Fig. 4 (measured, batch 1)
    paper_best = max(FIG4_SPARSE, key=lambda n: FIG4_SPARSE[n][1])
    rows.append(Comparison("Fig. 4", f"best sparse tree ({' / '.join(map(str, FIG4_SPARSE))} nodes), vicuna-7b, "
                           "bs 1, measured speed vs predicted given the accelerations", paper_best,
                           max(speed, key=speed.get), "choice"))
    return rows, {"overhead": overheads, "details": details, "sparse": sparse, "sparse_speed": speed}


# ---------------------------------------------------------------------- figures
def plot_fig21(curves: dict, acceptance: AcceptanceModel, path: Path) -> None:
    fig, ax = new_figure(figsize=(9.5, 4.5), layout="constrained")   # constrained: room for the outside legend
    qs = [1, *CANDIDATES]
    bs1 = curves[1]
    ax.plot(qs, [1.0] + [bs1[q][1] for q in CANDIDATES], "-o", color="tab:green", label="speedup, HetSpec")
    ax.plot(CANDIDATES, [FIG21_SPEEDUP[q] for q in CANDIDATES], "*", ms=11, color="tab:green", mfc="none",
            label="speedup, paper (~)")
    ax.plot(qs, [float(acceptance.width_tokens(q)) for q in qs], "-", color="tab:blue",
            label="acceleration rate 1 + 0.477 ln(n)")
    ax.plot(CANDIDATES, [FIG21_ACC[q] for q in CANDIDATES], "*", ms=11, color="tab:blue", mfc="none",
            label="acceleration rate, paper (~)")
    ax.bar([q - 3 for q in CANDIDATES], [bs1[q][0] for q in CANDIDATES], width=6, color="tab:purple", alpha=0.5,
           label="normalised latency, HetSpec")
    ax.bar([q + 3 for q in CANDIDATES], [FIG21_LATENCY[q] for q in CANDIDATES], width=6, color="grey", alpha=0.5,
           label="normalised latency, paper (~)")
    ax.set(xlabel="number of candidate tokens", ylabel="speedup / acceleration rate / latency (x vanilla)",
           title="Medusa Fig. 21: Llama-7B block, batch 1, s = 1024, A100 preset", xticks=qs)
    fig.legend(fontsize=8, loc="outside right center")
    save_figure(fig, path)


def plot_sweep(curves: Mapping[int, Mapping[int, tuple[float, float]]], paper: Mapping[int, Mapping[int, float]],
               label: str, title: str, path: Path) -> None:
    fig, ax = new_figure(figsize=(8.0, 5.0), layout="constrained")
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink"]
    for color, (key, curve) in zip(colors, curves.items()):
        ax.plot([1, *CANDIDATES], [1.0] + [curve[q][1] for q in CANDIDATES], "-", color=color,
                label=f"{label} {key}, HetSpec")
        if key in paper:
            ax.plot(list(paper[key]), list(paper[key].values()), "*", ms=10, color=color, mfc="none",
                    label=f"{label} {key}, paper (~)")
    ax.axhline(1.0, color="black", lw=0.6, ls=":")
    ax.set(xlabel="number of candidate tokens", ylabel="simulated speedup over vanilla decoding (x)", title=title,
           xticks=[1, *CANDIDATES])
    ax.legend(fontsize=7, ncol=2, loc="upper right")
    save_figure(fig, path)


def plot_tables(points: dict, device: Device, path: Path) -> None:
    fig, axes = new_figure(1, 3, figsize=(13.0, 4.2), layout="constrained")
    import numpy as np

    peak = device.peak_flops_per_s("fp16") / 1e12
    bw = device.mem_bw_bytes_per_s / 1e12
    oi = np.logspace(np.log10(0.5), np.log10(5000.0), 200)  # FLOP/B, enough points to draw the kink
    titles = {"T6": "Table 6: attention, bs 16", "T7": "Table 7: attention, s 1024", "T8": "Table 8: up/gate/down"}
    for ax, (key, pts) in zip(axes, points.items()):
        ax.plot(oi, np.minimum(peak, oi * bw), "k-", lw=0.8, label="datasheet roofline")
        ax.plot(oi, np.minimum(peak * device.compute_efficiency, oi * bw * device.bw_efficiency), "k--", lw=0.8,
                label="preset roofline (x efficiencies)")
        ax.loglog([p[0] for p in pts], [p[2] for p in pts], "o", mfc="none", color="tab:red", label="paper (measured)")
        ax.loglog([p[1] for p in pts], [p[3] for p in pts], "x", color="tab:blue", label="HetSpec")
        ax.set(xlabel="operational intensity (FLOP/byte)", ylabel="achieved TFLOP/s", title=titles[key])
        ax.legend(fontsize=7)
    save_figure(fig, path)


def plot_overheads(overheads: Mapping[str, float], path: Path) -> None:
    fig, (left, right) = new_figure(1, 2, figsize=(11.0, 4.0), layout="constrained")
    names = list(TABLE1)
    x = range(len(names))
    left.bar([i - 0.2 for i in x], [TABLE1[n][1] for n in names], 0.4, color="grey", label="paper Table 1")
    left.bar([i + 0.2 for i in x], [overheads[n] for n in names], 0.4, color="tab:blue", label="HetSpec (A100 preset)")
    left.set(xticks=list(x), xticklabels=names, ylabel="Medusa step / vanilla step (x)",
             title="Overhead, 64-token tree")
    left.legend(fontsize=8)
    right.bar([i - 0.2 for i in x], [TABLE1[n][2] for n in names], 0.4, color="grey", label="paper Table 1")
    right.bar([i + 0.2 for i in x], [TABLE1[n][0] / overheads[n] for n in names], 0.4, color="tab:blue",
              label="paper acceleration / HetSpec overhead")
    right.set(xticks=list(x), xticklabels=names, ylabel="speedup over vanilla decoding (x)",
              title="Speedup given the paper's acceleration rates")
    right.legend(fontsize=8)
    save_figure(fig, path)


# ---------------------------------------------------------------------- the report
def reproduce(out_dir: Path) -> PaperReport:
    out_dir = Path(out_dir)
    platform = get_platform(PLATFORM)
    device = platform.device(DEVICE)
    acceptance = load_acceptance(ACCEPTANCE)
    report = PaperReport(paper="medusa", title=TITLE, citation=CITATION)

    sim_rows, curves = appg_rows(get_model(APPG_MODEL), device, acceptance)
    g3 = sys.modules[__name__]   # the measured-profile rerun reads this module's figures (not the record)
    prof = medusa_profile.profile_curves(g3, get_model(APPG_MODEL), acceptance)
    chat_rows, chat = overhead_rows()
    tab_rows, points = table_rows(get_model(TABLES_MODEL), device)
    report.add(*sim_rows, *medusa_profile.profile_rows(g3, prof), *chat_rows, *tab_rows)

    curve = acceptance.length_curve
    report.fits += [
        Fit(f"{PLATFORM} gpu bw_efficiency", device.bw_efficiency,
            "App. G.2 Tables 6-8: memory-bound cells reach 63-70 % of 1,935 GB/s", "midpoint (preset source)"),
        Fit(f"{PLATFORM} gpu compute_efficiency", device.compute_efficiency,
            "App. G.2 Table 8: compute-bound up/gate/down plateau at 225-247 of 312 TFLOP/s",
            "240 / 312 (preset source)"),
        Fit(f"{PLATFORM} gpu token_tile", device.token_tile,
            "App. G.2 Table 8: latency steps 0.21 -> 0.29 ms between 128 and 160 tokens, flat within 128-token tiles",
            "the SM80 GEMM threadblock tile that reproduces the steps (preset source)"),
        Fit(f"{ACCEPTANCE} intercept", curve.intercept,
            "Fig. 21 acceleration rates (~2.4 / 2.7 / 2.9 / 3.05 at 16..64); the paper prints 0.477 log(n) without one",
            "1 makes the curve pass through autoregressive decoding (n = 1) and the Fig. 21 points"),
    ]

    plot_fig21(curves["batch"], acceptance, out_dir / "medusa_fig21.png")
    plot_sweep(curves["batch"], {**FIG22_SPEEDUP, 1: FIG21_SPEEDUP}, "bs",
               "Medusa Fig. 22: Llama-7B block, s = 1024, speedup per batch size", out_dir / "medusa_fig22.png")
    plot_sweep(curves["seq"], {s: dict(zip(CANDIDATES, v)) for s, v in FIG23_SPEEDUP.items()}, "s",
               "Medusa Fig. 23: Llama-7B block, batch 4, speedup per KV length", out_dir / "medusa_fig23.png")
    plot_tables(points, device, out_dir / "medusa_tables6-8.png")
    plot_overheads(chat["overhead"], out_dir / "medusa_table1.png")
    medusa_profile.plot_profile(g3, curves, prof, out_dir / medusa_profile.FIGURE.filename)
    report.figures += [
        Figure("medusa_fig21.png", "Fig. 21 (batch 1, s = 1024): simulated speedup, acceleration rate and normalised "
               "block latency vs candidates; stars / grey bars: the paper's values read off the figure"),
        Figure("medusa_fig22.png", "Fig. 22 (s = 1024): simulated speedup vs candidates per batch size; lines HetSpec, "
               "stars the paper"),
        Figure("medusa_fig23.png", "Fig. 23 (batch 4): simulated speedup vs candidates per KV length; lines HetSpec, "
               "stars the paper"),
        Figure("medusa_tables6-8.png", "Tables 6-8 on the A100 roofline: the paper's measured TFLOP/s (circles) and "
               "HetSpec's (crosses) against operational intensity"),
        Figure("medusa_table1.png", "Table 1: per-step overhead of the 64-token tree and the speedup it implies with "
               "the paper's acceleration rates"),
        medusa_profile.FIGURE,
    ]
    report.setup = _setup_text(platform.name)
    report.discussion = (_discussion(report, curves, chat, device, acceptance) + "\n\n"
                         + medusa_profile.paragraph(g3, get_model(APPG_MODEL), curves, prof, acceptance))
    report.missing = MISSING
    return report


def _setup_text(platform: str) -> str:
    return (
        f"Platform `{platform}` (GPU: 1,935 GB/s, 312 TFLOP/s fp16, efficiencies and GEMM tile as listed under "
        "fitted parameters). Tables 6-8: the `vicuna-33b` shape (LLaMA-33B: h 6656, i 17920, 52 heads of 128), each "
        "operator of `sim.step_graph` timed alone with the roofline (`sim.step_timing.price_op`); achieved TFLOP/s = "
        "FLOPs / predicted time. App. G.3 (Figs. 21-23): the `llama2-7b` shape (= LLaMA-7B), one block of the paper's "
        "eight operators (QK^T and PV over the cached keys plus the tree block) run one after another, acceleration "
        f"rate from the `{ACCEPTANCE}` curve 1 + 0.477 ln(n), speedup = acceleration / (block latency at n "
        "candidates / at 1), best count over 16..112 as in the paper. Table 1 / Table 4 / Fig. 4: the `medusa` "
        "strategy (whole model on the tree + the heads it needs, 4 for the 63-node `mc_sim_7b_63` list) over the "
        f"`ar` strategy at batch 1 and a {CHAT_CONTEXT}-token context (assumed), with the paper's acceleration "
        "rates. The paper does not name the GPU of its speed results (it trained on an A100 PCIe): the A100 preset "
        "stands in for it."
    )


def _median_error(rows: list[Comparison], prefix: str) -> float:
    errs = [abs(r.rel_error) for r in rows if r.table.startswith(prefix)]
    return statistics.median(errs) if errs else float("nan")


def _discussion(report: PaperReport, curves: dict, chat: dict, device: Device, acceptance: AcceptanceModel) -> str:
    """The honest paragraphs; every number in them is computed here, none typed in."""
    preds = report.rows("prediction")
    fits = [r for r in report.rows("fit") if r.unit == "TFLOP/s"]
    acc = lambda q: float(acceptance.width_tokens(q))  # noqa: E731
    bs1 = curves["batch"][1]
    best_bs1 = best_candidates({q: v[1] for q, v in bs1.items()})
    mlp_oi_112 = build_step_graph(get_model(APPG_MODEL), 112, APPG_CONTEXT, 1).op("up_proj").intensity
    ridge = (device.peak_flops_per_s("fp16") * device.compute_efficiency
             / (device.mem_bw_bytes_per_s * device.bw_efficiency))           # FLOP/B where the preset's roofs meet
    t8_bs1_64_80 = (80 / 64) * TABLE8[1][4][0] / TABLE8[1][5][0]          # latency(80 tokens) / latency(64 tokens)
    fig4 = sorted(chat["sparse_speed"].values(), reverse=True)
    margin = fig4[0] / fig4[1]
    para1 = (
        f"The App. G.3 choices are the paper's from batch 2 up (64 at batch 2, 32 at batch 4 and at every KV length of "
        f"Fig. 23, 16 at batch 8 and 16): compute-bound GEMMs quantised to the 128-row tile reproduce the paper's "
        f"cliff between 64 and 80 candidates at batch 4 (256 -> 320 tokens: two tiles -> three). At batch 1 HetSpec "
        f"picks {best_bs1}, not 64: on a roofline every operator of the batch-1 block stays memory-bound up to 112 "
        f"candidates (MLP intensity {mlp_oi_112:.0f} FLOP/B at 112 tokens, below the preset's ridge of "
        f"{ridge:.0f}), so latency "
        f"grows only with the activation bytes ({bs1[112][0]:.2f}x at 112) and the log curve keeps winning. The "
        f"paper's simulator used measured 7B kernel latencies that jump between 64 and 80 candidates (Fig. 21 bars "
        f"{FIG21_LATENCY[64]} -> {FIG21_LATENCY[80]}), a kernel-selection effect (e.g. a 128-row tile on a "
        f"4096-wide GEMM launches fewer blocks than the GPU has SMs) that its own 33B Table 8 does not show at batch 1 "
        f"(+{100 * (t8_bs1_64_80 - 1):.1f} % from 64 to 80 tokens) and that a roofline cannot express. The paper's "
        f"batch-1 optimum is shallow anyway ({FIG21_SPEEDUP[64]} at 64 vs {FIG21_SPEEDUP[112]} at 112). The paper's "
        f"measured batch-1 choice is reproduced: of Fig. 4's sparse trees the 64-node one is the fastest on the GPU "
        f"({' / '.join(f'{v[1]:.0f}' for v in FIG4_SPARSE.values())} tok/s at "
        f"{' / '.join(map(str, FIG4_SPARSE))} nodes), and the whole-model `medusa` strategy, given their "
        f"accelerations, predicts "
        + " / ".join(f"{v:.2f}" for v in chat["sparse_speed"].values())
        + f" times the vanilla speed, the 64-node tree first, but by {100 * (margin - 1):.1f} % over the next, "
        f"less than this model's error on such ratios: a close call, not a strong confirmation."
    )
    big = {b: acc(16) / FIG22_SPEEDUP[b][16] for b in (32, 64)}                 # paper's implied latency ratios
    linear_only = {b: 16 * TABLE8[b][0][0] / TABLE8[b][1][0] for b in (32, 64)}  # Table 8: T=16b vs T=b
    s_long = max(FIG23_SPEEDUP)
    ours_long = acc(FIG23_BEST) / curves["seq"][s_long][FIG23_BEST][1]
    paper_long = acc(FIG23_BEST) / FIG23_SPEEDUP[s_long][CANDIDATES.index(FIG23_BEST)]
    g1 = build_step_graph(get_model(APPG_MODEL), 1, s_long, FIG23_BATCH).op("attn_score")
    g32 = build_step_graph(get_model(APPG_MODEL), FIG23_BEST, s_long, FIG23_BATCH).op("attn_score")
    t6_growth = FIG23_BEST * TABLE6[s_long][0][0] / TABLE6[s_long][Q_COLUMNS.index(FIG23_BEST)][0]
    ar32 = build_step_graph(get_model(APPG_MODEL), 1, APPG_CONTEXT, 32)
    attn_share = (sum(price_op(op, device, ar32.dtype).timing.time_s for op in ar32.ops
                      if op.name in APPG_OPS and op.kind in ("attention", "tree_attention"))
                  / block_seconds(get_model(APPG_MODEL), device, 1, APPG_CONTEXT, 32))
    para2 = (
        f"Large batches are over-predicted (batch 32: {curves['batch'][32][16][1]:.2f} vs ~{FIG22_SPEEDUP[32][16]} at "
        f"16 candidates; batch 64: {curves['batch'][64][16][1]:.2f} vs ~{FIG22_SPEEDUP[64][16]}). The paper's "
        f"batch-32 / 64 curves imply block latency ratios of {big[32]:.1f}x / {big[64]:.1f}x at 16 candidates, close "
        f"to those of the linear layers alone in Table 8 ({linear_only[32]:.1f}x / {linear_only[64]:.1f}x), as if "
        f"the KV-cache reads of attention weighed little; HetSpec counts them in full: at batch 32, s = 1024 attention "
        f"is {100 * attn_share:.0f} % of a vanilla block and grows little with the candidates. Long contexts at "
        f"batch 4 likewise: at s = {s_long} the paper's speedup at {FIG23_BEST} candidates implies a block latency "
        f"ratio of "
        f"{paper_long:.2f}x where HetSpec's is {ours_long:.2f}x; attention is most of that block, and its bytes grow "
        f"only {g32.bytes / g1.bytes:.2f}x from 1 to {FIG23_BEST} queries (the paper's own 33B Table 6 at batch 16 "
        f"grows {t6_growth:.2f}x in time), so the 7B attention latencies behind Fig. 23 must have grown about twice "
        f"as fast; they are not published. Median |error| of the App. G.3 rows (Figs. 21-23): "
        f"{100 * _median_error(preds, 'Fig. 2'):.1f} %."
    )
    d = chat["details"]
    para3 = (
        f"Table 1: HetSpec's overhead of the 64-token tree is {d['vicuna-7b']['overhead']:.2f} / "
        f"{d['vicuna-13b']['overhead']:.2f} / {d['vicuna-33b']['overhead']:.2f} for 7B / 13B / 33B vs "
        f"{TABLE1['vicuna-7b'][1]} / {TABLE1['vicuna-13b'][1]} / {TABLE1['vicuna-33b'][1]}. The roofline prices the "
        f"extra GEMM rows, the tree attention and the heads (4 x (h x h + h x 32000) weights: "
        f"{100 * d['vicuna-7b']['heads']:.0f} % of a vanilla 7B step, {100 * d['vicuna-33b']['heads']:.0f} % of a "
        f"33B step) but not the per-step framework work (candidate assembly, tree buffers, posterior evaluation, "
        f"KV-cache update in PyTorch), and the paper's overhead rises with model size where HetSpec's falls (the 33B "
        f"model was self-distilled and its tree is not published; it may be larger). Standing in the A100 for the "
        f"unnamed GPU costs little for these ratios (both steps are memory-bound at batch 1 on any large GPU) but "
        f"makes absolute speeds incomparable: the preset gives {d['vicuna-7b']['vanilla_tok_s']:.0f} tok/s for a "
        f"vanilla 7B step at s = {CHAT_CONTEXT} where Fig. 3a shows ~45 (HuggingFace eager decoding is bound by "
        f"kernel launches), so no absolute tok/s is compared."
    )
    t7_bs1_ar = next(r for r in fits if r.table == "Table 7" and r.quantity.endswith("bs 1, q=1: achieved"))
    mid = [r for r in fits if r.table == "Table 8" and any(f"({n} tokens)" in r.quantity for n in (192, 224, 256))]
    para4 = (
        f"Tables 6-8: every intensity is exact. The achieved TFLOP/s are fit rows (the preset's efficiencies and "
        f"tile were read from them), median |error| {100 * statistics.median(abs(r.rel_error) for r in fits):.1f} %. "
        f"The worst are small attention kernels (Table 7 at batch 1: measured {t7_bs1_ar.paper} TFLOP/s at q = 1, "
        f"HetSpec {t7_bs1_ar.hetspec:.2f}: one query block per head, 52 thread blocks, leaves half of the 108 SMs "
        f"idle where the roofline assumes the full achievable bandwidth; Table 6 at s = 128: kernels of a few tens "
        f"of microseconds, where start-up and tail effects cost more than the preset's launch overhead) and GEMMs "
        f"of 192-256 tokens (two 128-row tiles: measured {min(r.paper for r in mid):.0f}-"
        f"{max(r.paper for r in mid):.0f} TFLOP/s, roofline "
        f"{min(r.hetspec for r in mid):.0f}-{max(r.hetspec for r in mid):.0f})."
    )
    return "\n\n".join((para1, para2, para3, para4))


MISSING = [
    "The GPU behind the speed results (Fig. 3, Tables 1-4, Fig. 4, Figs. 7-8): not named (training used an A100 "
    "PCIe); the A100 preset stands in, so only ratios (overhead, speedup) are compared, no absolute tok/s.",
    "Speculative-decoding baselines (Table 1 S_SpecDec 1.47 / 1.56 / 1.60, Fig. 7): the acceptance rates of the "
    "Llama-68M / Tiny-Vicuna-1B drafts are not given; predicting the speedups would need an alpha fitted to "
    "them, so they are not reproduced.",
    "Head accuracies a_k^(i) from the Alpaca-eval calibration: not given, so the greedy sparse-tree construction "
    "(Fig. 6) cannot be rerun; the published 63-node list mc_sim_7b_63 (Medusa repository) prices the 64-token "
    "tree and the 128/256-node trees of Fig. 4 are priced by size and depth only.",
    "Per-category (Fig. 3b) and per-stage (Table 3) acceleration rates: only speedups are given, so the overhead "
    "model has nothing to be checked against there.",
    "The 7B operator latencies App. G.3's simulator used (only the 33B Tables 6-8 are printed), and the context "
    "length of the MT-Bench / AlpacaEval speed runs (HetSpec prices Table 1 at 512 tokens).",
    "Fig. 4 dense trees: each random dense tree's acceleration rate is only a scatter point, so their speeds "
    "cannot be predicted from a given acceleration rate.",
]
