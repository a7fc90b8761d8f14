"""``offload``: layer-pipelined weight streaming and llama.cpp-style split; invariants, engine = closed
form, the memory budget and clear errors."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hwmodels.errors import HetSpecError, UnknownNameError
from hwmodels.loader import get_platform
from sim.closed_form import step_seconds
from sim.engine import simulate
from sim.model_spec import get_model
from sim.strategies import get_strategy
from sim.strategies.base import Problem, StrategyConfig
from sim.strategies.offload import layer_bytes, max_resident_layers

A = get_platform("xeon4214r-rtx2080super")      # 8 GB GPU on PCIe 3
B = get_platform("xeon4310-rtx3090")            # 24 GB GPU on PCIe 4
LLAMA = get_model("llama2-7b")
OFFLOAD = get_strategy("offload")


def problem(platform=A, **kw) -> Problem:
    return Problem(LLAMA, platform, None, context=kw.pop("context", 256), dtype=kw.pop("dtype", "fp16"))


def resolved(p, **options):
    return OFFLOAD.resolve(p, StrategyConfig(options=options))


def faster_link(platform, factor):
    return replace(platform, links=tuple(replace(l, bw_gbps=l.bw_gbps * factor) for l in platform.links))


def test_more_resident_layers_never_slower():
    p = problem()
    top = max_resident_layers(p, "gpu")
    steps = [OFFLOAD.estimate(p, resolved(p, resident_layers=r)).step_s for r in range(top + 1)]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(steps, steps[1:]))
    assert steps[-1] < 0.6 * steps[0]


@pytest.mark.parametrize("source", ["host", "storage"])
def test_faster_links_never_slower(source):
    slow, fast = problem(), problem(faster_link(A, 2.0))
    for r in (0, 6):
        t_slow = OFFLOAD.estimate(slow, resolved(slow, resident_layers=r, source=source)).step_s
        t_fast = OFFLOAD.estimate(fast, resolved(fast, resident_layers=r, source=source)).step_s
        assert t_fast <= t_slow and t_fast < 0.6 * t_slow   # load-bound: twice the bandwidth, ~half the time


def test_streaming_everything_tends_to_dovetails_P_over_B_eta():
    # Dovetail §II: T_offload ~ max(T_compute, P / (B_pcie eta_pcie)); loading dominates on PCIe
    p = problem()
    link = A.link("cpu", "gpu")
    bound = LLAMA.n_layers * link.transfer_s(layer_bytes(LLAMA, "fp16"))
    est = OFFLOAD.estimate(p, resolved(p, resident_layers=0))
    compute = est.breakdown["decode"]
    assert bound <= est.step_s <= bound + compute
    assert est.step_s == pytest.approx(bound, rel=0.05)


def test_all_layers_resident_is_the_plain_step_on_the_device():
    p = problem(B)                                  # 13.5 GB of fp16 fit in 24 GB
    cfg = resolved(p)
    assert cfg.options["resident_layers"] == LLAMA.n_layers
    assert OFFLOAD.estimate(p, cfg).step_s == pytest.approx(float(step_seconds(p.model, B, "gpu", 1, 256)), rel=1e-9)
    assert not [t for t in OFFLOAD.plan(p, cfg).tasks if t.phase == "load"]


def test_budget_limits_resident_layers():
    p = problem()
    full = resolved(p).options["resident_layers"]
    small = resolved(p, mem_budget_gb=4.0).options["resident_layers"]
    assert 0 < small < full < LLAMA.n_layers
    assert (small + 2) * layer_bytes(LLAMA, "fp16") < 4.0e9           # two streaming buffers fit too


@pytest.mark.parametrize("options", [
    {"resident_layers": 0}, {"resident_layers": 9}, {"resident_layers": 0, "source": "storage"},
    {"resident_layers": 14, "mode": "split", "cpu_dtype": "fp32"}, {"resident_layers": 0, "mode": "split"},
])
def test_engine_equals_closed_form(options):
    p = problem()
    sim = simulate(p, "offload", resolved(p, **options), steps=2)
    assert abs(sim.step_diff_pct) < 1e-7


def test_split_mode_puts_the_other_layers_on_the_cpu():
    p = problem()
    fp32 = OFFLOAD.estimate(p, resolved(p, resident_layers=14, mode="split", cpu_dtype="fp32"))
    fp16 = OFFLOAD.estimate(p, resolved(p, resident_layers=14, mode="split", cpu_dtype="fp16"))
    more = OFFLOAD.estimate(p, resolved(p, resident_layers=16, mode="split", cpu_dtype="fp32"))
    assert fp16.step_s < fp32.step_s and more.step_s < fp32.step_s
    assert fp32.breakdown["cpu"] > fp32.breakdown["decode"]


@pytest.mark.parametrize("options,error,message", [
    ({"resident_layers": 30}, HetSpecError, r"30 resident layers of llama2-7b do not fit .* \(at most \d+\)"),
    ({"resident_layers": 40}, HetSpecError, r"resident_layers must be an integer in \[0, 32\]"),
    ({"mode": "swap"}, UnknownNameError, "unknown offload mode 'swap'"),
    ({"source": "cloud"}, UnknownNameError, "unknown offload source 'cloud'"),
    ({"mem_budget_gb": 0}, HetSpecError, "mem_budget_gb must be a number > 0"),
    ({"mem_budget_gb": 0.1}, HetSpecError, "alone do not fit in 0.1 GB"),
])
def test_bad_options_are_one_line(options, error, message):
    with pytest.raises(error, match=message) as info:
        resolved(problem(), **options)
    assert "\n" not in str(info.value)


def test_streaming_from_host_memory_to_the_host_is_refused():
    p = problem()
    with pytest.raises(HetSpecError, match="needs a device other than the host CPU") as info:
        OFFLOAD.resolve(p, StrategyConfig(device="cpu", options={"mem_budget_gb": 4.0}))
    assert "\n" not in str(info.value)
    cfg = OFFLOAD.resolve(p, StrategyConfig(device="cpu", options={"mem_budget_gb": 4.0, "source": "storage"}))
    assert OFFLOAD.estimate(p, cfg).breakdown["load"] > 0
