"""Ghidorah (arXiv 2505.23219) against HetSpec: Fig. 9 speedups, the best widths, the 7.6x peak,
the MBPP averages and Fig. 10 (``hetspec reproduce ghidorah``).

Setting (Ghidorah §V): ``jetson-xavier-nx-204mhz`` (GPU locked at 204
MHz, CPU at 1.9 GHz, one LPDDR4x), ``vicuna-7b`` in fp16 with the 5-head Medusa, KV context 256,
the paper's acceptance lengths (Table I, presets ``ghidorah-<dataset>``) and, for the tree shapes
the paper does not publish, the prefixes of Medusa's ``mc_sim_7b_63`` list (``medusa-list``).

- Sequential: :mod:`sim.strategies.ar` on the GPU (w = 1), the unit of every speedup.
- Medusa on the GPU: :mod:`sim.strategies.medusa` on the GPU. All 5 heads run every step
  (``medusa_heads`` 5), as Medusa's reference code does whatever the tree uses.
- Medusa+EM: :mod:`sim.strategies.hcmp` with ``split`` ``megatron`` at EdgeNN's ratio
  (:func:`sim.strategies.hcmp.standalone_ratio`: each device's share proportional to its speed
  alone).
- Ghidorah: :mod:`sim.strategies.hcmp` (column split, dynamic dense/sparse attention split, online
  softmax merge, page syncs) with the partition ratio searched by :func:`sim.optimizer.optimize`
  under the engine's contention rule (ARCA's contention-aware adjustment).
- Best width per method: the optimizer over ARCA's candidates 2, 4, 8, 16, 32, 64 (§IV-C).
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path


from hwmodels.loader import get_platform
from sim.acceptance_loader import load_acceptance
from sim.model_spec import get_model
from sim.optimizer import optimize
from sim.plots import finish_axes, new_figure, save_figure
from sim.reproduce.report import Comparison, Figure, Fit, PaperReport
from sim.step_graph import build_step_graph
from sim.strategies import Problem, StrategyConfig, get_strategy
from sim.strategies.hcmp import attention_split, standalone_ratio

TITLE = "Ghidorah: Fast LLM Inference on Edge with Speculative Decoding and Hetero-Core Parallelism"
CITATION = f"\"{TITLE}\", arXiv 2505.23219, 2025"
PLATFORM = "jetson-xavier-nx-204mhz"
MODEL = "vicuna-7b"
#: "We select a context length (KV cache length) of approximately 256" (§V-C).
CONTEXT = 256
#: Vicuna-7B's Medusa has 5 heads (§V-A); the reference code runs them all each step.
MEDUSA_HEADS = 5
DATASETS = {"mtbench": "MT-bench", "gsm8k": "GSM8K", "mbpp": "MBPP", "humaneval": "HumanEval"}
#: Fig. 9's widths and ARCA's candidate widths (powers of two, §IV-C).
FIG9_WIDTHS = (4, 8, 16, 32, 64)
CANDIDATE_WIDTHS = (2, 4, 8, 16, 32, 64)
METHODS = ("medusa", "em", "ghidorah")
LABELS = {"medusa": "Medusa (GPU)", "em": "Medusa+EM", "ghidorah": "Ghidorah"}

# ---------------------------------------------------------------------- paper numbers
#: Fig. 9, normalised decoding speed (sequential = 1), widths 4/8/16/32/64, read off the bars
#: (approximate values); the text gives MBPP w = 16 as 7.6 (the bar reads 7.2).
FIG9 = {
    "mtbench": {"medusa": (2.2, 2.6, 2.9, 3.2, 3.3), "em": (4.1, 4.7, 5.3, 5.5, 4.4), "ghidorah": (5.3, 5.9, 6.8, 5.7, 5.2)},
    "gsm8k": {"medusa": (2.4, 2.7, 3.0, 3.3, 3.5), "em": (4.4, 4.8, 5.5, 5.7, 4.7), "ghidorah": (5.6, 6.1, 6.8, 5.9, 5.6)},
    "mbpp": {"medusa": (2.5, 2.9, 3.2, 3.5, 3.6), "em": (4.6, 5.2, 5.8, 6.0, 4.9), "ghidorah": (5.9, 6.5, 7.2, 6.2, 5.7)},
    "humaneval": {"medusa": (2.5, 2.9, 3.2, 3.5, 3.6), "em": (4.5, 5.1, 5.8, 6.0, 4.9),
                  "ghidorah": (5.8, 6.4, 7.1, 6.2, 5.8)},
}
#: §V-C text: up to 7.6x at w = 16 (MBPP: 3.27 algorithmic x 2.31 parallel); MBPP averages over
#: w = 4..64: 2.06x vs Medusa on the GPU and 1.20x vs Medusa+EM; best widths 64 (Medusa) and 16 (Ghidorah).
PEAK = 7.6
PARALLEL_SPEEDUP = 2.31
AVG_VS_MEDUSA = 2.06
AVG_VS_EM = 1.20
BEST_WIDTH = {"medusa": 64, "ghidorah": 16}
#: Fig. 10(a), attention module only, w = 64: dynamic / static time (static = 1) per context, read off the figure.
FIG10A = {16: 1.00, 32: 0.99, 64: 0.98, 128: 0.97, 256: 0.95, 512: 0.85, 1024: 0.75, 2048: 0.70}
FIG10A_WIDTH = 64
#: Fig. 10(b): the optimised sparse kernel is 1.90x faster than the dense kernel on the CPU (w = 64).
FIG10B_SPARSE_VS_DENSE = 1.90
#: The numbers the presets' fitted parameters were fitted to (also marked ``fit`` below).
FITTED_ROWS = {("mbpp", "ghidorah", 16), ("mbpp", "ghidorah", 32)}
#: The dataset those rows belong to: its width choices rest on the fit (kind ``fit-choice``); the other three
#: datasets' choices are predicted from it through their own acceptance lengths (Table I).
FITTED_DATASET = "mbpp"
#: The figure the Jetson preset's two bandwidths were fitted to, named on every row that uses them.
BANDWIDTH_FIT = "Fig. 9 / §V-C (MBPP), Ghidorah at w=16 (7.6x) and w=32 (6.2x)"
#: The figure the CPU's sparse-attention efficiency was derived from.
SPARSE_FIT = "Fig. 10(b), sparse / dense 1.90x at w=64"


# ---------------------------------------------------------------------- HetSpec side
def problem_for(dataset: str, context: int = CONTEXT) -> Problem:
    return Problem(get_model(MODEL), get_platform(PLATFORM), load_acceptance(f"ghidorah-{dataset}"), context=context)


def _tree_config(width: int, **options) -> StrategyConfig:
    return StrategyConfig(tree_width=width, tree_shape="medusa-list", options={"medusa_heads": MEDUSA_HEADS, **options})


def sequential_seconds(problem: Problem) -> float:
    ar = get_strategy("ar")
    return ar.estimate(problem, ar.resolve(problem, StrategyConfig(device="gpu"))).step_s


def method_point(problem: Problem, method: str, width: int) -> dict:
    """Tokens/s, step seconds, ratio of one method at one width (closed form = engine for these)."""
    if method == "medusa":
        strategy = get_strategy("medusa")
        config = strategy.resolve(problem, replace(_tree_config(width), device="gpu"))
        est = strategy.estimate(problem, config)
        return {"tokens_per_s": est.tokens_per_s, "step_s": est.step_s, "ratio": None}
    strategy = get_strategy("hcmp")
    if method == "em":
        config = strategy.resolve(problem, _tree_config(width, split="megatron"))
        config = replace(config, partition_ratio=standalone_ratio(problem, config))
        est = strategy.estimate(problem, config)
        return {"tokens_per_s": est.tokens_per_s, "step_s": est.step_s, "ratio": config.partition_ratio}
    res = optimize(problem, "hcmp", space={"tree_width": width, "tree_shape": "medusa-list", "medusa_heads": MEDUSA_HEADS})
    return {"tokens_per_s": float(res.best["tokens_per_s"]), "step_s": float(res.best["step_s"]),
            "ratio": float(res.best["partition_ratio"])}


def best_width(problem: Problem, method: str) -> int:
    """The width the paper's method picks: the optimizer over ARCA's candidate widths."""
    space = {"tree_width": CANDIDATE_WIDTHS, "tree_shape": "medusa-list", "medusa_heads": MEDUSA_HEADS}
    if method == "medusa":
        space["device"] = "gpu"
    res = optimize(problem, "medusa" if method == "medusa" else "hcmp", space=space)
    return int(res.best["tree_width"])


#: A what-if, not the record: the LPDDR4x's concurrent ceiling lowered from 0.8 to this share of 59.7 GB/s, where the
#: fitted CPU and GPU draws (about 21 GB/s together) exceed it and contention binds.
BINDING_CONTENTION = 0.3


def binding_contention_em_gap(ds: str = FITTED_DATASET) -> float:
    """The w = 4..64 average of Ghidorah / Medusa+EM when contention binds (:data:`BINDING_CONTENTION`)."""
    base = get_platform(PLATFORM)
    domains = tuple(replace(d, contention_efficiency=BINDING_CONTENTION) for d in base.memory_domains)
    problem = Problem(get_model(MODEL), replace(base, memory_domains=domains), load_acceptance(f"ghidorah-{ds}"),
                      context=CONTEXT)
    return statistics.mean(method_point(problem, "ghidorah", w)["tokens_per_s"]
                           / method_point(problem, "em", w)["tokens_per_s"] for w in FIG9_WIDTHS)


def concurrent_draw() -> dict:
    """The two devices' streaming draws (GB/s, the presets' fitted numbers) against the LPDDR4x's concurrent
    ceiling: contention binds only when their sum exceeds ``contention_efficiency x bw_gbps``."""
    platform = get_platform(PLATFORM)
    gpu, cpu = platform.device("gpu"), platform.device("cpu")
    (domain,) = platform.memory_domains
    draw = gpu.mem_bw_gbps * gpu.bw_efficiency + cpu.mem_bw_gbps * cpu.bw_efficiency
    return {"gpu": gpu.mem_bw_gbps * gpu.bw_efficiency, "cpu": cpu.mem_bw_gbps * cpu.bw_efficiency, "draw": draw,
            "ceiling": domain.contention_efficiency * domain.bw_gbps, "binds_below": draw / domain.bw_gbps}


def ratio_vs_standalone(ds: str = FITTED_DATASET) -> dict[int, tuple[float, float]]:
    """Per Fig. 9 width: Ghidorah's contention-aware (searched) ratio and the standalone-time ratio of the same split."""
    problem = problem_for(ds)
    strategy = get_strategy("hcmp")
    out = {}
    for w in FIG9_WIDTHS:
        config = strategy.resolve(problem, _tree_config(w))
        out[w] = (method_point(problem, "ghidorah", w)["ratio"], standalone_ratio(problem, config))
    return out


def em_gap_inputs(ds: str = FITTED_DATASET, width: int = 16) -> dict:
    """What Medusa+EM would have to lose for the paper's 1.20x at ``width``: the seconds per step, and those seconds
    in page syncs per layer at the preset's sync latency (Ghidorah §II-D's < 0.1 ms bound)."""
    problem = problem_for(ds)
    gh, em = method_point(problem, "ghidorah", width), method_point(problem, "em", width)
    tokens = em["tokens_per_s"] * em["step_s"]          # the same tree: the same tokens per step as Ghidorah's
    needed = tokens * AVG_VS_EM / gh["tokens_per_s"] - em["step_s"]
    sync_s = problem.platform.link("cpu", "gpu", "unified").latency_s
    return {"em_step_s": em["step_s"], "extra_s": needed, "syncs_per_layer": needed / sync_s / problem.model.n_layers}


def attention_ratio(context: int, width: int = FIG10A_WIDTH, cpu_bw_scale: float = 1.0) -> float:
    """Fig. 10(a): the attention module's time with the dynamic split over the static one; ``cpu_bw_scale``
    scales the CPU's streaming efficiency (a what-if: the attention alone is priced here)."""
    problem = problem_for("mtbench", context)
    if cpu_bw_scale != 1.0:
        cpu = problem.platform.device("cpu")
        devices = {**problem.platform.devices, "cpu": replace(cpu, bw_efficiency=cpu.bw_efficiency * cpu_bw_scale)}
        problem = replace(problem, platform=replace(problem.platform, devices=devices))
    config = get_strategy("hcmp").resolve(problem, _tree_config(width))
    graph = build_step_graph(problem.model, width, context, problem.batch, tree=config.tree)
    dynamic = attention_split(problem, graph, "gpu", "cpu", "dynamic").seconds
    static = attention_split(problem, graph, "gpu", "cpu", "static").seconds
    return dynamic / static


def sparse_vs_dense(width: int = FIG10A_WIDTH) -> float:
    """Fig. 10(b): the CPU's tree block dense over sparse (the roofline prices both)."""
    problem = problem_for("mtbench")
    config = get_strategy("hcmp").resolve(problem, _tree_config(width))
    cpu = problem.platform.device("cpu")
    graph = build_step_graph(problem.model, width, CONTEXT, 1, tree=config.tree)
    from hwmodels.roofline import roofline_time

    op = graph.op("tree_score")
    dense = roofline_time(cpu, op.flops, op.bytes, graph.dtype, tokens=op.tokens, density=1.0).compute_s
    sparse = roofline_time(cpu, op.flops, op.bytes, graph.dtype, tokens=op.tokens, density=op.density).compute_s
    return dense / sparse


# ---------------------------------------------------------------------- the report
def reproduce(out_dir: Path) -> PaperReport:
    out_dir = Path(out_dir)
    report = PaperReport(paper="ghidorah", title=TITLE, citation=CITATION)
    results: dict[str, dict[str, list[dict]]] = {}
    for ds, label in DATASETS.items():
        problem = problem_for(ds)
        seq = sequential_seconds(problem)
        results[ds] = {}
        for method in METHODS:
            points = []
            for k, w in enumerate(FIG9_WIDTHS):
                pt = method_point(problem, method, w)
                pt["speedup"] = pt["tokens_per_s"] * seq
                points.append(pt)
                kind = "fit" if (ds, method, w) in FITTED_ROWS else "prediction"
                note = f"ratio {pt['ratio']:.2f}" if pt["ratio"] is not None else ""
                report.add(Comparison(f"Fig. 9 ({label})", f"speedup, {LABELS[method]}, w={w}", FIG9[ds][method][k],
                                      round(pt["speedup"], 3), kind=kind, unit="x", note=note,
                                      fitted_to=BANDWIDTH_FIT))
            results[ds][method] = points
    mbpp = results["mbpp"]
    gh16 = mbpp["ghidorah"][FIG9_WIDTHS.index(16)]["speedup"]
    md16 = mbpp["medusa"][FIG9_WIDTHS.index(16)]["speedup"]
    report.add(
        Comparison("§V-C text", "peak speedup over sequential (MBPP, w=16)", PEAK, round(gh16, 3), kind="fit", unit="x",
                   fitted_to=BANDWIDTH_FIT),
        Comparison("§I / §V-C text", "parallel speedup Ghidorah / Medusa-GPU (MBPP, w=16)", PARALLEL_SPEEDUP,
                   round(gh16 / md16, 3), unit="x", fitted_to=BANDWIDTH_FIT),
        Comparison("§V-C text", "MBPP average over w=4..64, Ghidorah / Medusa-GPU", AVG_VS_MEDUSA,
                   round(statistics.mean(g["speedup"] / m["speedup"] for g, m in zip(mbpp["ghidorah"], mbpp["medusa"])), 3),
                   unit="x", fitted_to=BANDWIDTH_FIT),
        Comparison("§V-C text", "MBPP average over w=4..64, Ghidorah / Medusa+EM", AVG_VS_EM,
                   round(statistics.mean(g["speedup"] / e["speedup"] for g, e in zip(mbpp["ghidorah"], mbpp["em"])), 3),
                   unit="x", fitted_to=BANDWIDTH_FIT),
    )
    em_gap_binding = binding_contention_em_gap()
    report.add(Comparison("§V-C text", f"MBPP average over w=4..64, Ghidorah / Medusa+EM: contention binding "
                          f"(LPDDR4x ceiling {BINDING_CONTENTION} x 59.7 GB/s)", AVG_VS_EM, round(em_gap_binding, 3),
                          kind="alternative", unit="x", note="a what-if: the ceiling is not measured",
                          fitted_to=BANDWIDTH_FIT))
    for ds, label in DATASETS.items():
        problem = problem_for(ds)
        for method in ("medusa", "ghidorah"):
            kind = "fit-choice" if ds == FITTED_DATASET else "choice"
            report.add(Comparison(f"Fig. 9 / §V-C ({label})", f"best width, {LABELS[method]} (candidates 2..64)",
                                  BEST_WIDTH[method], best_width(problem, method), kind=kind,
                                  fitted_to=BANDWIDTH_FIT))
    fig10a = {s: attention_ratio(s) for s in FIG10A}
    for s, paper in FIG10A.items():
        report.add(Comparison("Fig. 10(a)", f"attention time dynamic / static, w=64, context {s}", paper,
                              round(fig10a[s], 3), fitted_to=f"{BANDWIDTH_FIT}; {SPARSE_FIT}"))
    report.add(Comparison("Fig. 10(b)", "CPU tree block: dense time / optimised sparse time (w=64)",
                          FIG10B_SPARSE_VS_DENSE, round(sparse_vs_dense(), 3), kind="fit", unit="x",
                          note="the preset's sparse_attn_efficiency is derived from this number", fitted_to=SPARSE_FIT))
    platform = get_platform(PLATFORM)
    report.fits = [
        Fit(f"{PLATFORM} gpu.mem_bw_gbps (the GPU's own memory path at 204 MHz)", platform.device("gpu").mem_bw_gbps,
            "Ghidorah §V-C peak 7.6x (MBPP, w=16) and Fig. 9 MBPP Ghidorah 6.2x at w=32",
            "solved jointly with the CPU's bw_efficiency (2 equations, 2 unknowns); the DRAM's 59.7 GB/s is unchanged"),
        Fit(f"{PLATFORM} cpu.bw_efficiency (Carmel streaming, same CPU in jetson-xavier-nx)",
            platform.device("cpu").bw_efficiency, "the same two numbers", "solved jointly (13.2 GB/s)"),
        Fit(f"{PLATFORM} cpu.sparse_attn_efficiency", platform.device("cpu").sparse_attn_efficiency,
            "Fig. 10(b) sparse kernel 1.90x faster than dense on a w=64 tree",
            "1.90 x the 64-token tree's mask density (platform preset, not fitted here)"),
    ]
    report.figures = [_plot_fig9(out_dir, results), _plot_fig10a(out_dir, fig10a)]
    report.setup = _setup_text()
    report.discussion = _discussion(results, fig10a, em_gap_binding) + "\n\n" + _inputs_text(fig10a)
    report.missing = [
        "absolute speeds (tokens/s, ms per step), the chosen partition ratios and the model's precision: all results "
        "are normalised, so the GPU's and the CPU's bandwidth at these clocks had to be fitted (two parameters)",
        "the verification trees per width (ARCA's brute-force search over the MT-bench calibration) and the per-head "
        "accuracies: the acceptance lengths of Table I are used as given and Medusa's mc_sim_7b_63 prefixes price the "
        "tree shapes",
        "the contention behaviour of the shared LPDDR4x under CPU+GPU load and ARCA's ratio-adjustment rule (step, "
        "stopping criterion)",
        "the number of synchronisation points per layer (only 'less than 0.1 ms' per page sync is given)",
        "how Medusa+EM was implemented beyond 'Megatron TP + zero-copy + EdgeNN ratio' (kernels, sync points, the "
        "width its ratio was profiled at)",
        "the attention kernels' speeds (Fig. 10 is normalised) and the context lengths of Fig. 10(a) (read as 16..2048)",
    ]
    return report


def _setup_text() -> str:
    return (f"Platform `{PLATFORM}` (GPU at 204 MHz, CPU at 1.9 GHz, one LPDDR4x shared through a memory domain "
            f"with the engine's max-min contention), model `{MODEL}` (fp16), KV context {CONTEXT}, acceptance "
            "`ghidorah-mtbench|gsm8k|mbpp|humaneval` (Table I, interpolated in log width), trees: prefixes of "
            f"Medusa's mc_sim_7b_63 list, {MEDUSA_HEADS} Medusa heads computed every step. Sequential = `ar` on the "
            "GPU; Medusa = `medusa` on the GPU; Medusa+EM = `hcmp` with option split=megatron at EdgeNN's "
            "standalone-time ratio; Ghidorah = `hcmp` (column split, dynamic attention split) with the ratio searched "
            "by the optimizer. Closed form and engine agree exactly for these strategies (each group of concurrent "
            "parts is priced with the engine's own contention rule), so the numbers are the engine's.")


def _discussion(results, fig10a, em_gap_binding) -> str:
    mb = results["mbpp"]
    gh = [p["speedup"] for p in mb["ghidorah"]]
    em = [p["speedup"] for p in mb["em"]]
    ratio = mb["ghidorah"][FIG9_WIDTHS.index(16)]["ratio"]
    return (
        "**Which physical assumption was wrong.** With the datasheet preset (the 204 MHz GPU drawing 0.67 x 59.7 GB/s "
        "like the full-clock part, the CPU 0.6 x 59.7 GB/s) Medusa on the GPU turns compute-bound at w = 32-64 "
        "(best width 16, against the paper's 64) and the CPU+GPU split gains almost nothing because the two sides "
        "saturate the shared DRAM. Ghidorah's own observations say otherwise: the GPU's step time is flat from w = 4 to "
        "64, so at 204 MHz the GPU must be memory-bound even at 64 tokens, which needs a GPU that draws at most "
        "~15 GB/s; and the split runs 2.3x faster than the GPU alone, so the CPU must draw more than the GPU. Both "
        "follow if the GPU's memory path is clock-limited (its L2 and memory interface run at the GPU clock). The "
        f"fit gives the GPU {0.67 * get_platform(PLATFORM).device('gpu').mem_bw_gbps:.1f} GB/s and the six Carmel cores "
        f"{get_platform(PLATFORM).device('cpu').bw_efficiency * 59.7:.1f} GB/s; together they draw ~21 GB/s of the "
        "LPDDR4x's 47.8 GB/s contention ceiling, so contention never binds here. With these two numbers the rest "
        "follows: the CPU (0.26 TFLOP/s fp16 NEON) becomes compute-bound past w = 16 while the GPU stays memory-bound, "
        f"which is why Ghidorah's best width is 16 (ratio {ratio:.2f} on the GPU there) and Medusa's is 64.\n\n"
        "**What does not match.** (1) Medusa on the GPU is 8-15 % below the figure: HetSpec charges the 5 Medusa heads "
        "(1.3 GB of fp16 weights, 10 % of the model) every step, as Medusa's code runs them; the paper's bars sit at "
        "0.96-1.0 x the acceptance length, i.e. its heads cost almost nothing (maybe they ran only the heads the "
        "tree uses, or a cheaper head implementation; not stated). With fewer heads Medusa's 32 and 64 tie and the "
        "best-width choice becomes a coin flip. (2) Medusa+EM is predicted at "
        f"{statistics.mean(e / g for e, g in zip(em, gh)):.2f} x Ghidorah on MBPP, the paper measures 1/1.20: in "
        "HetSpec's accounting the all-reduce adds < 0.1 % of the step's bytes at these widths, the attention is < 2 % "
        "of the FLOPs at context 256 (so computing affinity cannot matter much), and EdgeNN's standalone-time ratio "
        "is the right one when contention does not bind. Nor does binding contention make the gap: with the "
        f"LPDDR4x's concurrent ceiling lowered to {BINDING_CONTENTION} x 59.7 GB/s (below the two sides' ~21 GB/s, the "
        f"`alternative` row) Ghidorah over Medusa+EM is {em_gap_binding:.2f}x, because max-min sharing slows both "
        "sides alike and the standalone ratio stays close to the contended optimum; the paper gives no measurement "
        "of where its contention binds (§III-C3 adjusts the ratio empirically). The paper's gap must come from "
        "something it does not describe (its EM kernels, where its ratio was profiled, more synchronisation). (3) Beyond w = 16 HetSpec "
        f"falls faster than the bars (w = 64: {gh[-1]:.2f} vs 5.7): in the model the CPU is purely compute-bound at "
        "0.26 TFLOP/s there, so doubling the width halves its share; the paper's gentler slope suggests the CPU's GEMM "
        "efficiency grows with the token count. (4) Fig. 10(a): HetSpec's dynamic split already helps at short "
        f"contexts ({fig10a[64]:.2f} at 64 against 0.98) and saturates near 0.5 because it lets the GPU compute "
        "moved tree work at its tensor-core rate and the CPU absorb dense work at its full bandwidth; the paper's "
        "curve stays flat until 256 and reaches only 0.70 at 2048, so its GPU attention kernel is slower than its GEMMs "
        "(FasterTransformer's masked attention on CUDA cores) and the CPU's dense attention is less efficient than "
        "its streaming rate. The averages and the 2.31x parallel speedup inherit (1) and (2). Medusa and Medusa+EM "
        "rows are pure predictions; the other datasets differ from MBPP only by Table I's acceptance lengths.\n\n"
        "**What is fitted, what is predicted.** The two bandwidths are solved from MBPP's Ghidorah bars at w = 16 and "
        "32, which fixes the ratio of step times across widths; MBPP's two width choices therefore rest on their own "
        "figure (`fit-choice`, not counted), and MT-bench, GSM8K and HumanEval, which differ only by their Table I "
        "acceptance lengths, are predicted from that one fit: their six width choices all match."
    )


#: The CPU's streaming rate in its dense attention, as a share of the fitted rate, that Fig. 10(a)'s 0.70 at 2048 needs.
FIG10A_CPU_SHARE = 0.3


def _inputs_text(fig10a) -> str:
    draw = concurrent_draw()
    ratios = ratio_vs_standalone()
    gap = em_gap_inputs()
    alt = {c: attention_ratio(c, cpu_bw_scale=FIG10A_CPU_SHARE) for c in (16, 2048)}
    diff = max(abs(a - b) for a, b in ratios.values())
    return (
        "**Contention, and the inputs that decide the misses.** The paper measures no shared-bus efficiency: §III-C3 "
        "says only that simultaneous access affects the units at varying levels and that ARCA adjusts the "
        "standalone-time ratio gradually, so contention cannot be made to bind where the paper says it does without "
        "fitting it to the bars it is checked against. With the fitted draws (GPU "
        f"{draw['gpu']:.1f} GB/s, CPU {draw['cpu']:.1f} GB/s, {draw['draw']:.1f} GB/s together) under the preset's "
        f"{draw['ceiling']:.1f} GB/s ceiling Ghidorah's searched ratio stays within {diff:.3f} of the standalone one at "
        "every width; the input that would have to change is the LPDDR4x's `contention_efficiency` (below "
        f"{draw['binds_below']:.2f} of 59.7 GB/s to bind) with a per-unit share of the loss, which only a concurrent "
        "CPU+GPU bandwidth microbenchmark on the Xavier NX at 204 MHz / 1.9 GHz would give. Medusa+EM's 1.20x is "
        "decided by what differs between the two splits, which HetSpec prices near equal: at w = 16 Medusa+EM would "
        f"have to lose {1e3 * gap['extra_s']:.0f} ms of its {1e3 * gap['em_step_s']:.0f} ms step, e.g. "
        f"{gap['syncs_per_layer']:.0f} more page syncs per layer at §II-D's 0.1 ms bound, where Megatron's two "
        "all-reduces per layer need four. Fig. 10(a) is decided by how fast the CPU reads the KV cache in its dense "
        "attention relative to the GPU: the CPU's streaming rate is fitted to Fig. 9 and serves every operator, "
        f"which gives {fig10a[2048]:.2f} at 2048; at {FIG10A_CPU_SHARE} of it in the attention alone the long-context "
        f"end is {alt[2048]:.2f} (paper 0.70) but context 16 falls to {alt[16]:.2f} (paper 1.00), so no one CPU rate "
        "gives both ends, and the paper gives no kernel speeds (Fig. 10 is normalised)."
    )


def _plot_fig9(out_dir: Path, results) -> Figure:
    fig, axes = new_figure(1, 4, figsize=(16, 4), sharey=True)
    colors = {"medusa": "tab:blue", "em": "tab:orange", "ghidorah": "tab:green"}
    for ax, (ds, label) in zip(axes, DATASETS.items()):
        ax.axhline(1.0, color="gray", lw=1, label="sequential")
        for method in METHODS:
            ys = [p["speedup"] for p in results[ds][method]]
            ax.plot(FIG9_WIDTHS, ys, "-o", color=colors[method], label=f"{LABELS[method]} (HetSpec)")
            ax.plot(FIG9_WIDTHS, FIG9[ds][method], "x--", color=colors[method], alpha=0.7,
                    label=f"{LABELS[method]} (paper)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(FIG9_WIDTHS, [str(w) for w in FIG9_WIDTHS])
        finish_axes(ax, title=label, xlabel="verification width (tokens)", legend_fontsize=None)
    axes[0].set_ylabel("decoding speed / sequential (x)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=7, fontsize=8)
    fig.suptitle("Ghidorah Fig. 9 on jetson-xavier-nx-204mhz, vicuna-7b, context 256 "
                 "(Medusa+EM and Ghidorah overlap in HetSpec)")
    name = "ghidorah_fig9.png"
    save_figure(fig, out_dir / name, rect=(0, 0.08, 1, 1))   # the bottom 8 %: the shared legend
    return Figure(name, "Speedup over sequential decoding vs verification width (Fig. 9): HetSpec lines, paper "
                        "bars as crosses; Medusa on the GPU, Medusa+EM and Ghidorah, four datasets.")


def _plot_fig10a(out_dir: Path, fig10a) -> Figure:
    ctx = list(fig10a)
    fig, ax = new_figure(figsize=(6, 4))
    ax.plot(ctx, [fig10a[c] for c in ctx], "-o", label="dynamic / static (HetSpec)")
    ax.plot(ctx, [FIG10A[c] for c in ctx], "x--", label="dynamic / static (paper)")
    ax.axhline(1.0, color="gray", lw=1, label="static")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1.1)
    finish_axes(ax, title="Ghidorah Fig. 10(a): attention split, w = 64", xlabel="context (KV cache) length (tokens)",
                ylabel="attention time, normalised to static", legend_fontsize="medium")
    name = "ghidorah_fig10a.png"
    save_figure(fig, out_dir / name)
    return Figure(name, "Attention module time with the dynamic dense/sparse split, relative to the static split, "
                        "vs context length (Fig. 10(a)).")
