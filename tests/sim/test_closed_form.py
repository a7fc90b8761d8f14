"""The closed form: exact against the step graph and the scalar roofline, equal to the engine
where nothing overlaps, and monotone in bandwidth and FLOP/s."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels.contention import standalone_bw
from hwmodels.errors import HetSpecError
from hwmodels.loader import get_platform
from hwmodels.platform import Device
from hwmodels.roofline import roofline_time
from sim.acceptance_loader import load_acceptance
from sim.closed_form import roofline_arrays, step_polynomial, step_seconds
from sim.engine import simulate
from sim.model_spec import get_model
from sim.step_graph import build_step_graph
from sim.step_timing import price_step
from sim.strategies import get_strategy
from sim.strategies.base import Problem, StrategyConfig
from sim.tree import TokenTree

A100 = get_platform("a100-80gb-pcie")


def curve_device() -> Device:
    """A CPU with a measured efficiency curve, a sparse kernel and a masked-pass factor (exercises every
    roofline branch)."""
    return replace(A100.devices["cpu"], gemm_efficiency_curve=((1, 0.05), (8, 0.3), (64, 0.6)),
                   sparse_attn_efficiency=0.4, masked_overhead_factor=1.3)


@pytest.mark.parametrize("q", [1, 2, 17])
def test_a_masked_pass_pays_the_factor_on_its_fixed_costs_only(q):
    """A forward of several new tokens runs under a mask: its fixed costs, and nothing else, are the
    factor times a one-token pass's; a one-token forward is priced as without the factor."""
    model = get_model("llama-68m")
    plain = A100.devices["cpu"]
    graph = build_step_graph(model, q, 100)
    with_factor, without = price_step(graph, curve_device()), price_step(graph, replace(curve_device(),
                                                                                       masked_overhead_factor=None))
    factor = 1.3 if q > 1 else 1.0
    for a, b in zip(with_factor.ops, without.ops):
        assert a.timing.overhead_s == pytest.approx(factor * b.timing.overhead_s, rel=1e-12)
        assert a.timing.compute_s == b.timing.compute_s and a.timing.memory_s == b.timing.memory_s
    assert plain.masked_overhead_factor is None and plain.masked_factor == 1.0


@pytest.mark.parametrize("model_name", ["vicuna-7b", "llama3.1-8b", "gpt2", "llama-68m"])
@pytest.mark.parametrize("context", [0, 1, 300])
def test_vectorised_step_equals_the_priced_step_graph(model_name, context):
    model = get_model(model_name)
    plat = replace(A100, devices={**A100.devices, "cpu": curve_device()})
    rng = np.random.default_rng(0)
    for device in ("gpu", "cpu"):
        dev = plat.device(device)
        for _ in range(4):
            q, b = int(rng.integers(1, 90)), int(rng.integers(1, 5))
            tree = TokenTree.greedy(np.full((4, 6), 0.1), q) if q <= 1 + 6 + 36 + 216 else None
            want = price_step(build_step_graph(model, q, context, b, tree=tree), dev,
                              standalone_bw(plat, device)).total_s
            got = step_seconds(model, plat, device, q, context, b, tree.mask_density if tree else None)
            assert got == pytest.approx(want, rel=1e-9)


def test_vectorised_step_broadcasts_over_configurations():
    model = get_model("vicuna-7b")
    q = np.arange(1, 65)
    many = step_seconds(model, A100, "gpu", q, 256)
    one_by_one = [float(step_seconds(model, A100, "gpu", int(v), 256)) for v in q]
    assert many.shape == (64,)
    assert np.allclose(many, one_by_one, rtol=1e-12)
    grid = step_seconds(model, A100, "gpu", q[:, None], np.array([16, 256, 4096])[None, :])
    assert grid.shape == (64, 3)


def test_polynomial_check_refuses_mixed_context_families():
    with pytest.raises(HetSpecError, match="separate calls"):
        step_seconds(get_model("vicuna-7b"), A100, "gpu", 1, np.array([0, 5]))


def test_step_polynomial_recovers_the_accounting_exactly():
    poly = step_polynomial(get_model("llama2-70b"))
    g = build_step_graph(get_model("llama2-70b"), 37, 1234, 3)
    arr = poly.arrays(3, 37, 1234)
    assert np.allclose(arr["flops"], [op.flops for op in g.ops], rtol=1e-12)
    assert np.allclose(arr["kv_bytes"], [op.kv_bytes for op in g.ops], rtol=1e-12)


@settings(max_examples=200, deadline=None)
@given(flops=st.floats(0, 1e13), nbytes=st.floats(0, 1e11), tokens=st.integers(0, 300),
       density=st.floats(0.01, 1.0), launches=st.integers(0, 3))
def test_roofline_arrays_equal_the_scalar_roofline(flops, nbytes, tokens, density, launches):
    dev = curve_device()
    want = roofline_time(dev, flops, nbytes, "fp16", tokens=tokens or None, density=density, launches=launches)
    got = roofline_arrays(dev, "fp16", flops, nbytes, tokens, density, launches)
    assert float(got["time_s"]) == pytest.approx(want.time_s, rel=1e-12, abs=1e-18)


# ---------------------------------------------------------------------- engine vs closed form
CASES = [
    ("ar", None, StrategyConfig()),
    ("ar", None, StrategyConfig(device="cpu")),
    ("medusa", "ghidorah-mbpp", StrategyConfig(tree_width=16)),
    ("medusa", "medusa-log", StrategyConfig(tree_width=64)),
    ("chain", "alpha:0.7", StrategyConfig(draft_depth=4)),
    ("chain", "alpha:0.7", StrategyConfig(draft_depth=3, draft_device="cpu")),   # across PCIe
]


@pytest.mark.parametrize("method,acceptance,config", CASES)
@pytest.mark.parametrize("context", [0, 200])
def test_engine_and_closed_form_agree_where_nothing_overlaps(method, acceptance, config, context):
    problem = Problem(get_model("vicuna-7b"), A100, load_acceptance(acceptance) if acceptance else None,
                      context=context)
    sim = simulate(problem, method, config, steps=3)
    assert abs(sim.step_diff_pct) < 1.0
    assert sim.engine_step_s == pytest.approx(sim.closed_form_step_s, rel=1e-9)


@pytest.mark.parametrize("method,acceptance,config", CASES)
def test_estimate_many_equals_estimate(method, acceptance, config):
    problem = Problem(get_model("vicuna-13b"), A100, load_acceptance(acceptance) if acceptance else None, batch=2)
    strategy = get_strategy(method)
    configs = [strategy.resolve(problem, config)]
    if method == "medusa":
        configs += [strategy.resolve(problem, StrategyConfig(tree_width=w)) for w in (1, 2, 7, 33)]
    many = strategy.estimate_many(problem, configs)
    for i, c in enumerate(configs):
        one = strategy.estimate(problem, c)
        assert many.step_s[i] == pytest.approx(one.step_s, rel=1e-12)
        assert many.tokens_per_step[i] == pytest.approx(one.tokens_per_step, rel=1e-12)


def test_chain_closed_form_is_dovetails_formula():
    # T_round = gamma * T_D + T_V(gamma) (+ transfers); tokens = Omega(gamma, alpha). The real loop adds one
    # thing: after a round that accepted all gamma drafts (share alpha^gamma) its first pass feeds two tokens.
    problem = Problem(get_model("vicuna-7b"), A100, load_acceptance("alpha:0.6"), context=100)
    strategy = get_strategy("chain")
    c = strategy.resolve(problem, StrategyConfig(draft_depth=5))
    est = strategy.estimate(problem, c)
    small = get_model("llama-68m")
    draft = sum(float(step_seconds(small, A100, "gpu", 1, 100 + j)) for j in range(5))
    lag = 0.6 ** 5 * float(step_seconds(small, A100, "gpu", 2, 100) - step_seconds(small, A100, "gpu", 1, 100))
    verify = float(step_seconds(get_model("vicuna-7b"), A100, "gpu", 6, 100))
    assert lag > 0
    assert est.step_s == pytest.approx(draft + lag + verify, rel=1e-12)
    assert est.tokens_per_step == pytest.approx((1 - 0.6 ** 6) / (1 - 0.6))


# ---------------------------------------------------------------------- invariants
def scaled(platform, device: str, bw: float = 1.0, flops: float = 1.0):
    d = platform.devices[device]
    new = replace(d, mem_bw_gbps=d.mem_bw_gbps * bw, peak_tflops={k: v * flops for k, v in d.peak_tflops.items()})
    domains = tuple(replace(m, bw_gbps=m.bw_gbps * bw) if device in m.devices else m for m in platform.memory_domains)
    return replace(platform, devices={**platform.devices, device: new}, memory_domains=domains)


@settings(max_examples=40, deadline=None)
@given(method=st.sampled_from(CASES), device=st.sampled_from(["gpu", "cpu"]), bw=st.floats(1.0, 10.0),
       flops=st.floats(1.0, 10.0), context=st.integers(1, 2000))
def test_more_bandwidth_or_flops_is_never_slower(method, device, bw, flops, context):
    name, acceptance, config = method
    acc = load_acceptance(acceptance) if acceptance else None
    strategy = get_strategy(name)
    base = Problem(get_model("vicuna-7b"), A100, acc, context=context)
    fast = replace(base, platform=scaled(A100, device, bw, flops))
    c = strategy.resolve(base, config)
    slow_s, fast_s = strategy.estimate(base, c).step_s, strategy.estimate(fast, c).step_s
    assert fast_s <= slow_s * (1 + 1e-12)
    eng_slow = simulate(base, name, c, steps=1, op_records=False).engine_step_s
    eng_fast = simulate(fast, name, c, steps=1, op_records=False).engine_step_s
    assert eng_fast <= eng_slow * (1 + 1e-12)


# ---------------------------------------------------------------------- concurrent parts
def three_device_platform():
    from hwmodels.platform import MemoryDomain, Platform

    def dev(name, kind, bw):
        return Device(name=name, kind=kind, peak_tflops={"fp16": 1.0}, mem_bw_gbps=bw, mem_capacity_gb=16,
                      bw_efficiency=0.9, compute_efficiency=1.0, op_overhead_us=0.0, token_tile=1,
                      sparse_attn_efficiency=0.0)

    return Platform("soc", "t", {"cpu": dev("cpu", "cpu", 30.0), "gpu": dev("gpu", "gpu", 50.0),
                                 "npu": dev("npu", "npu", 20.0)},
                    memory_domains=(MemoryDomain("dram", ("cpu", "gpu", "npu"), 51.2, 16, 0.85),))


@settings(max_examples=80, deadline=None)
@given(parts=st.lists(st.tuples(st.floats(0, 0.05), st.floats(0, 1.0).map(lambda v: v if v > 1e-9 else 0.0),
                                st.floats(0, 40.0).map(lambda v: v if v > 1e-9 else 0.0)), min_size=3, max_size=3),
       skip=st.integers(0, 3))
def test_concurrent_seconds_equals_the_engine(parts, skip):
    from sim.concurrent_parts import concurrent_seconds
    from sim.engine import run_plans
    from sim.plan import StepPlan, Task

    plat = three_device_platform()
    devices = ("cpu", "gpu", "npu")
    fixed = np.array([p[0] for p in parts])
    comp = np.array([p[1] for p in parts])
    nbytes = np.array([p[2] * 1e9 for p in parts])
    if skip < 3:                     # one part with no work at all
        fixed[skip] = comp[skip] = nbytes[skip] = 0.0
    tasks = tuple(Task(f"t{i}", "compute", d, "verify", compute_s=comp[i], nbytes=nbytes[i], fixed_s=fixed[i])
                  for i, d in enumerate(devices))
    ends = {r.task.name: r.end_s for r in run_plans(plat, [StepPlan(tasks, tokens_accepted=1)]).task_runs}
    got = concurrent_seconds(plat, devices, fixed, comp, nbytes)
    assert np.allclose(got, [ends[f"t{i}"] for i in range(3)], rtol=1e-9, atol=1e-12)


def test_concurrent_seconds_is_vectorised_and_max_min_matches_hwmodels():
    from hwmodels.contention import share_bandwidth
    from sim.concurrent_parts import concurrent_seconds, max_min_shares

    rng = np.random.default_rng(1)
    demands = rng.random((50, 4)) * 10
    ceilings = rng.random(50) * 25
    shares = max_min_shares(ceilings[:, None][:, 0], demands)
    for row, cap, got in zip(demands, ceilings, shares):
        want = share_bandwidth(cap, dict(enumerate(row)))
        assert np.allclose(got, [want[i] for i in range(4)])
    plat = three_device_platform()
    out = concurrent_seconds(plat, ("cpu", "gpu"), rng.random((7, 5, 2)) * 0.01, rng.random((7, 5, 2)),
                             rng.random((7, 5, 2)) * 1e10)
    assert out.shape == (7, 5, 2) and np.all(out > 0)
    with pytest.raises(HetSpecError, match="one part per device"):
        concurrent_seconds(plat, ("cpu", "cpu"), [0, 0], [1, 1], [0, 0])


@settings(max_examples=150, deadline=None)
@given(parts=st.lists(st.tuples(st.floats(0, 0.05).map(lambda v: v if v > 1e-9 else 0.0),
                                st.floats(0, 1.0).map(lambda v: v if v > 1e-9 else 0.0),
                                st.floats(0, 40.0).map(lambda v: v if v > 1e-9 else 0.0)), min_size=2, max_size=2),
       ceiling=st.floats(5.0, 200.0), devices=st.sampled_from([("cpu", "gpu"), ("gpu", "cpu"), ("npu", "gpu")]))
def test_two_part_closed_form_equals_the_engine(parts, ceiling, devices):
    from hwmodels.platform import MemoryDomain
    from sim.concurrent_parts import concurrent_seconds
    from sim.engine import run_plans
    from sim.plan import StepPlan, Task

    plat = replace(three_device_platform(), memory_domains=(MemoryDomain("dram", ("cpu", "gpu", "npu"), ceiling, 16,
                                                                         0.85),))
    fixed, comp, nbytes = (np.array(v, dtype=float) for v in zip(*parts))
    nbytes = nbytes * 1e9
    tasks = tuple(Task(f"t{i}", "compute", d, "verify", compute_s=comp[i], nbytes=nbytes[i], fixed_s=fixed[i])
                  for i, d in enumerate(devices))
    ends = {r.task.name: r.end_s for r in run_plans(plat, [StepPlan(tasks, tokens_accepted=1)]).task_runs}
    got = concurrent_seconds(plat, devices, fixed, comp, nbytes)
    assert np.allclose(got, [ends["t0"], ends["t1"]], rtol=1e-9, atol=1e-12)
