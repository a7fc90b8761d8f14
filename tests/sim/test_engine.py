"""The SimPy engine: timing of tasks alone and together, fluid contention, deterministic order,
the trace it writes, and the invariants (contention never faster, more bandwidth never slower)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels.errors import HetSpecError
from hwmodels.loader import get_platform
from hwmodels.platform import Device, Link, MemoryDomain, Platform
from sim.engine import run_plans, simulate
from sim.model_spec import get_model
from sim.plan import StepPlan, Task, delay_task, graph_tasks, op_task, transfer_task
from sim.step_graph import build_step_graph
from sim.strategies.base import Problem
from sim.trace import summarize
from sim.trace_files import read_trace, write_trace

GB = 1e9


def device(name: str, kind: str, bw_gbps: float = 40.0, tflops: float = 1.0, overhead_us: float = 0.0) -> Device:
    return Device(name=name, kind=kind, peak_tflops={"fp16": tflops}, mem_bw_gbps=bw_gbps, mem_capacity_gb=64,
                  bw_efficiency=1.0, compute_efficiency=1.0, op_overhead_us=overhead_us, token_tile=1,
                  sparse_attn_efficiency=0.0)


def shared_platform(ceiling_gbps: float = 50.0, bw_gbps: float = 40.0, contention_efficiency: float = 1.0,
                    cpu_tflops: float = 1.0, gpu_tflops: float = 1.0) -> Platform:
    """A CPU and a GPU that share one DRAM domain, joined by a unified-memory link."""
    return Platform("shared", "test platform", {"cpu": device("cpu", "cpu", bw_gbps, cpu_tflops),
                                                "gpu": device("gpu", "gpu", bw_gbps, gpu_tflops)},
                    links=(Link("umem", "unified", "cpu", "gpu", 10.0, 5.0, 1.0),),
                    memory_domains=(MemoryDomain("dram", ("cpu", "gpu"), ceiling_gbps, 64, contention_efficiency),))


def separate_domains(platform: Platform) -> Platform:
    """The same devices, each with memory of its own (no contention)."""
    return replace(platform, memory_domains=())


def end_times(run) -> dict[str, float]:
    return {r.task.name: r.end_s for r in run.task_runs}


# ---------------------------------------------------------------------- timing
def test_task_alone_takes_its_roofline_time():
    plat = shared_platform()
    t = Task("a", "compute", "cpu", "decode", compute_s=0.3, nbytes=20 * GB, fixed_s=0.01)
    run = run_plans(plat, [StepPlan((t,), tokens_accepted=1, count_phase="decode")])
    assert run.step_s[0] == pytest.approx(0.01 + max(0.3, 20 / 40))
    assert run.step_s[0] == pytest.approx(t.alone_s(plat))


def test_two_memory_bound_tasks_share_the_domain_max_min():
    # alone each streams 40 GB/s; together the domain gives 50 GB/s, 25 each, until b is done:
    # b: 20 GB at 25 GB/s = 0.8 s; a: 20 GB by then, the other 20 GB alone at 40 GB/s -> 1.3 s
    plat = shared_platform()
    a = Task("a", "compute", "cpu", "verify", compute_s=0.1, nbytes=40 * GB)
    b = Task("b", "compute", "gpu", "verify", compute_s=0.1, nbytes=20 * GB)
    ends = end_times(run_plans(plat, [StepPlan((a, b), tokens_accepted=1)]))
    assert ends["b"] == pytest.approx(0.8)
    assert ends["a"] == pytest.approx(1.3)


def test_compute_bound_neighbour_takes_only_what_it_needs():
    # b is compute-bound: 1 s of compute for 10 GB -> demands 10 GB/s; a gets the remaining 40 of 50
    plat = shared_platform()
    a = Task("a", "compute", "cpu", "verify", compute_s=0.01, nbytes=40 * GB)
    b = Task("b", "compute", "gpu", "verify", compute_s=1.0, nbytes=10 * GB)
    ends = end_times(run_plans(plat, [StepPlan((a, b), tokens_accepted=1)]))
    assert ends["a"] == pytest.approx(1.0)      # 40 GB at its full 40 GB/s: no slowdown
    assert ends["b"] == pytest.approx(1.0)


def test_contention_efficiency_lowers_the_shared_ceiling():
    plat = shared_platform(ceiling_gbps=50.0, contention_efficiency=0.8)   # 40 GB/s together
    a = Task("a", "compute", "cpu", "verify", nbytes=20 * GB)
    b = Task("b", "compute", "gpu", "verify", nbytes=20 * GB)
    ends = end_times(run_plans(plat, [StepPlan((a, b), tokens_accepted=1)]))
    assert ends["a"] == pytest.approx(1.0) and ends["b"] == pytest.approx(1.0)   # 20 GB/s each


def test_transfer_takes_latency_plus_bytes_over_bandwidth_and_delay_holds_nothing():
    plat = shared_platform()
    t = transfer_task(plat, "cpu", "gpu", 5 * GB, "x")          # 5 us + 5 GB at 10 GB/s
    d = delay_task("sync", 0.2, deps=("x",))
    c = Task("c", "compute", "gpu", "verify", compute_s=0.1)    # runs in parallel with the transfer
    ends = end_times(run_plans(plat, [StepPlan((t, d, c), tokens_accepted=1)]))
    assert ends["x"] == pytest.approx(0.5 + 5e-6)
    assert ends["sync"] == pytest.approx(0.7 + 5e-6)
    assert ends["c"] == pytest.approx(0.1)


def test_one_task_at_a_time_per_device():
    plat = shared_platform()
    a = Task("a", "compute", "gpu", "verify", compute_s=0.5)
    b = Task("b", "compute", "gpu", "verify", compute_s=0.25)
    run = run_plans(plat, [StepPlan((a, b), tokens_accepted=1)])
    ends = end_times(run)
    assert ends["a"] == pytest.approx(0.5) and ends["b"] == pytest.approx(0.75)


def test_steps_run_one_after_another():
    plat = shared_platform()
    plan = StepPlan((Task("a", "compute", "gpu", "decode", compute_s=0.5),), tokens_accepted=1, count_phase="decode")
    run = run_plans(plat, [plan, plan, plan])
    assert run.step_start_s == pytest.approx((0.0, 0.5, 1.0))
    assert run.total_s == pytest.approx(1.5)


# ---------------------------------------------------------------------- deterministic order
def _tie_plan(first_dep: str, prio_a: int, prio_b: int) -> StepPlan:
    """Two deps finish at the same instant on two devices; A and B then compete for the GPU."""
    d1 = Task("d1", "compute", "cpu", "draft", compute_s=0.25)
    d2 = Task("d2", "compute", "gpu", "draft", compute_s=0.25)
    deps = {"d1": ("d1",), "d2": ("d2",)}
    other = "d2" if first_dep == "d1" else "d1"
    a = Task("A", "compute", "gpu", "verify", compute_s=0.5, deps=deps[first_dep], priority=prio_a)
    b = Task("B", "compute", "gpu", "verify", compute_s=0.5, deps=deps[other], priority=prio_b)
    return StepPlan((d1, d2, a, b), tokens_accepted=1)


@pytest.mark.parametrize("first_dep", ["d1", "d2"])
def test_simultaneous_ready_tasks_start_by_priority_whatever_finished_first(first_dep):
    # B has the better (lower) priority: it goes first although A comes first in the plan and
    # whichever of the two simultaneous completions SimPy happens to process first.
    run = run_plans(shared_platform(), [_tie_plan(first_dep, prio_a=1, prio_b=0)])
    starts = {r.task.name: r.start_s for r in run.task_runs}
    assert starts["B"] == pytest.approx(0.25) and starts["A"] == pytest.approx(0.75)


@pytest.mark.parametrize("first_dep", ["d1", "d2"])
def test_equal_priorities_start_in_plan_order(first_dep):
    run = run_plans(shared_platform(), [_tie_plan(first_dep, prio_a=0, prio_b=0)])
    starts = {r.task.name: r.start_s for r in run.task_runs}
    assert starts["A"] == pytest.approx(0.25) and starts["B"] == pytest.approx(0.75)


def test_runs_are_reproducible_record_for_record():
    problem = Problem(get_model("vicuna-7b"), get_platform("a100-80gb-pcie"), context=128)
    first = simulate(problem, "ar", steps=3).run.records
    again = simulate(problem, "ar", steps=3).run.records
    assert first == again


# ---------------------------------------------------------------------- plans
def test_plan_rejects_bad_input_with_one_line():
    t = Task("a", "compute", "gpu", "verify", compute_s=1.0)
    with pytest.raises(HetSpecError, match="not an earlier task"):
        StepPlan((t.with_deps("b"), Task("b", "compute", "gpu", "verify")), tokens_accepted=1)
    with pytest.raises(HetSpecError, match="appears twice"):
        StepPlan((t, t), tokens_accepted=1)
    with pytest.raises(HetSpecError, match="phase 'think' unknown"):
        Task("x", "compute", "gpu", "think")
    with pytest.raises(HetSpecError, match="at least one token"):
        StepPlan((t,), tokens_accepted=0)
    with pytest.raises(HetSpecError, match="no device 'tpu'"):
        run_plans(shared_platform(), [StepPlan((Task("x", "compute", "tpu", "verify", compute_s=1),),
                                                tokens_accepted=1)])


# ---------------------------------------------------------------------- trace
def test_trace_counting_rule_and_files(tmp_path):
    problem = Problem(get_model("llama-68m"), get_platform("a100-80gb-pcie"), context=64)
    from sim.acceptance_loader import load_acceptance

    problem = replace(problem, acceptance=load_acceptance("ghidorah-mtbench"))
    sim = simulate(problem, "medusa", steps=7, seed=3, per_layer=True)
    records = sim.run.records
    carriers = [r for r in records if r.tokens_accepted > 0]
    assert len(carriers) == 7 and {r.step for r in carriers} == set(range(7))
    assert all(r.phase == "verify" and r.op == "" for r in carriers)
    assert sum(r.tokens_accepted for r in records) == sum(sim.run.tokens)
    assert summarize(records).tokens == sum(sim.run.tokens)
    assert any(r.op == "L0/q_proj" or r.op == "q_proj" for r in records)
    for suffix in (".csv", ".jsonl"):
        path = write_trace(records, tmp_path / f"t{suffix}")
        assert read_trace(path) == list(records)
    chrome = json.loads(write_trace(records, tmp_path / "t.json").read_text())
    assert {e["ph"] for e in chrome["traceEvents"]} == {"M", "X"}


def test_expected_tokens_become_integers_with_the_right_mean():
    plat = shared_platform()
    plan = StepPlan((Task("a", "compute", "gpu", "verify", compute_s=0.1),), tokens_accepted=2.37)
    run = run_plans(plat, lambda step: plan, 100)
    assert all(isinstance(t, int) and t >= 1 for t in run.tokens)
    assert sum(run.tokens) == 237


# ---------------------------------------------------------------------- invariants
def _chains(platform: Platform, works: list[tuple[str, float, float]]) -> StepPlan:
    """One chain of tasks per device (each after the previous on its device), then a join."""
    tasks, last = [], {}
    for i, (dev, compute_s, gbytes) in enumerate(works):
        deps = (last[dev],) if dev in last else ()
        tasks.append(Task(f"t{i}", "compute", dev, "verify", compute_s=compute_s, nbytes=gbytes * GB, deps=deps))
        last[dev] = f"t{i}"
    tasks.append(delay_task("join", 0.0, deps=tuple(last.values())))
    return StepPlan(tuple(tasks), tokens_accepted=1)


work_lists = st.lists(st.tuples(st.sampled_from(["cpu", "gpu"]), st.floats(0.0, 1.0), st.floats(0.0, 40.0)),
                      min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(works=work_lists, ceiling=st.floats(10.0, 100.0), eff=st.floats(0.5, 1.0))
def test_contention_never_makes_a_step_faster(works, ceiling, eff):
    plat = shared_platform(ceiling_gbps=ceiling, contention_efficiency=eff)
    plan = _chains(plat, works)
    shared = run_plans(plat, [plan]).step_s[0]
    alone = run_plans(separate_domains(plat), [plan]).step_s[0]
    assert shared >= alone * (1 - 1e-9)


@settings(max_examples=60, deadline=None)
@given(works=work_lists, scale=st.floats(1.0, 8.0))
def test_more_bandwidth_never_makes_concurrent_chains_slower(works, scale):
    base = shared_platform()
    faster = replace(base, devices={n: replace(d, mem_bw_gbps=d.mem_bw_gbps * scale) for n, d in base.devices.items()},
                     memory_domains=tuple(replace(m, bw_gbps=m.bw_gbps * scale) for m in base.memory_domains))
    plan = _chains(base, works)
    assert run_plans(faster, [plan]).step_s[0] <= run_plans(base, [plan]).step_s[0] * (1 + 1e-9)


def _split_plan(platform: Platform, model, ratio: float) -> StepPlan:
    """Every operator split by ``ratio`` (GPU share) between GPU and CPU, run side by side, with a
    barrier after each operator. An empty side is left out, so ratio 0 or 1 is one device alone."""
    graph = build_step_graph(model, 4, 64)
    tasks, prev = [], ()
    for op in graph.ops:
        parts = []
        for dev, share in (("gpu", ratio), ("cpu", 1.0 - ratio)):
            if share > 0:
                parts.append(op_task(op, platform, dev, graph.dtype, f"{op.name}/{dev}", "verify", prev,
                                     flops_scale=share, bytes_scale=share))
        tasks += parts
        if len(parts) > 1:
            tasks.append(delay_task(f"{op.name}/sync", 1e-4, deps=tuple(p.name for p in parts)))
            prev = (tasks[-1].name,)
        else:
            prev = (parts[0].name,)
    return StepPlan(tuple(tasks), tokens_accepted=1)


def test_split_ratio_zero_or_one_is_the_single_device_time_plus_nothing():
    plat = get_platform("a100-80gb-pcie")
    model = get_model("tinyllama-1.1b")
    graph = build_step_graph(model, 4, 64)
    for ratio, dev in ((1.0, "gpu"), (0.0, "cpu")):
        single = StepPlan(tuple(graph_tasks(graph, plat, dev, "v", "verify")), tokens_accepted=1)
        split = run_plans(plat, [_split_plan(plat, model, ratio)]).step_s[0]
        assert split == pytest.approx(run_plans(plat, [single]).step_s[0], rel=1e-12)
    middle = run_plans(plat, [_split_plan(plat, model, 0.5)]).step_s[0]
    assert middle > 0


def test_split_in_a_shared_domain_is_slower_than_in_separate_domains():
    plat = shared_platform(ceiling_gbps=50.0, bw_gbps=40.0, cpu_tflops=0.5, gpu_tflops=2.0)
    model = get_model("llama-68m")
    plan = _split_plan(plat, model, 0.6)
    shared = run_plans(plat, [plan]).step_s[0]
    alone = run_plans(separate_domains(plat), [plan]).step_s[0]
    assert shared > alone


def test_weights_stream_from_storage_over_the_storage_link():
    # A100 preset: NVMe 7 GB/s x 0.85, 80 us; loading 1 GB of weights while the GPU computes
    plat = get_platform("a100-80gb-pcie")
    load = transfer_task(plat, "storage", "cpu", 1 * GB, "load/w0", phase="load", kind="storage")
    compute = Task("c", "compute", "gpu", "verify", compute_s=0.05)
    after = Task("use", "compute", "gpu", "verify", compute_s=0.01, deps=("load/w0", "c"))
    run = run_plans(plat, [StepPlan((load, compute, after), tokens_accepted=1)])
    ends = end_times(run)
    assert ends["load/w0"] == pytest.approx(80e-6 + 1 / (7.0 * 0.85))
    assert ends["use"] == pytest.approx(ends["load/w0"] + 0.01)
    assert any(r.phase == "load" and r.device == "nvme" and r.op == "" for r in run.records)
