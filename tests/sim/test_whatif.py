"""What-if scalings: the numbers they move, the ones they leave, and the ranges they refuse."""

from __future__ import annotations

import pytest

from hwmodels.errors import HetSpecError
from hwmodels.loader import get_platform
from sim.acceptance_loader import load_acceptance
from sim.model_spec import get_model
from sim.optimizer import optimize
from sim.strategies.base import Problem
from sim.whatif import MAX_PROBABILITY, SCALE_RANGE, WhatIf, scale_acceptance, scale_platform


def test_nothing_scaled_is_the_preset_itself():
    platform = get_platform("jetson-xavier-nx")
    assert scale_platform(platform, WhatIf()) is platform
    acc = load_acceptance("ghidorah-mbpp")
    assert scale_acceptance(acc, 1.0) is acc


def test_memory_bandwidth_scales_devices_and_shared_domains_only():
    base = get_platform("jetson-xavier-nx")
    scaled = scale_platform(base, WhatIf(mem_bw=2.0))
    for name, d in base.devices.items():
        assert scaled.devices[name].mem_bw_gbps == pytest.approx(2 * d.mem_bw_gbps)
        assert scaled.devices[name].peak_tflops == d.peak_tflops
        assert "x2 in a what-if" in scaled.devices[name].sources["mem_bw_gbps"]
    assert [m.bw_gbps for m in scaled.memory_domains] == pytest.approx([2 * m.bw_gbps for m in base.memory_domains])
    assert [l.bw_gbps for l in scaled.links] == [l.bw_gbps for l in base.links]
    assert "mem bw x2" in scaled.name


def test_flops_and_links_scale_their_own_numbers():
    base = get_platform("xeon4214r-rtx2080super")
    scaled = scale_platform(base, WhatIf(peak_flops=0.5, link_bw=3.0))
    gpu, gpu0 = scaled.device("gpu"), base.device("gpu")
    assert {k: v * 0.5 for k, v in gpu0.peak_tflops.items()} == pytest.approx(dict(gpu.peak_tflops))
    assert gpu.mem_bw_gbps == gpu0.mem_bw_gbps
    assert [l.bw_gbps for l in scaled.links] == pytest.approx([3 * l.bw_gbps for l in base.links])


def test_a_faster_memory_makes_memory_bound_decoding_faster():
    model, acc = get_model("vicuna-7b"), load_acceptance("ghidorah-mbpp")
    base = get_platform("jetson-xavier-nx-204mhz")
    slow = optimize(Problem(model, base, acc), "medusa").best["tokens_per_s"]
    fast = optimize(Problem(model, scale_platform(base, WhatIf(mem_bw=2.0)), acc), "medusa").best["tokens_per_s"]
    assert fast > slow * 1.2


@pytest.mark.parametrize("name", ["ghidorah-mbpp", "medusa-log", "dovetail-mtbench", "alspec-llama3.1-8b",
                                  "alpha:0.8"])
def test_scaled_acceptance_moves_every_form_it_holds(name):
    acc = load_acceptance(name)
    up, down = scale_acceptance(acc, 1.2), scale_acceptance(acc, 0.5)
    if acc.medusa_accuracy is not None:
        assert sum(down.medusa_accuracy[0]) == pytest.approx(0.5 * sum(acc.medusa_accuracy[0]))
        assert all(sum(row) <= MAX_PROBABILITY + 1e-12 for row in up.medusa_accuracy)
    if acc.draft_alpha is not None:
        assert down.draft_alpha == pytest.approx(0.5 * acc.draft_alpha)
        assert up.draft_alpha <= MAX_PROBABILITY
    if acc.length_table is not None:
        for (w, l0), (_, l1) in zip(acc.length_table, down.length_table):
            assert l1 == pytest.approx(1 + (l0 - 1) * 0.5)
    if acc.tau_entries is not None:
        assert down.tau_entries[0].tau == pytest.approx(1 + (acc.tau_entries[0].tau - 1) * 0.5)
    if acc.alspec_hit_rates is not None:
        task = next(iter(acc.alspec_hit_rates))
        lam = next(iter(acc.alspec_hit_rates[task]))
        assert down.alspec_hit_rates[task][lam] == pytest.approx(0.5 * acc.alspec_hit_rates[task][lam])
    assert up != acc and down != acc


def test_a_lower_acceptance_lowers_the_predicted_speed():
    problem = Problem(get_model("vicuna-7b"), get_platform("jetson-xavier-nx"), load_acceptance("ghidorah-mbpp"))
    lower = Problem(problem.model, problem.platform, scale_acceptance(problem.acceptance, 0.5))
    assert optimize(lower, "medusa").best["tokens_per_s"] < optimize(problem, "medusa").best["tokens_per_s"]


@pytest.mark.parametrize("field", ["mem_bw", "peak_flops", "link_bw", "acceptance"])
@pytest.mark.parametrize("value", [SCALE_RANGE[0] / 2, SCALE_RANGE[1] * 2, float("nan"), True, "2"])
def test_a_scale_out_of_range_is_one_line(field, value):
    with pytest.raises(HetSpecError, match=f"what-if scale {field} must be a number in"):
        WhatIf(**{field: value})
