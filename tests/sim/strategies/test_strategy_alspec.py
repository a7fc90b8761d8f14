"""The ``alspec`` strategy: App. F's formula (pinned to the paper's tables), the roofline inputs,
monotonicity in the hit rate, engine vs closed form, the role swap on hits, and clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from hwmodels.errors import HetSpecError, UnknownNameError
from hwmodels.loader import get_platform
from sim.acceptance_loader import load_acceptance
from sim.engine import simulate
from sim.model_spec import get_model
from sim.optimizer import optimize
from sim.strategies import get_strategy
from sim.strategies.alspec import replicated_node
from sim.strategies.alspec_formulas import app_f_latency, layer_hits, projection_latency, tp_latency
from sim.strategies.alspec_tables import kernel_tables
from sim.strategies.base import Problem, StrategyConfig

N150 = get_platform("tenstorrent-n150x8")
H100_NODE = replicated_node(get_platform("h100-sxm"), "gpu", 8)
LLAMA = get_model("llama3.1-8b")
ACC = load_acceptance("alspec-llama3.1-8b")
TT = {"precision": "tt-llama3-performance"}
STRATEGY = get_strategy("alspec")


def problem(context=1024, platform=N150, acceptance=ACC, **kw) -> Problem:
    return Problem(LLAMA, platform, acceptance, context=context, **kw)


def resolved(p: Problem, device=None, **options):
    return STRATEGY.resolve(p, StrategyConfig(method="alspec", device=device, options=options))


def step_s(p: Problem, device=None, **options) -> float:
    return STRATEGY.estimate(p, resolved(p, device, **options)).step_s


# ---------------------------------------------------------------------- the paper's formula, pinned
@pytest.mark.parametrize("tp,token_ns", [(1, 31_644_903), (2, 21_026_004), (4, 14_833_985), (8, 16_081_964)])
def test_app_f_full_tp_reproduces_the_tables_exactly(tp, token_ns):
    # fixed + 32 (per_layer + FD(1K)) on ALSpec Tables 4-7, to the nanosecond
    row = kernel_tables()["tensor_parallel"][str(tp)]
    got = tp_latency(row["fixed_ns"], row["per_layer_without_fd_ns"], row["sdpa_decode_1k_ns"], 32)
    assert got == token_ns
    assert round(got / 1e6, 2) == {1: 31.64, 2: 21.03, 4: 14.83, 8: 16.08}[tp]


def test_kernel_tables_sum_to_their_stated_totals():
    for tp, row in kernel_tables()["tensor_parallel"].items():
        rows = sum(ns for name, ns in row["layer_ops_ns"] if name != "ScaledDotProductAttentionDecode")
        assert rows == row["per_layer_without_fd_ns"], tp
        head = sum(ns for _, ns in row["embedding_lm_head_ops_ns"])
        # TP2's LM-head rows are 17090 ns over the stated total (a duplicated Concat in the extraction)
        assert head - row["fixed_ns"] == (17090 if tp == "2" else 0), tp


def test_sp_formula_rounds_hits_down_to_whole_layers():
    assert layer_hits(32, 0.875) == 28 and layer_hits(32, 0.65) == 20 and layer_hits(32, 0.5) == 16
    assert layer_hits(32, 0.65, "expected") == pytest.approx(20.8)
    # hit: SFD_R + max(SFD_S - SFD_R, per_layer); miss: per_layer + SFD_S
    fixed, per_layer, sfd_s, sfd_r = 100.0, 10.0, 4.0, 1.0
    assert app_f_latency(fixed, per_layer, sfd_s, sfd_r, 0.875, 32) == 100 + 28 * (1 + 10) + 4 * (10 + 4)
    # attention longer than the rest of the layer: the hit layer waits for the exact attention
    assert app_f_latency(0.0, 2.0, 9.0, 1.0, 1.0, 32) == 32 * (1 + 8)
    # r = 0 is full TP
    assert app_f_latency(fixed, per_layer, sfd_s, sfd_r, 0.0, 32) == tp_latency(fixed, per_layer, sfd_s, 32)


def test_gpu_projection_reproduces_table_3():
    proj = kernel_tables()["h100_projection"]
    for row in proj["rows"]:
        tok_s = 1.0 / projection_latency(row["tp4_tok_s"], row["attn_us"] * 1e-6, proj["hit_rate"], 32)
        assert tok_s == pytest.approx(row["alspec_tok_s"], abs=0.1)
        # the same number from the App. F form: SFD_R = 0, fractional hits, fixed = TP4 latency - 32 layers
        layer = (row["attn_us"] + row["non_attn_us"]) * 1e-6
        fixed = 1.0 / row["tp4_tok_s"] - 32 * layer
        lat = app_f_latency(fixed, row["non_attn_us"] * 1e-6, row["attn_us"] * 1e-6, 0.0, 0.65, 32, "expected")
        assert 1.0 / lat == pytest.approx(tok_s, rel=1e-12)


# ---------------------------------------------------------------------- model behaviour
def test_hit_rate_zero_gains_nothing_over_tensor_parallelism_on_one_group():
    for ctx in (1024, 65536, 131072):
        p = problem(ctx)
        for tp in (1, 2, 4) if ctx < 131072 else (2, 4):       # 128K of KV does not fit one card
            alspec, tp_only = step_s(p, tp=tp, sp=1, hit_rate=0.0, **TT), step_s(p, tp=tp, sp=0, **TT)
            assert alspec >= tp_only * (1 - 1e-12), (ctx, tp)
            # once the KV is long, the speculative chunks hide inside flash decode: exactly TP's time
            if ctx >= 65536:
                assert alspec == pytest.approx(tp_only, rel=1e-12), (ctx, tp)


@pytest.mark.parametrize("rounding", ["floor", "expected"])
def test_higher_hit_rate_is_never_slower(rounding):
    rates = np.linspace(0.0, 1.0, 33)
    for platform, device, opts in ((N150, None, TT), (H100_NODE, "gpu0", {})):
        for ctx in (1024, 32768, 131072):
            p = problem(ctx, platform)
            steps = [step_s(p, device, tp=4, sp=1, hit_rate=float(r), layer_rounding=rounding, **opts) for r in rates]
            assert all(b <= a * (1 + 1e-12) for a, b in zip(steps, steps[1:])), (platform.name, ctx)


def test_roofline_inputs_follow_the_kernel_tables_where_memory_bound():
    # TP4 N150 at 1K: the matmuls are the weights read at 288 GB/s x 0.85 (Table 6's per-layer total 387.6 us)
    c = STRATEGY.costs(problem(), resolved(problem(), tp=4, sp=0, **TT))
    assert c.per_layer_s * 1e6 == pytest.approx(387.6, rel=0.1)
    assert c.ccl_s > 0 and {op.name for op in c.ops} >= {"all_gather_attn", "reduce_scatter_mlp", "gate_proj"}
    # more context, more flash decode, nothing else changes (App. F: only FD depends on K)
    c_long = STRATEGY.costs(problem(131072), resolved(problem(131072), tp=4, sp=0, **TT))
    assert c_long.fd_s > 10 * c.fd_s and c_long.per_layer_s == pytest.approx(c.per_layer_s)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_measured_collectives_replace_the_link_model_and_nothing_else(tp):
    """ALSpec Tables 5-7's collective rows as an input: the layer's collectives sum to them, in the link
    model's shares, and every other operator keeps its roofline price."""
    p = problem(1024)
    ring = STRATEGY.costs(p, resolved(p, tp=tp, sp=0, **TT))
    measured = STRATEGY.costs(p, resolved(p, tp=tp, sp=0, ccl_layer_us=236.852, **TT))
    assert measured.ccl_s == pytest.approx(236.852e-6, rel=1e-12)
    for a, b in zip(ring.ops, measured.ops):
        if a.collective and a.block in ("pre", "post"):
            assert b.time_s / measured.ccl_s == pytest.approx(a.time_s / ring.ccl_s, rel=1e-12)
        else:
            assert b.time_s == a.time_s, a.name
    slower = 32 * (measured.ccl_s - ring.ccl_s)
    assert step_s(p, tp=tp, sp=0, ccl_layer_us=236.852, **TT) == pytest.approx(step_s(p, tp=tp, sp=0, **TT) + slower)


def test_a_faster_link_is_never_slower():
    from dataclasses import replace

    fast = replace(N150, links=tuple(replace(l, bw_gbps=l.bw_gbps * 4, latency_us=l.latency_us / 4) for l in N150.links))
    for opts in ({"tp": 4, "sp": 0}, {"tp": 4, "sp": 1, "hit_rate": 0.75}, {"tp": 2, "sp": 1, "hit_rate": 0.5}):
        assert step_s(problem(32768, fast), **opts, **TT) < step_s(problem(32768), **opts, **TT)


def test_gpu_runtime_is_the_fused_one_and_tt_the_ring():
    gpu = resolved(problem(platform=H100_NODE), "gpu0", tp=4, sp=0)
    tt = resolved(problem(), tp=4, sp=0, **TT)
    assert gpu.options["runtime"] == "sglang" and tt.options["runtime"] == "tt-metalium"
    names = {op.name for op in STRATEGY.costs(problem(platform=H100_NODE), gpu).ops}
    assert "all_reduce_mlp" in names and "gate_up_proj" in names and "all_gather_attn" not in names


# ---------------------------------------------------------------------- engine
@pytest.mark.parametrize("platform,device,opts", [
    (N150, None, {"tp": 4, "sp": 0, **TT}),
    (N150, None, {"tp": 4, "sp": 1, "hit_rate": 0.875, **TT}),
    (N150, None, {"tp": 2, "sp": 1, "hit_rate": 0.5, **TT}),
    (H100_NODE, "gpu0", {"tp": 4, "sp": 1, "hit_rate": 0.65}),
])
def test_engine_equals_app_f_closed_form(platform, device, opts):
    # separate memories, layers at sync points, FF slower than attention (Scenario 3): exact
    p = problem(32768, platform)
    config = StrategyConfig(method="alspec", device=device, options=opts)
    sim = simulate(p, "alspec", config, steps=2)
    assert sim.engine_step_s == pytest.approx(sim.closed_form_step_s, rel=1e-9)
    sim_ops = simulate(p, "alspec", config, steps=1, per_layer=True)
    assert sim_ops.engine_step_s == pytest.approx(sim.closed_form_step_s, rel=1e-9)


def test_drawn_hits_average_to_the_expected_rounding():
    p = problem(65536)
    config = StrategyConfig(method="alspec", options={"tp": 4, "sp": 1, "hit_rate": 0.6, "layer_rounding": "expected",
                                                      **TT})
    sim = simulate(p, "alspec", config, steps=60, seed=3, op_records=False)
    assert sim.engine_step_s == pytest.approx(sim.closed_form_step_s, rel=0.01)
    assert np.std(sim.run.step_s) > 0          # outcomes really are drawn per layer


def test_a_hit_hands_the_next_layer_to_the_receiver():
    p = problem(32768)
    config = StrategyConfig(method="alspec", options={"tp": 4, "sp": 1, "hit_rate": 2 / 32, **TT})  # layers 0, 1 hit
    run = simulate(p, "alspec", config, steps=1).run
    where = {r.task.name: r.task.resource for r in run.task_runs}
    assert where["L0/sfd_spec"] == "n150_0" and where["L0/spec"] == "n150_1"
    assert where["L1/sfd_spec"] == "n150_1" and where["L1/spec"] == "n150_0"    # roles swapped after the hit
    assert where["L2/sfd_spec"] == "n150_0" and where["L2/exact"] == "n150_0"   # a miss: the sender recomputes
    phases = {r.task.name: r.task.phase for r in run.task_runs}
    assert phases["L2/exact"] == "recompute" and phases["L2/spec"] == "draft"


def test_optimizer_searches_tp_and_sp_on_the_n150_ring():
    result = optimize(problem(65536), "alspec", space={"precision": (TT["precision"],), "hit_rate": (0.875,)})
    table = result.table
    assert set(zip(table["tp"], table["sp"])) == {(1, 0), (2, 0), (4, 0), (8, 0), (1, 1), (2, 1), (4, 1)}
    assert result.best_config.options["tp"] * (1 + result.best_config.options["sp"]) <= 8


def test_replicated_node_copies_the_preset_gpu():
    assert len(H100_NODE.devices) == 8 and len(H100_NODE.links) == 8
    gpu = get_platform("h100-sxm").device("gpu")
    assert H100_NODE.device("gpu7").mem_bw_gbps == gpu.mem_bw_gbps
    assert H100_NODE.link("gpu0", "gpu1").kind == "nvlink"


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("options,error,message", [
    ({"tp": 3, "sp": 0}, HetSpecError, "tp 3 must divide the KV heads"),
    ({"tp": 8, "sp": 1}, HetSpecError, "needs 16 devices identical to n150_0; tenstorrent-n150x8 has 8"),
    ({"tp": 2, "sp": 2}, HetSpecError, "option sp must be 0"),
    ({"tp": 0}, HetSpecError, "option tp must be an integer >= 1"),
    ({"hit_rate": 1.5}, HetSpecError, r"option hit_rate must be in \[0, 1\]"),
    ({"precision": "fp3"}, UnknownNameError, "unknown ALSpec precision 'fp3'"),
    ({"runtime": "jax"}, UnknownNameError, "unknown ALSpec runtime 'jax'"),
    ({"layer_rounding": "ceil"}, UnknownNameError, "unknown layer rounding 'ceil'"),
    ({"window": 0}, HetSpecError, "option window must be an integer >= 1"),
    ({"fd_fixed_us": -1}, HetSpecError, "fd_fixed_us must be a number >= 0"),
    ({"ccl_layer_us": 0}, HetSpecError, "ccl_layer_us must be a number > 0"),
    ({"ccl_layer_us": True}, HetSpecError, "ccl_layer_us must be a number > 0"),
    ({"lam": 0.3}, HetSpecError, "no hit rate at lambda 0.3"),
])
def test_bad_options_are_one_line(options, error, message):
    with pytest.raises(error, match=message):
        resolved(problem(), **{"precision": TT["precision"], **options})


def test_missing_acceptance_and_memory_are_clear():
    with pytest.raises(HetSpecError, match="method alspec needs an acceptance model"):
        resolved(problem(acceptance=None), tp=4, sp=1, **TT)
    assert resolved(problem(acceptance=None), tp=4, sp=0, **TT).options["sp"] == 0   # plain TP needs none
    with pytest.raises(HetSpecError, match=r"needs 16\.\d GB per device but n150_0 has 12 GB"):
        resolved(problem(), tp=1, sp=0)                                              # fp16 weights on one card
