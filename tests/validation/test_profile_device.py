"""``hetspec calibrate --device D``: the measured operator profile of a torch device and its platform."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from cli_runner import run_cli
from hwmodels.errors import HetSpecError
from sim.model_spec import ModelSpec

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPEC = ModelSpec(name="probe", n_layers=1, hidden=64, intermediate=128, n_heads=4, n_kv_heads=2, vocab=256,
                 max_position=128, dtype="fp32", source="test")


@pytest.fixture(scope="module")
def tiny_profile(tmp_path_factory):
    from real.validation.profiler.profile_device import ProfileSettings, profile_device, write_device_profile

    settings = ProfileSettings(tokens=(1, 2, 8), attention_q=(1, 4), attention_keys=(8, 16), repeats=3, calls=5,
                               graph_copies=2)
    prof = profile_device("cpu", [SPEC], settings, progress=False)
    out = tmp_path_factory.mktemp("profile") / "probe-cpu"
    csv_path, toml_path = write_device_profile(prof, out, "hetspec calibrate --device cpu (test)")
    return prof, csv_path, toml_path


def test_a_profile_says_where_its_time_went(tiny_profile):
    """The parts of a profile's measurement, timed in order, add up to its whole time; the summary prints them."""
    from real.validation.profiler.profile_summary import summary_lines

    prof, csv_path, toml_path = tiny_profile
    assert list(prof.phase_seconds) == ["launch costs", "whole forwards", "operator rows", "launch inside a forward",
                                        "copy bandwidth"]                 # a CPU: no links, no decode loops
    assert all(v >= 0 for v in prof.phase_seconds.values()) and prof.phase_seconds["operator rows"] > 0
    assert sum(prof.phase_seconds.values()) == pytest.approx(prof.seconds, abs=0.5)
    line = next(x for x in summary_lines(prof, csv_path, toml_path) if x.startswith("  time: "))
    assert "operator rows" in line and "whole forwards" in line


def test_a_guarded_profile_retakes_the_rows_measured_while_the_probe_read_slow():
    from real.run.contention import Guard
    from real.validation.profiler.profile_device import ProfileSettings, contention_note, profile_device

    readings = iter([1.0, 0.5] + [1.0] * 10000)     # the first batch's closing probe reads slow
    settings = ProfileSettings(tokens=(1, 2), attention_q=(1,), attention_keys=(8,), repeats=1, calls=2,
                               graph_copies=2)
    guard = Guard(probe=lambda: next(readings), reference=1.0, pause_s=0.0, source="test")
    prof = profile_device("cpu", [SPEC], settings, progress=False, guard=guard)
    plain = profile_device("cpu", [SPEC], settings, progress=False)
    assert [r[:4] for r in prof.rows] == [r[:4] for r in plain.rows]        # the same rows, once each
    c = prof.contention
    assert c["retaken"] == 1 and c["retakes"] == 1 and c["kept_contended"] == 0 and c["lowest_probe"] == 0.5
    note = contention_note(c)       # what the written profile's notes and the summary say
    assert note.startswith("Contention guard") and "1 of" in note and "batches of about 2 s" in note


def test_the_bare_dispatch_is_its_fastest_sample(monkeypatch):
    """The one-element add that separates torch's dispatch from each row's kernel time is the first thing a profile
    times, when a process's first calls run slow (28 and 8 us, then 2.6 us, on the development machine): its
    fastest sample stands, not its median, which would leave a small linear's kernel time at zero. It takes the
    full profile's samples whatever the settings: one slow sample of two calls, subtracted from every row, once left
    every linear row of the tiny model at zero, and the profile could not be written. So do the whole forwards,
    which every price of their model adds up to."""
    from real.validation.profiler import call_timing
    from real.validation.profiler import profile_device as pd

    calls = []

    def wall_per_call(fn, device, n):     # the add's samples, then every call (operators, forwards) 10 us
        calls.append((fn, n))
        return {1: 30e-6, 2: 8e-6, 3: 2.5e-6}.get(len(calls), 10e-6)

    monkeypatch.setattr(call_timing, "wall_per_call", wall_per_call)
    monkeypatch.setattr(pd, "wall_per_call", wall_per_call)
    settings = pd.ProfileSettings(tokens=(1, 2), attention_q=(1,), attention_keys=(8,), repeats=1, calls=2)
    prof = pd.profile_device("cpu", [SPEC], settings, progress=False)
    full = pd.ProfileSettings()
    counts = [n for _, n in calls]
    assert counts[:full.repeats] == [full.calls] * full.repeats
    # so do the whole forwards behind the forward_rest rows (before and after the rows, at both token counts);
    # the operator rows take the settings' calls
    assert counts.count(full.calls) == full.repeats * (1 + 2 * 2) and set(counts[full.repeats:]) == {2, full.calls}
    assert len({fn for fn, _ in calls[:full.repeats]}) == 1
    assert prof.launch_us["eager"] == pytest.approx(2.5)
    linear = [row for row in prof.rows if row[0] == "linear"]
    assert linear and all(row[4] == pytest.approx(7.5) and row[5] == pytest.approx(2.5) for row in linear)


def test_the_profile_covers_the_step_graph_operators_at_every_token_count(tiny_profile):
    prof, csv_path, _ = tiny_profile
    from hwmodels.profile import read_profile

    profile = read_profile(csv_path)
    for key in (("linear", "64x64"), ("linear", "64x32"), ("linear", "64x128"), ("linear", "128x64"),
                ("linear", "64x256"), ("norm", "64"), ("add", "64"), ("act_mul", "128")):
        table = profile.table(*key)
        assert table is not None, key
        assert table.lines[0][1] == (1, 2, 8), key
    # every linear twice: on one weight (in the cache) and on a ring of weights streamed from memory
    for key in (("linear_streamed", "64x64"), ("linear_streamed", "64x256")):
        assert profile.table(*key).lines[0][1] == (1, 2, 8), key
    attention = profile.table("attention", "h4kv2d16")
    assert [keys for keys, *_ in attention.lines] == [8, 16]
    assert all(r[4] >= 0 for r in prof.rows)   # kernel microseconds
    # a CPU has no graphs: every row runs in eager mode, its dispatch kept apart from its kernel time
    assert "graph" not in prof.launch_us and prof.launch_us["eager"] > 0
    assert all(math.isnan(r[6]) for r in prof.rows) and all(r[5] >= 0 for r in prof.rows)


def test_the_platform_loads_and_prices_measured_rows_from_the_profile(tiny_profile):
    from hwmodels.loader import load_platform_file
    from sim.closed_form import step_seconds

    _, csv_path, toml_path = tiny_profile
    platform = load_platform_file(toml_path)
    device = platform.device("cpu")
    assert device.timing.profiled and device.timing.mode == "eager"
    assert device.timing.profile_file == csv_path.name          # relative to the platform file
    assert "hetspec calibrate --device cpu" in device.sources["mem_bw_gbps"]
    assert float(step_seconds(SPEC, platform, "cpu", 2, 8)) > 0


@pytest.mark.parametrize("resident", [False, True])
def test_a_model_larger_than_the_cache_is_priced_by_the_streamed_rows(tiny_profile, resident):
    from hwmodels.loader import load_platform_file
    from sim.closed_form import op_seconds
    from sim.op_timing import lookup_scalar, op_time
    from sim.step_graph import build_step_graph

    _, _, toml_path = tiny_profile
    dev = load_platform_file(toml_path).device("cpu")
    profile, mode = dev.timing.profile, dev.timing.mode
    table = "linear" if resident else "linear_streamed"
    graph = build_step_graph(SPEC, 2, 8)
    poly, per_op = op_seconds(SPEC, load_platform_file(toml_path), "cpu", 2, 8, resident=resident)
    for op in graph.ops:
        if op.table != "linear":
            continue
        kern, launch = lookup_scalar(profile, mode, table, op.shape, op.tokens)
        timing, source = op_time(op, dev, "fp32", resident=resident)
        assert source == "profile" and timing.time_s == pytest.approx(kern + launch, rel=1e-12)
        assert float(per_op[poly.names.index(op.name)]) == pytest.approx((kern + launch) * op.count, rel=1e-9)


def test_the_eager_launch_is_the_launch_inside_the_real_forward(tiny_profile):
    from hwmodels.loader import load_platform_file
    from real.validation.calibration.microbench import PROBE_CONTEXT
    from sim.step_graph import build_step_graph
    from sim.step_timing import price_step

    prof, _, toml_path = tiny_profile
    model, seconds = prof.forward
    dev = load_platform_file(toml_path).device("cpu")
    # every row carries the launch measured inside the forward, and the header says how it was found
    assert dev.op_overhead_us == pytest.approx(prof.forward_launch_us, rel=1e-3)
    for key in (("linear", "64x64"), ("norm", "64"), ("attention", "h4kv2d16")):
        for line in dev.timing.profile.table(*key).lines:
            assert all(v == pytest.approx(prof.forward_launch_us, rel=1e-5) for v in line[3]), key
    assert "inside the real path's forward" in dev.timing.profile.launch_sources["eager"]
    # so the profile prices the forward it was measured on at its measured time -- unless the kernels, timed at
    # another moment, left less than a bare dispatch per launch: then the bare dispatch, and the source says so
    priced = price_step(build_step_graph(model, 1, PROBE_CONTEXT), dev).total_s
    if prof.forward_launch_us > prof.launch_us["eager"] * (1 + 1e-6):
        assert priced == pytest.approx(seconds, rel=1e-3)
    else:
        assert prof.forward_launch_us == pytest.approx(prof.launch_us["eager"], rel=1e-3) and priced > seconds
        assert "the bare dispatch is kept" in dev.timing.profile.launch_sources["eager"]


def test_the_forward_rest_rows_price_each_profiled_forward_at_its_measured_time(tiny_profile):
    from hwmodels.loader import load_platform_file
    from hwmodels.profile import in_mode
    from real.validation.profiler.forward_launch import REST_CONTEXT, forward_rest_rows
    from sim.step_graph import build_step_graph, forward_key
    from sim.step_timing import price_step

    prof, _, toml_path = tiny_profile
    (spec, timed), = prof.forwards          # the model asked for, not the launch probe
    assert spec == SPEC and [t for t, _ in timed] == [1, 2, 8] and all(s > 0 for _, s in timed)
    dev = load_platform_file(toml_path).device("cpu")
    # the launch probe's own row: its forward set the launch, so its rows leave it no rest, to the rounding of the
    # launch the rows carry (a thousandth of a microsecond, over the forward's hundred-odd launches)
    # -- unless the launch was kept at the bare dispatch (see above): then the rows price the probe dearer than
    # it ran, and its rest is negative
    (probe,) = dev.timing.profile.table("forward_rest", forward_key(prof.forward[0])).lines
    assert probe[1] == (1,)
    if prof.forward_launch_us > prof.launch_us["eager"] * (1 + 1e-6):
        assert probe[3][0] == pytest.approx(0.0, abs=0.1)
    else:
        assert probe[3][0] < 0
    for tokens, seconds in timed:
        priced = price_step(build_step_graph(SPEC, tokens, REST_CONTEXT), dev)
        rest = {p.op.name: p for p in priced.ops}["forward_rest"]
        assert rest.source == "profile" and rest.timing.compute_s == 0.0
        # the rest is what the rows left of the measured forward, negative where the rows were timed slower (to
        # the rounding of the profile's 6-significant-digit microseconds: a few nanoseconds over the step's rows)
        assert priced.total_s == pytest.approx(seconds, rel=1e-6, abs=1e-8)
    # a forward faster than its rows gives a negative rest, the forward priced at its measured time; a graph
    # replays none of it
    for graphs, graph_cell in ((False, math.nan), (True, 0.0)):
        (row,) = forward_rest_rows(dev, [(SPEC, [(2, 1e-9)])], graphs=graphs)
        # what the device prices for the forward (here its rest rows too) comes off the measured time
        priced_s = price_step(build_step_graph(SPEC, 2, REST_CONTEXT), in_mode(dev, "eager", "test")).total_s
        assert row[:5] == ("forward_rest", forward_key(SPEC), 2, 0, 0.0)
        assert row[5] == pytest.approx((1e-9 - priced_s) * 1e6, rel=1e-6) and row[5] < 0
        assert (math.isnan(row[6]) and math.isnan(graph_cell)) or row[6] == graph_cell


def test_every_timed_forward_sample_follows_untimed_calls_of_the_same_forward(monkeypatch):
    from real.validation.profiler import forward_launch

    calls: list[int] = []      # token count of every forward run, timed or not
    timed: list[tuple[int, int]] = []
    real_step = forward_launch.forward_step

    def counting_step(model, cache, tokens):
        step = real_step(model, cache, tokens)

        def run():
            calls.append(tokens)
            return step()
        run.tokens = tokens
        return run

    def time_calls(fn, n):
        timed.append((fn.tokens, len(calls)))
        for _ in range(n):
            fn()
        return 1e-3

    monkeypatch.setattr(forward_launch, "forward_step", counting_step)
    out, = forward_launch.time_model_forwards([SPEC], torch.device("cpu"), torch.float32, (1, 2, 8, 100), time_calls,
                                              calls=3, repeats=2)
    assert [t for t, _ in out] == [1, 2, 8] and all(s == [1e-3, 1e-3] for _, s in out)   # 64 + 100 > 128 positions
    for tokens, before in timed:   # the calls just before each sample: the same forward, WARM_CALLS of them
        assert calls[before - forward_launch.WARM_CALLS:before] == [tokens] * forward_launch.WARM_CALLS


def test_the_models_forwards_are_timed_interleaved_so_they_see_the_same_machine(monkeypatch):
    """Two models' forwards in one rotation: every repeat visits both models before the next repeat starts, so a
    machine that slows down half way slows both models' samples alike and keeps their ratio."""
    from real.validation.profiler import forward_launch

    wider = replace(SPEC, name="wider", hidden=2 * SPEC.hidden, intermediate=2 * SPEC.intermediate)
    real_step = forward_launch.forward_step
    seen: list = []

    def tagged_step(model, cache, tokens):
        step = real_step(model, cache, tokens)
        step.tag = (model.spec.name, tokens)
        return step

    def time_calls(fn, n):        # the machine runs at half speed from the second repeat on
        seen.append(fn.tag)
        pace = 1.0 if len(seen) <= 4 else 2.0
        return pace * (2e-3 if fn.tag[0] == "wider" else 1e-3)

    monkeypatch.setattr(forward_launch, "forward_step", tagged_step)
    small, wide = forward_launch.time_model_forwards([SPEC, wider], torch.device("cpu"), torch.float32, (1, 2),
                                                     time_calls, calls=1, repeats=2)
    assert sorted(seen[:4]) == sorted([(SPEC.name, 1), (SPEC.name, 2), ("wider", 1), ("wider", 2)])
    assert sorted(seen[4:]) == sorted(seen[:4])
    for (t, a), (u, b) in zip(small, wide):
        assert t == u and [y / x for x, y in zip(sorted(a), sorted(b))] == [2.0, 2.0]


def test_the_warm_up_lasts_its_calls_and_its_time():
    from real.validation.profiler.forward_launch import warm_up

    def clocked(step_s):
        now, calls = [0.0], []

        def step():
            now[0] += step_s
            calls.append(1)
        return step, (lambda: now[0]), calls

    step, clock, calls = clocked(0.001)     # a 1 ms forward: 20 calls fill 20 ms
    assert warm_up(step, min_calls=2, min_s=0.02, clock=clock) == 20 == len(calls)
    step, clock, calls = clocked(0.05)      # a 50 ms forward: the two calls already last longer
    assert warm_up(step, min_calls=2, min_s=0.02, clock=clock) == 2 == len(calls)


def test_forwards_timed_before_and_after_the_rows_are_pooled():
    from real.validation.profiler.forward_launch import bracketed_forwards

    before, after = [(1, [1.0, 2.0, 9.0]), (2, [4.0])], [(1, [3.0, 3.5]), (2, [6.0, 5.0])]
    assert bracketed_forwards(before, after) == [(1, 3.0), (2, 5.0)]
    assert bracketed_forwards(before, []) == [(1, 2.0), (2, 4.0)]


def test_a_forward_of_more_tokens_is_never_kept_cheaper_than_a_shorter_one():
    """A median that reads below a shorter forward's (the machine's noise) is pooled with it, weighted by the
    samples: the fit is non-decreasing, and medians already in order are kept."""
    from real.validation.profiler.forward_launch import bracketed_forwards

    noisy = [(1, [5.0, 5.0, 5.0]), (2, [2.0]), (4, [6.0, 6.0]), (8, [7.0])]
    assert bracketed_forwards(noisy, []) == [(1, 4.25), (2, 4.25), (4, 6.0), (8, 7.0)]
    assert bracketed_forwards([(1, [1.0]), (4, [2.0]), (16, [2.0])], [(16, [])]) == [(1, 1.0), (4, 2.0), (16, 2.0)]


def test_a_launch_inside_the_forward_is_never_below_the_bare_dispatch(tiny_profile):
    from hwmodels.loader import load_platform_file
    from real.validation.profiler.forward_launch import eager_launch_in_forward

    prof, _, toml_path = tiny_profile
    dev = load_platform_file(toml_path).device("cpu")
    model, seconds = prof.forward
    # a forward timed faster than the profile's kernels (the machine sped up in between) keeps the bare dispatch
    launch, kernels, launches = eager_launch_in_forward(dev, (model, 1e-9), floor_s=2e-6)
    assert launch == pytest.approx(2e-6) and kernels > 1e-9 and launches > 0
    # a forward with room for its launches is priced by them
    slow = kernels + 50e-6 * launches
    assert eager_launch_in_forward(dev, (model, slow), floor_s=2e-6)[0] == pytest.approx(50e-6)


def test_a_streamed_linear_reads_the_next_weight_every_call():
    from real.validation.profiler.profile_device import op_callable, weight_ring

    ring = weight_ring("64x32", torch.device("cpu"), torch.float32, cache_bytes=64 * 32 * 4 * 2)
    assert len(ring) == 8     # four caches' worth of 8 KiB weights
    fn = op_callable("linear_streamed", "64x32", 1, 0, 256, torch.device("cpu"), torch.float32, ring)
    outs = [fn() for _ in range(len(ring) + 1)]
    assert not torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[len(ring)])
    with pytest.raises(HetSpecError, match="ring of at least two weights"):
        op_callable("linear_streamed", "64x32", 1, 0, 256, torch.device("cpu"), torch.float32)


def test_bad_devices_are_one_line():
    from real.validation.profiler.call_timing import parse_device

    with pytest.raises(HetSpecError, match="give cpu, cpuN, cuda or cuda:N"):
        parse_device("tpu")
    with pytest.raises(HetSpecError, match="core 4096 is not one this process may use"):
        parse_device("cpu4096")
    if not torch.cuda.is_available():
        with pytest.raises(HetSpecError, match="no CUDA device"):
            parse_device("cuda:0")


def test_cli_errors_are_one_line_exit_2():
    proc = run_cli("calibrate", "--dtype", "fp32")     # --models goes with either (tests/validation/test_calibrate_models.py)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "hetspec: error: --dtype goes with --device (the operator profile of a torch device)")
    proc = run_cli("calibrate", "--device", "tpu:0")
    assert proc.returncode == 2 and "give cpu, cpuN, cuda or cuda:N" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("calibrate", "--device", "cpu", "--strict")     # a profile has no spread to refuse on
    assert proc.returncode == 2 and proc.stderr.strip().startswith(
        "hetspec: error: --budget, --strict, --profile and --record go with the host calibration (without --device)")


def test_a_single_thread_worker_is_profiled_pinned_to_its_core_on_one_thread(tmp_path, monkeypatch):
    """``--device cpuN``: the worker the real path runs (pinned to core N, one torch thread), named in the
    profile, its platform and its file; the caller's threads and cores come back afterwards."""
    import os

    from hwmodels.loader import load_platform_file
    from real.run.worker import allowed_cores, can_pin
    from real.validation.profiler import profile_device as pd

    worker = f"cpu{allowed_cores()[0]}"
    seen = []

    def spy(device_text, models, settings, dtype, progress=True, guard=None, pairs=()):
        seen.append((torch.get_num_threads(), tuple(sorted(os.sched_getaffinity(0))) if can_pin() else None))
        return real(device_text, models, settings, dtype, progress=progress, guard=guard, pairs=pairs)

    real = pd.profile_device
    monkeypatch.setattr(pd, "profile_device", spy)
    monkeypatch.setattr(pd, "QUICK", pd.ProfileSettings(tokens=(1, 2, 8), attention_q=(1, 4), attention_keys=(8, 16),
                                                        repeats=1, calls=2, graph_copies=2))
    torch.set_num_threads(2)
    try:
        lines = pd.profile_and_write(worker, ["demo:tiny"], None, True, tmp_path / "w.toml", "test", progress=False)
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(1)
    assert seen[0][0] == 1 and after == 2
    if can_pin():
        assert seen[0][1] == (allowed_cores()[0],)
    assert lines[0].split(":")[0].endswith(f"({worker}), fp32")
    platform = load_platform_file(tmp_path / "w.toml")
    assert f"({worker})" in platform.description and platform.device("cpu").timing.profiled
    assert "1 torch threads" in (tmp_path / "w.csv").read_text()
    # the demo draft's passes inside both decode loops, both kinds of round, on the worker too
    from real.validation.profiler.draft_loop import PASSES, demo_pairs
    from sim.step_graph import forward_key

    profile = platform.device("cpu").timing.profile
    draft_key = forward_key(demo_pairs(["demo:tiny"])[0][1])
    for op in ("draft_pass_chain", "draft_pass_chain_full", "draft_pass_tree", "draft_pass_tree_full"):
        assert profile.table(op, draft_key).lines[0][1] == tuple(range(1, PASSES + 1))
    assert any(line.startswith("  draft_pass_chain of tiny-draft inside the decode loop") for line in lines)
    from real.validation.gpu_target import profiled_platform_name

    assert profiled_platform_name(worker) == f"profiled-{worker}"    # the file backends.profiled_variant reads


def test_the_calibration_profiles_the_first_cores_worker_beside_the_all_thread_cpu(tmp_path, monkeypatch):
    """``hetspec calibrate`` (full) writes ``profiled-cpu`` and, on a machine of several cores, the first allowed
    core's single-thread worker ``profiled-cpuN`` beside ``host.toml``, each with the host's cache for it."""
    from demo_helpers import host_platform_folder
    from hwmodels.loader import load_platform_file
    from real.run.worker import allowed_cores
    from real.validation.profiler import profile_device as pd
    from real.validation.calibration.cpu_profiles import profile_cpu_beside

    monkeypatch.setattr(pd, "QUICK", pd.ProfileSettings(tokens=(1, 2, 8), attention_q=(1, 4), attention_keys=(8, 16),
                                                        repeats=1, calls=2, graph_copies=2))
    monkeypatch.setattr(pd, "default_models", lambda device_text: ["demo:tiny"])
    host = f"{host_platform_folder(tmp_path)}/host.toml"
    torch.set_num_threads(2)
    try:
        lines = profile_cpu_beside(host, quick=True, progress=False, one_thread=True)
        only_cpu = profile_cpu_beside(host, quick=True, progress=False)      # hetspec demo's, and --quick's
    finally:
        torch.set_num_threads(1)
    folder = tmp_path / "platforms"
    assert sum(line.startswith("wrote ") for line in only_cpu) == 1
    assert load_platform_file(folder / "profiled-cpu.toml").device("cpu").timing.profiled
    if len(allowed_cores()) < 2:        # one core: no worker beside the all-thread device
        assert sum(line.startswith("wrote ") for line in lines) == 1
        return
    worker = f"cpu{allowed_cores()[0]}"
    assert f"wrote {folder / f'profiled-{worker}.csv'} and {folder / f'profiled-{worker}.toml'}" in lines
    platform = load_platform_file(folder / f"profiled-{worker}.toml")
    assert f"({worker})" in platform.description and platform.device("cpu").cache_gb == pytest.approx(0.032)
    assert "1 torch threads" in (folder / f"profiled-{worker}.csv").read_text()
    assert "2 torch threads" in (folder / "profiled-cpu.csv").read_text()


def test_a_standalone_full_cpu_profile_is_guarded_as_the_calibrations_are(monkeypatch, tmp_path):
    """``hetspec calibrate --device cpu|cpuN`` (full) times its rows under the contention guard, on the device's
    threads, its reference a GEMM rate timed now; ``--quick`` and a GPU go unguarded."""
    import argparse

    from real.run.contention import Guard
    from real.validation import commands, trust
    from real.validation.profiler import profile_device as pd

    seen, probed = [], []
    monkeypatch.setattr(pd, "profile_and_write", lambda *a, guard=None, **k: seen.append(guard) or [])
    monkeypatch.setattr(trust, "gemm_rate", lambda threads, *a: probed.append(threads) or 5e10)
    torch.set_num_threads(2)
    try:
        for device in ("cpu", "cpu0"):
            commands._profile_device(argparse.Namespace(device=device, models=None, dtype=None, quick=False, out=None))
    finally:
        torch.set_num_threads(1)
    assert all(isinstance(g, Guard) for g in seen) and [g.reference for g in seen] == [5e10, 5e10]
    assert probed == [2, 1] and "timed before the runs" in seen[0].source
    assert [g.give_up_s for g in seen] == [trust.GUARD_GIVE_UP_S] * 2      # cores that stay slowed stop it
    for device, quick in (("cpu", True), ("cuda:0", False)):
        commands._profile_device(argparse.Namespace(device=device, models=None, dtype=None, quick=quick, out=None))
        assert seen[-1] is None


@pytest.mark.parametrize("extra", [(), ("--device", "cpu")])
def test_a_platform_file_that_cannot_be_written_fails_before_measuring(tmp_path, extra):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = run_cli("calibrate", "--out", str(blocker / "host.toml"), *extra, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"hetspec: error: cannot write platform file {blocker / 'host.toml'}: {blocker} is a file, not a folder")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_profile_has_graph_and_eager_launch_costs(tmp_path):
    from real.validation.profiler.profile_device import ProfileSettings, profile_device

    settings = ProfileSettings(tokens=(1, 8), attention_q=(1,), attention_keys=(16,), repeats=1, calls=2,
                               graph_copies=4)
    prof = profile_device("cuda:0", [SPEC], settings, progress=False)
    assert {"eager", "graph"} <= set(prof.launch_us) and prof.links
    assert all(r[6] == 0.0 for r in prof.rows) and prof.graph_replay_us > 0


def test_a_profile_with_decode_loops_writes_their_cost_beyond_the_priced_forwards(tiny_profile, tmp_path):
    """The decode loops timed on a GPU (samples without host time: a forward's record there ends when the host
    has queued it) become the written platform's loop costs: what each step took beyond the profiled device's
    price of the probe's forwards and heads, fitted per step and per verified token (here on a CPU profile,
    through the same code)."""
    import copy
    from dataclasses import replace

    from hwmodels.loader import load_platform_file
    from real.validation.calibration.host_costs import _model_price
    from real.validation.calibration.microbench import LOOP_NEW_TOKENS, LOOP_PROMPT_TOKENS, LoopSample
    from real.validation.profiler.profile_device import write_device_profile
    from real.validation.profiler.profile_summary import summary_lines

    prof, _, toml_path = tiny_profile
    assert not load_platform_file(toml_path).loop_costs            # a CPU profile: the host's loops price it
    device = load_platform_file(toml_path).device("cpu")
    context = LOOP_PROMPT_TOKENS + LOOP_NEW_TOKENS // 2
    samples = []
    for w in (1, 8, 32):
        bare = LoopSample("medusa", w, step_s=0.0, passes=0.0, nodes=float(w), heads=3)
        samples.append(replace(bare, step_s=_model_price(device, bare, context) + 1e-6 * (700.0 + 4.0 * w)))
    looped = copy.copy(prof)
    looped.loops, looped.loop_repeats = tuple(samples), 3
    csv_path, toml_path = write_device_profile(looped, tmp_path / "looped", "hetspec calibrate --device cpu (test)")
    costs = load_platform_file(toml_path).loop_costs["cpu"]
    assert costs.costs_us == {"medusa_step": pytest.approx(700.0, abs=0.01), "medusa_node": pytest.approx(4.0, abs=1e-3)}
    assert "minus the model's price" in costs.sources["medusa_node"] and "median of 3" in costs.sources["medusa_node"]
    assert any("decode loops beyond their forwards on cpu" in line for line in summary_lines(looped, csv_path, toml_path))


def test_decode_loops_of_a_low_precision_profile_are_priced_in_its_dtype(tiny_profile, tmp_path):
    """A GPU profile is fp16 and its device has no fp32 peak: the probe's forwards, which ran in the profile's
    dtype, are priced in it (here a CPU profile labelled bf16, through the same code), not in the probe's fp32."""
    import copy
    from dataclasses import replace

    from hwmodels.loader import load_platform_file
    from real.validation.calibration.host_costs import _model_price
    from real.validation.calibration.microbench import LOOP_NEW_TOKENS, LOOP_PROMPT_TOKENS, LoopSample
    from real.validation.profiler.profile_device import write_device_profile

    low = copy.copy(tiny_profile[0])
    low.dtype = "bf16"
    low.forwards = [(spec.with_dtype("bf16"), timed) for spec, timed in low.forwards]   # as profile_device makes them
    _, toml_path = write_device_profile(low, tmp_path / "bare", "hetspec calibrate --device cpu --dtype bf16 (test)")
    device = load_platform_file(toml_path).device("cpu")
    assert set(device.peak_tflops) == {"bf16"}
    context = LOOP_PROMPT_TOKENS + LOOP_NEW_TOKENS // 2
    bare = LoopSample("ar", 0, step_s=0.0, passes=0.0, nodes=1.0, heads=0)
    with pytest.raises(HetSpecError, match="no peak FLOP/s for dtype 'fp32'"):
        _model_price(device, bare, context)
    low.loops = (replace(bare, step_s=_model_price(device, bare, context, "bf16") + 250e-6),)
    low.loop_repeats = 3
    _, toml_path = write_device_profile(low, tmp_path / "looped", "hetspec calibrate --device cpu --dtype bf16 (test)")
    costs = load_platform_file(toml_path).loop_costs["cpu"]
    assert costs.costs_us == {"ar_step": pytest.approx(250.0, abs=0.01)}
    assert ", bf16, " in costs.sources["ar_step"]


def test_the_probe_decode_loops_run_where_a_placement_puts_them():
    """On a CPU placement the loops keep their time outside the traced forwards; the knobs asked for are timed,
    on both probes (the wide one first)."""
    from real.model.placement import Placement
    from real.validation.calibration.microbench import decode_loop_samples

    samples = decode_loop_samples(1, 1, Placement("cpu", "fp32", graphs=False), configs={"ar": (0,), "medusa": (1, 8)})
    asked = [("ar", 0), ("medusa", 1), ("medusa", 8)]
    assert [(s.method, s.knob, s.shape) for s in samples] == ([(*a, "wide") for a in asked]
                                                              + [(*a, "narrow") for a in asked])
    assert all(s.host_s is not None and 0 < s.host_s < s.step_s for s in samples)
    assert samples[2].nodes == 8.0 and samples[1].nodes == 1.0
    wide, narrow = samples[:3], samples[3:]
    assert all(n.step_s < w.step_s for w, n in zip(wide, narrow))     # the narrow probe's forwards are cheaper


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_decode_loops_are_timed_with_graphs_and_fitted_as_the_residual():
    from real.validation.profiler.device_loops import device_loops
    from real.validation.profiler.profile_device import DeviceProfile

    prof = DeviceProfile(device="cuda:0", name="gpu", dtype="fp16")
    samples = device_loops(prof, 1, progress=False)
    assert {s.method for s in samples} == {"ar", "chain", "draft-tree", "medusa"}
    assert all(s.host_s is None and s.step_s > 0 for s in samples)


class _FakeCuda:
    type = "cuda"


def test_on_cuda_a_call_inside_a_graph_adds_nothing_and_the_replay_is_kept_apart(monkeypatch):
    """Kernel time per copy inside a graph of copies (the gap to the next kernel in it); the replay of a one-call
    graph beyond that is the graph's own cost, once per replay, not a launch per operator."""
    from real.validation.profiler import call_timing as ot
    from real.validation.profiler.profile_device import ProfileSettings

    monkeypatch.setattr(ot, "sync_device", lambda device: None)
    monkeypatch.setattr(ot, "wall_per_call", lambda fn, device, calls: 30e-6)       # an eager call: 30 us
    monkeypatch.setattr(ot, "graph_per_call", lambda fn, device, copies: (4e-6, 19e-6))
    timing = ot.time_op(lambda: None, _FakeCuda(), ProfileSettings())()
    assert timing == ot.OpTiming(kernel_s=4e-6, eager_launch_s=pytest.approx(26e-6), graph_launch_s=0.0,
                                 replay_s=pytest.approx(15e-6))
    med = ot.median_timing([timing, ot.OpTiming(6e-6, 20e-6, 0.0, 13e-6), ot.OpTiming(5e-6, 24e-6, 0.0, 14e-6)])
    assert (med.kernel_s, med.eager_launch_s, med.graph_launch_s, med.replay_s) == (5e-6, 24e-6, 0.0, 14e-6)


def test_a_profile_in_another_dtype_prices_its_forwards_in_that_dtype(tmp_path):
    """A bf16 profile's device has only a bf16 peak: its forward_rest rows and launch are priced in bf16."""
    from hwmodels.profile import read_profile
    from real.validation.profiler.profile_device import ProfileSettings, profile_device, write_device_profile

    settings = ProfileSettings(tokens=(1, 2), attention_q=(1, 2), attention_keys=(64,), repeats=1, calls=2)
    prof = profile_device("cpu", [SPEC], settings, dtype="bf16", progress=False)
    csv_path, toml_path = write_device_profile(prof, tmp_path / "bf16", "test")
    profile = read_profile(csv_path)
    assert profile.dtype == "bf16" and ("forward_rest", "L1H64I128h4kv2d16V256") in profile.tables


def test_guarded_forwards_are_taken_again_after_a_slow_probe_and_keep_their_order():
    from real.run.contention import Guard
    from real.validation.profiler import forward_launch

    readings = iter([1.0, 0.4] + [1.0] * 1000)      # the probe after the first batch reads slow
    guard = Guard(probe=lambda: next(readings), reference=1.0, pause_s=0.0, source="test")
    seen: list[int] = []

    def time_calls(fn, n):
        seen.append(n)
        return 1e-3 * len(seen)

    records: list = []
    out, = forward_launch.time_model_forwards([SPEC], torch.device("cpu"), torch.float32, (1, 2), time_calls, calls=2,
                                              repeats=2, guard=guard, records=records)
    assert [t for t, _ in out] == [1, 2] and all(len(s) == 2 for _, s in out)
    assert len(records) >= 1 and records[0].retakes == 1       # the first batch measured twice
    assert len(seen) > 4                                       # 4 samples kept, more taken
    kept = sorted(x for _, s in out for x in s)
    assert kept == sorted(kept) and kept[-1] == 1e-3 * len(seen)   # the samples kept are the last ones taken


def test_the_default_profile_covers_the_cached_demo_presets_else_tiny(tmp_path, monkeypatch):
    """A default calibration profiles the shapes a user will validate: the presets cached with their current
    recipe, else tiny (what the demo trains first); a stale cache does not count."""
    import json

    from real.train.demo import CACHE_ENV, cache_folder, get_recipe
    from real.validation.profiler.profile_device import default_models

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    assert default_models("cpu") == ["demo:tiny"]
    small = cache_folder("small")
    small.mkdir(parents=True)
    (small / "summary.json").write_text(json.dumps({"fingerprint": "stale"}))
    assert default_models("cpu") == ["demo:tiny"]
    (small / "summary.json").write_text(json.dumps({"fingerprint": get_recipe("small").fingerprint()}))
    assert default_models("cpu") == ["demo:small"]
    assert default_models("cuda:0") == ["demo:small", "llama2-7b"]


def test_the_default_profile_leaves_a_pretrained_target_to_models(tmp_path, monkeypatch, smollm2_gguf):
    """A cached smollm2 preset (a 30-layer pretrained target) is profiled only when asked (``--models
    demo:smollm2``): the default calibration stays inside its time bound."""
    import json

    from real.train.demo import CACHE_ENV, cache_folder, get_recipe
    from real.validation.profiler.profile_device import default_models, resolve_models

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    smol = cache_folder("smollm2")
    smol.mkdir(parents=True)
    (smol / "summary.json").write_text(json.dumps({"fingerprint": get_recipe("smollm2").fingerprint()}))
    assert default_models("cpu") == ["demo:tiny"]
    assert [s.n_layers for s in resolve_models(["demo:smollm2"])] == [30, 2]
