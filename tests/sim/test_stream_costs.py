"""What LLMCad's weight streaming costs the compute beside it: a read in flight slows the compute that runs
meanwhile (the storage link's ``host_share``), a streamed layer computed after the forward waited for its read
costs more than a resident one (the worker's ``stream_layer``), and the streaming-loop probe of
``hetspec calibrate`` that measures both with the real loader."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import torch
from test_hetero_costs import _draft_tree, _layer_budget_gb, host

from hwmodels.errors import PresetError
from hwmodels.loader import load_platform_file, write_platform_file
from sim.engine import simulate
from sim.strategies.streaming_pipeline import beside_reads, pipeline_round

torch.set_num_threads(1)


def test_compute_beside_a_read_runs_at_the_share_left():
    # no read in flight, or nothing taken: the work as it is
    assert beside_reads(1.0, 2.0, [], 0.5) == 3.0
    assert beside_reads(1.0, 2.0, [(0.0, 10.0)], 0.0) == 3.0
    # half the speed inside [2, 4]: 1 s before the read, 1 s of work in its 2 s, the rest after it
    assert beside_reads(1.0, 2.5, [(2.0, 4.0)], 0.5) == pytest.approx(4.5)
    # work that ends inside the read
    assert beside_reads(1.0, 1.5, [(2.0, 4.0)], 0.5) == pytest.approx(3.0)
    # reads that ended before the work began cost nothing; two reads in turn both slow it
    assert beside_reads(5.0, 1.0, [(0.0, 4.0)], 0.5) == 6.0
    # (a quarter of speed: 0.25 s of work in [0, 1], 1 s between the reads, 0.25 s in [2, 3], 0.5 s after)
    assert beside_reads(0.0, 2.0, [(0.0, 1.0), (2.0, 3.0)], 0.75) == pytest.approx(3.5, rel=1e-12)


def test_a_read_in_flight_slows_the_tail_and_the_draft_that_overlap_it():
    # one buffer, 4 streamed layers, reads of 1 s: the first read of a round starts when the last layer of the
    # previous round is computed and overlaps its tail + host-side work (0.5 s of work)
    plain = pipeline_round(3.0, 0.1, 1.0, 0.5, 0.2, 0.3, 1.0, 4, 1)
    half = pipeline_round(3.0, 0.1, 1.0, 0.5, 0.2, 0.3, 1.0, 4, 1, host_share=0.5)
    assert plain.time_s == pytest.approx(9.6)
    assert half.time_s == pytest.approx(9.6 + 0.5)        # the tail and host work take the whole 1 s read
    assert half.post_wall_s == pytest.approx(1.0) and half.draft_wall_s == pytest.approx(3.0)
    # a 2 s read also covers the draft's first second: half of it is done in it
    long = pipeline_round(3.0, 0.1, 1.0, 0.5, 0.2, 0.3, 2.0, 4, 1, host_share=0.5)
    assert long.draft_wall_s == pytest.approx(3.5)
    # the layers after the first read wait for their own: no read is in flight while they compute
    assert [c1 - c0 for *_, c0, c1 in long.schedule] == pytest.approx([0.5] * 4)


def test_a_streamed_layer_after_a_wait_costs_its_resume():
    plain = pipeline_round(3.0, 0.1, 1.0, 0.5, 0.2, 0.3, 1.0, 4, 1)
    resumed = pipeline_round(3.0, 0.1, 1.0, 0.5, 0.2, 0.3, 1.0, 4, 1, resume_s=0.25)
    # the first streamed layer was read during the draft (no wait); the other three each waited
    assert resumed.time_s - plain.time_s == pytest.approx(3 * 0.25)
    assert resumed.compute_s - plain.compute_s == pytest.approx(3 * 0.25)
    # nothing streamed: nothing waits, nothing resumes
    assert pipeline_round(3.0, 0.1, 1.0, 0.5, 0.2, 0.3, 1.0, 0, 1, resume_s=0.25).time_s == pytest.approx(4.6)


def _streaming_host(share=0.0, resume_us=None):
    costs = {"stream_layer": resume_us} if resume_us is not None else None
    platform = host(costs, storage=(0.8, 30.0))
    links = tuple(replace(l, host_share=share) if l.kind == "storage" else l for l in platform.links)
    return replace(platform, links=links)


def test_the_draft_tree_strategy_prices_both_and_the_engine_agrees():
    budget = _layer_budget_gb(2)
    base = _draft_tree(_streaming_host(), budget)
    bare = base[0].estimate(*base[1:])
    for platform in (_streaming_host(share=0.4), _streaming_host(resume_us=400.0),
                     _streaming_host(share=0.4, resume_us=400.0)):
        strategy, problem, cfg = _draft_tree(platform, budget)
        est = strategy.estimate(problem, cfg)
        assert est.step_s > bare.step_s
        sim = simulate(problem, "draft-tree", cfg, steps=2)
        assert sim.engine_step_s == pytest.approx(sim.closed_form_step_s, rel=1e-9)
    # 6 streamed layers, the first read during the draft: 5 of them resume after a wait
    resumed = base[0].estimate(*_draft_tree(_streaming_host(resume_us=400.0), budget)[1:])
    assert resumed.step_s - bare.step_s == pytest.approx(5 * 400e-6, rel=1e-6)
    # nothing streamed: neither costs anything
    full = [base[0].estimate(*_draft_tree(p, 10.0)[1:]).step_s
            for p in (_streaming_host(), _streaming_host(share=0.4, resume_us=400.0))]
    assert full[0] == pytest.approx(full[1], rel=1e-12)


def test_host_share_round_trips_and_is_checked(tmp_path):
    platform = _streaming_host(share=0.37)
    write_platform_file(platform, tmp_path / "h.toml")
    assert load_platform_file(tmp_path / "h.toml").storage_link("cpu").host_share == 0.37
    write_platform_file(_streaming_host(), tmp_path / "zero.toml")
    assert "host_share" not in (tmp_path / "zero.toml").read_text()
    assert load_platform_file(tmp_path / "zero.toml").storage_link("cpu").host_share == 0.0
    text = (tmp_path / "h.toml").read_text()
    (tmp_path / "bad.toml").write_text(text.replace("value = 0.37", "value = 1.0"))
    with pytest.raises(PresetError, match=r"host_share.*below 1"):
        load_platform_file(tmp_path / "bad.toml")


def _probe(**kw):
    from real.validation.calibration.stream_probe import StreamLoopProbe

    fields = dict(worker="cpu0", layers=4, tokens=16, layer_bytes=6_000_000, layer_load_s=8e-3, reads_per_layer=9,
                  resident_layer_s=2.0e-3, streamed_layer_s=2.4e-3, alone_s=6e-3, beside_s=10e-3, rounds=5)
    return StreamLoopProbe(**{**fields, **kw})


def test_the_stream_probe_becomes_the_link_and_the_workers_cost():
    from real.validation.calibration.host_hetero import storage_link, stream_loop_costs
    from real.validation.calibration.storage_probe import StorageProbe

    probe = _probe()
    assert probe.resume_s == pytest.approx(0.4e-3) and probe.host_share == pytest.approx(0.4)
    assert _probe(streamed_layer_s=1.0e-3).resume_s == 0.0 and _probe(beside_s=5e-3).host_share == 0.0
    tensors = StorageProbe(folder="/x", sizes=(16384, 4194304), cold_s=(60e-6, 4.2e-3), warm_s=(1e-5, 1e-3),
                           latency_s=50e-6, bw_bytes_per_s=1e9, reads=3)
    link = storage_link(tensors, "by test", "on a CPU", stream=probe)
    # the loader's whole-layer reads set the bandwidth: 6 MB in 8 ms less 9 x 50 us of latency
    assert link.bw_gbps == pytest.approx(6e6 / (8e-3 - 9 * 50e-6) / 1e9, abs=1e-4)
    assert link.latency_us == 50.0 and link.host_share == pytest.approx(0.4)
    assert "whole-layer reads" in link.sources["bw_gbps"] and "alone" in link.sources["host_share"]
    per_layer = storage_link(tensors, "by test", "on a CPU", stream=_probe(layer_reads_s=(7e-3, 9e-3)))
    assert "median read: 7.00, 9.00 ms" in per_layer.sources["bw_gbps"]
    # without the loop probe: the tensor fit, nothing taken from the compute
    alone = storage_link(tensors, "by test", "on a CPU")
    assert alone.bw_gbps == 1.0 and alone.host_share == 0.0
    costs, sources = stream_loop_costs(probe, "by test", "on a CPU")
    assert costs == {"stream_layer": pytest.approx(400.0)} and "waited" in sources["stream_layer"]


def test_a_layers_read_is_the_mean_of_each_layers_median():
    """A forward streaming every layer pays the sum of their reads: layers that read fast and layers that read
    slow (a virtual disk's blocks) count by their share, however many reads each had; a one-off hiccup does
    not. The median over every read would give the majority kind (6 ms here)."""
    from real.validation.calibration.stream_probe import layer_read_s

    reads = {1: [6e-3, 6.1e-3, 5.9e-3], 2: [6e-3, 60e-3, 6e-3], 3: [4e-3, 4e-3, 4e-3]}
    assert layer_read_s(reads) == pytest.approx((6e-3 + 6e-3 + 4e-3) / 3)
    assert layer_read_s({}) != layer_read_s({})          # NaN: nothing was read


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="needs posix_fadvise")
def test_the_stream_probe_runs_the_real_loader(tmp_path):
    from real.validation.calibration.stream_probe import STREAM_PROBE_SPEC, stream_loop_probe

    probe = stream_loop_probe("cpu", rounds=1, warmup=0, folder=tmp_path)
    spec = STREAM_PROBE_SPEC
    assert spec.n_layers == 8 and probe.layers == 8      # the demo target's layers: every kind of block read
    assert probe.layer_bytes == spec.params_per_layer * 4 and probe.reads_per_layer == 9
    assert probe.layer_load_s > 0 and probe.resident_layer_s > 0 and probe.streamed_layer_s > 0
    assert len(probe.layer_reads_s) >= spec.n_layers - 1      # every layer the forwards waited for
    assert probe.layer_load_s == pytest.approx(sum(probe.layer_reads_s) / len(probe.layer_reads_s))
    assert probe.alone_s > 0 and probe.beside_s > 0 and 0.0 <= probe.host_share <= 0.9
    assert list(tmp_path.iterdir()) == []            # the probe's checkpoint is removed


@pytest.mark.skipif(not hasattr(os, "posix_fadvise") or not hasattr(os, "sched_setaffinity")
                    or len(os.sched_getaffinity(0)) < 2, reason="needs posix_fadvise and two cores to pin")
def test_the_probe_reads_beside_the_worker_where_the_real_loader_runs(tmp_path, monkeypatch):
    """The real loader thread is started outside the worker and keeps its creator's cores; the probe's reader
    beside the pinned one-token forward must do the same (inside the worker it would share its one core)."""
    import real.hetero.streaming as streaming
    from real.run.worker import allowed_cores
    from real.validation.calibration.stream_probe import stream_loop_probe

    seen = []
    real_read = streaming.read_layer_tensors

    def spy(*args, **kwargs):
        seen.append(frozenset(os.sched_getaffinity(0)))
        return real_read(*args, **kwargs)

    monkeypatch.setattr(streaming, "read_layer_tensors", spy)
    core = allowed_cores()[0]
    stream_loop_probe(f"cpu{core}", rounds=1, warmup=0, folder=tmp_path)
    assert seen and set(seen) == {frozenset(allowed_cores())}     # never the worker's one core


def test_the_probe_times_a_drafter_sized_model_beside_the_reads(tmp_path, monkeypatch):
    """LLMCad's drafter drafts while the loader reads, and its weights sit in the cache a read evicts: the probe
    times a model of the demo draft's shape beside the reads, not its own 50 MB target (never cache-resident)."""
    if not hasattr(os, "posix_fadvise"):
        pytest.skip("needs posix_fadvise")
    import real.validation.calibration.stream_probe as sp
    from real.train.demo import DEMO_PRESETS

    draft = DEMO_PRESETS["small"].draft
    d = sp.STREAM_DRAFTER_SPEC
    assert (d.n_layers, d.hidden, d.intermediate, d.n_heads, d.n_kv_heads) == (
        draft.n_layers, draft.hidden, draft.intermediate, draft.n_heads, draft.n_kv_heads)
    timed = []
    real_one = sp._one_token_s

    def spy(model, passes):
        timed.append(model.spec.name)
        return real_one(model, passes)

    monkeypatch.setattr(sp, "_one_token_s", spy)
    sp.stream_loop_probe("cpu", rounds=1, warmup=0, folder=tmp_path)
    assert timed and set(timed) == {d.name}


def test_the_validation_reprobes_the_link_before_its_streaming_section(monkeypatch):
    """The disk drifts within minutes: the streaming section prices with the calibration's probes re-run now,
    the link keeping its name and ends, only the streaming worker's stream_layer replaced."""
    import real.validation.calibration.storage_probe as storage_mod
    import real.validation.calibration.stream_probe as stream_mod
    from real.validation.hetero.streaming import reprobed_platform
    from real.validation.calibration.storage_probe import StorageProbe

    plat = host(loop_costs={"stream_layer": 5.0, "draft_tree_step": 7.0}, storage=(1.5, 40.0))
    tensors = StorageProbe(folder="/x", sizes=(16384, 4194304), cold_s=(60e-6, 4.2e-3), warm_s=(1e-5, 1e-3),
                           latency_s=50e-6, bw_bytes_per_s=1e9, reads=3)
    calls = []
    monkeypatch.setattr(storage_mod, "storage_probe", lambda: tensors)
    monkeypatch.setattr(stream_mod, "stream_loop_probe", lambda worker, rounds: calls.append((worker, rounds)) or _probe())
    fresh = reprobed_platform(plat, "cpu0", "cpu0", 7)
    assert calls == [("cpu0", 7)]
    link = fresh.storage_link("cpu")
    assert link.name == "disk" and link.bw_gbps == pytest.approx(6e6 / (8e-3 - 9 * 50e-6) / 1e9, abs=1e-4)
    assert link.latency_us == 50.0 and link.host_share == pytest.approx(0.4)
    assert "hetspec validate" in link.sources["bw_gbps"]
    assert fresh.loop_costs_us("cpu0") == {"stream_layer": pytest.approx(400.0), "draft_tree_step": 7.0}
    assert fresh.loop_costs_us("cpu1") == plat.loop_costs_us("cpu1")
    assert plat.storage_link("cpu").bw_gbps == 1.5                     # the calibration's platform untouched
    monkeypatch.setattr(storage_mod, "storage_probe", lambda: None)     # no page-cache drop on this OS
    assert reprobed_platform(plat, "cpu0", "cpu0", 7) is None


def test_the_rewarm_series_evicts_before_each_round_of_passes():
    from real.validation.calibration.stream_step_probe import rewarm_series

    calls = []
    series = rewarm_series(lambda: calls.append("evict"), lambda: calls.append("pass"), rounds=2, passes=3)
    assert len(series) == 3 and calls == ["evict", "pass", "pass", "pass"] * 2
