"""The heterogeneous validation section on the tiny demo models and a synthetic two-worker platform, and
the simulator's hcmp / dovetail strategies pointed at a host's workers."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from hwmodels.platform import Device, Link, LoopCosts, MemoryDomain, Platform
from real.run.contention import Guard
from real.run.worker import allowed_cores

pytestmark = [pytest.mark.skipif(len(allowed_cores()) < 2, reason="two CPU workers need two cores"),
              pytest.mark.usefixtures("one_torch_thread")]


def steady_probe() -> float:
    """A contention probe that always reads 1 FLOP/s (module level: pickled into the measuring processes)."""
    return 1.0


def _device(name: str, threads: int) -> Device:
    return Device(name=name, kind="cpu", peak_tflops={"fp32": 0.05 * threads}, mem_bw_gbps=20.0, mem_capacity_gb=8.0,
                  bw_efficiency=1.0, compute_efficiency=1.0, op_overhead_us=8.0, token_tile=1,
                  sparse_attn_efficiency=0.0, cores=threads)


def host_like(host_costs=None) -> Platform:
    """A host platform shaped like ``hetspec calibrate``'s (cpu, cpu0, cpu1, one DRAM, a unified link)."""
    devices = {"cpu": _device("cpu", 2), "cpu0": _device("cpu0", 1), "cpu1": _device("cpu1", 1)}
    loops = {n: LoopCosts(n, host_costs) for n in devices} if host_costs else {}
    domain = MemoryDomain(name="dram", devices=tuple(devices), bw_gbps=30.0, capacity_gb=16.0, contention_efficiency=0.8)
    link = Link(name="cpu0-cpu1", kind="unified", src="cpu0", dst="cpu1", bw_gbps=30.0, latency_us=10.0, efficiency=1.0)
    return Platform(name="host", description="synthetic host for tests", devices=devices, links=(link,),
                    memory_domains=(domain,), loop_costs=loops)


def _mini_settings():
    from real.validation.hetero.setup import QUICK

    return replace(QUICK, eval_prompts=1, prompt_tokens=32, max_new_tokens=12, repeats=1, ratios=(0.0, 0.5, 1.0),
                   hcmp_width=6, dovetail_width=6, dovetail_depth=2, dovetail_top_k=3, tau_prompts=1,
                   alspec_lambdas=(0.0, 0.3), alspec_windows=(4,), alspec_prompts=1, stream_prompts=1,
                   all_core_placements=False, label="test")


def _pair_and_platform(host_costs=None):
    cores = allowed_cores()
    pair = (f"cpu{cores[0]}", f"cpu{cores[1]}")
    platform = host_like(host_costs) if pair == ("cpu0", "cpu1") else _renamed(host_like(host_costs), pair)
    return pair, platform


def test_the_section_end_to_end(tiny_demo, tmp_path):
    import torch

    from real.run.acceptance import measure_profile
    from real.train.corpus import prompts as corpus_prompts
    from real.validation.hetero.section import validate_hetero
    from real.validation.predict import PredictionContext

    settings = _mini_settings()
    calib = [list(p) for p in corpus_prompts(tiny_demo.tokenizer, "calibration", 2, 32, seed=0)]
    with torch.inference_mode():
        profile = measure_profile(tiny_demo, calib, 12, name="t", source="test")
    ctx = PredictionContext(target=tiny_demo.target.spec, draft_config=str(tiny_demo.folder / "draft" / "config.json"),
                            medusa_heads=tiny_demo.heads.n_heads, platform=host_like(), device="cpu", context=40,
                            profile=profile)
    pair, platform = _pair_and_platform()
    # the contention guard, with a probe that always reads its reference (the real one times a GEMM)
    settings = replace(settings, contention_guard=True)
    guard = Guard(probe=steady_probe, reference=1.0, source="test")
    doc = validate_hetero(tiny_demo, platform, ctx, tmp_path, settings, progress=False, pair=pair, guard=guard)

    h = doc["hcmp"]
    assert h["ratios"] == [0.0, 0.5, 1.0] and not h["missing"]
    assert h["same_tokens_at_every_ratio"]
    assert all(math.isfinite(x) and x > 0 for x in h["pred_step_ms"] + h["meas_step_ms"])
    assert 0.0 <= h["regret"] < 1.0 and h["predicted_best_ratio"] in h["ratios"]
    assert h["pred_step_ms"][0] == pytest.approx(h["pred_step_ms"][2])        # identical workers: symmetric ends
    assert h["sync_s_barrier"] > 0 and h["sync_s_calibrated"] == pytest.approx(10e-6)
    d = doc["dovetail"]
    assert [r["label"] for r in d["placements"]] == [f"{pair[0]} -> {pair[1]}", f"{pair[1]} -> {pair[0]}",
                                                     f"{pair[0]} -> {pair[0]}"]
    assert all(r["pred_step_ms"] > 0 and r["meas_step_ms"] > 0 for r in d["placements"])
    assert d["predicted_best"] in {r["label"] for r in d["placements"]}
    # a host without dovetail loop costs (calibrated without the heterogeneous probes) prices no host work, and says so
    assert all(r["pred_parts_ms"]["host"] == 0.0 for r in d["placements"])
    missing = d["host_costs_missing"]
    assert "has no dovetail loop costs for" in missing and all(w in missing for w in pair)
    for r in d["placements"]:    # the round's parts add up to it: passes, the tree's host work, transfers, verify
        parts = r["meas_parts_ms"]
        assert parts["draft"] > 0 and parts["verify"] > 0 and parts["host"] > 0
        assert sum(parts.values()) == pytest.approx(min(r["meas_step_ms_samples"], key=lambda x: abs(x - r["meas_step_ms"])),
                                                    rel=1e-6)
    a = doc["alspec"]["rows"]
    exact = next(r for r in a if r["lambda"] == 0.0)
    assert exact["hit_rate"] == 0.0 and exact["agreement_positionwise"] == 1.0
    assert exact["calibration_hit_rate"] == 0.0 and exact["calibration_agreement"] == 1.0
    assert all(r["pred_step_ms"] > 0 and r["meas_step_ms"] > 0 for r in a)           # predicted from calibration hits
    assert doc["alspec"]["predicted_best"] and doc["alspec"]["measured_best"]     # lambda 0 always meets the floor
    assert set(doc["summary"]["methods"]) == {"hcmp", "dovetail", "alspec"}       # no storage link: no streaming prediction
    s = doc["streaming"]["rows"]
    assert {r["resident"] for r in s} == {"all", "none"} and all(r["same_tokens_as_resident"] for r in s)
    assert next(r for r in s if r["resident"] == "none")["loaded_mb"] > 0
    assert "storage link" in doc["streaming"]["missing"]
    for name in ("hetero_ratio.png", "hetero_placement.png", "hetero_alspec.png", "hetero_streaming.png", "hetero.md",
                 "hetero.json"):
        assert (tmp_path / name).stat().st_size > 0
    text = (tmp_path / "hetero.md").read_text()
    assert "regret" in text and "hcmp: partition ratio sweep" in text and "## Acceptance check" in text
    assert "Host work not priced:" in text
    assert "the target of 5 %" in text               # the section's regret target, not the single-device 10 %
    assert doc["fresh_processes"] and doc["alspec"]["fresh_processes"]   # CPU workers: a process per repeat
    assert "each repeat in a process of its own" in text
    for name in ("hcmp", "dovetail", "alspec"):             # every timed measurement bracketed by the probe
        assert doc[name]["contention"]["retaken"] == 0 and doc[name]["contention"]["measurements"] > 0
    assert doc["hcmp"]["contention"]["measurements"] == len(h["ratios"]) * settings.repeats
    n = len(h["ratios"]) * settings.repeats
    assert "Contention guard" in text and f"hcmp: all {n} measurements taken with the probe above the floor" in text


def test_a_gpu_worker_measures_in_this_process():
    from real.validation.hetero.setup import fresh_processes

    settings = _mini_settings()
    assert fresh_processes(settings, ("cpu0", "cpu1")) and not fresh_processes(settings, ("cuda:0", "cpu"))
    assert not fresh_processes(replace(settings, fresh_processes=False), ("cpu0", "cpu1"))


def test_the_sections_guard_cpu_workers_only_and_when_asked():
    from real.validation.hetero.setup import section_guard

    guard, on = Guard(probe=steady_probe, reference=1.0), replace(_mini_settings(), contention_guard=True)
    assert section_guard(on, ("cpu0", "cpu1"), None, guard) is guard
    assert section_guard(on, ("cuda:0", "cpu"), None, guard) is None
    assert section_guard(replace(on, contention_guard=False), ("cpu0", "cpu1"), None, guard) is None


def _renamed(platform: Platform, pair) -> Platform:
    """The synthetic host with its workers named after this process's first two cores."""
    rename = {"cpu0": pair[0], "cpu1": pair[1]}
    devices = {rename.get(k, k): replace(v, name=rename.get(k, k)) for k, v in platform.devices.items()}
    link = replace(platform.links[0], name=f"{pair[0]}-{pair[1]}", src=pair[0], dst=pair[1])
    domain = replace(platform.memory_domains[0], devices=tuple(devices))
    loops = {rename.get(k, k): replace(v, device=rename.get(k, k)) for k, v in platform.loop_costs.items()}
    return replace(platform, devices=devices, links=(link,), memory_domains=(domain,), loop_costs=loops)


def test_hcmp_prices_the_medusa_loop_at_every_ratio():
    from sim.acceptance import AcceptanceModel
    from sim.model_spec import get_model
    from sim.strategies import get_strategy
    from sim.strategies.base import Problem, StrategyConfig
    from sim.tree import TokenTree

    acc = ((0.6, 0.1), (0.4, 0.1))
    tree = TokenTree.greedy(acc, 6)
    costs = {"medusa_step": 100.0, "medusa_node": 10.0}
    strategy = get_strategy("hcmp")

    def steps(platform):
        problem = Problem(model=get_model("tinyllama-1.1b"), platform=platform, dtype="fp32",
                          acceptance=AcceptanceModel(name="a", source="t", medusa_accuracy=acc), context=64)
        cfg = strategy.resolve(problem, StrategyConfig(method="hcmp").with_knobs(
            device="cpu0", secondary="cpu1", tree=tree, tree_width=tree.size, partition_ratio=0.5))
        return strategy.estimate_ratios(problem, cfg, np.array([0.0, 0.5, 1.0])), strategy.estimate(problem, cfg)

    bare, _ = steps(host_like())
    with_host, est = steps(host_like(costs))
    host_s = 1e-6 * (100.0 + 10.0 * tree.size)
    assert np.allclose(with_host - bare, host_s)                 # the same loop cost at the ends and inside
    assert est.breakdown["host"] == pytest.approx(host_s)


def test_dovetail_takes_a_draft_config_path(tiny_demo):
    from sim.model_spec import get_model
    from sim.strategies import get_strategy
    from sim.strategies.base import Problem, StrategyConfig

    path = str(tiny_demo.folder / "draft" / "config.json")
    problem = Problem(model=get_model(str(tiny_demo.folder / "target" / "config.json")), platform=host_like(),
                      context=48)
    strategy = get_strategy("dovetail")
    cfg = strategy.resolve(problem, StrategyConfig(method="dovetail").with_knobs(
        device="cpu1", draft_device="cpu0", draft_model=path, tree_width=6, draft_depth=2, top_k=3,
        draft_dtype="fp32", tau=2.0))
    est = strategy.estimate(problem, cfg)
    assert est.tokens_per_step == 2.0 and est.breakdown["transfer"] > 0 and est.breakdown["draft"] > 0
    same = strategy.estimate(problem, strategy.resolve(problem, replace(cfg, draft_device="cpu1")))
    assert same.breakdown["transfer"] == 0.0


def test_added_worker_links_and_barrier_priced_syncs():
    from real.validation.gpu_target import platform_device
    from real.validation.hetero.setup import (
        with_sync_latency,
        with_worker_links,
    )

    plat = with_worker_links(host_like())
    assert plat.has_link("cpu", "cpu0", "unified") and plat.link("cpu", "cpu1").latency_us == 10.0
    assert len(plat.links) == 3
    synced = with_sync_latency(host_like(), "cpu0", "cpu1", 25e-6)
    assert synced.link("cpu0", "cpu1").latency_us == pytest.approx(25.0)
    assert platform_device(host_like(), "cuda:0") is None and platform_device(host_like(), "cpu1") == "cpu1"


def test_validate_with_the_hetero_section(tiny_demo, tmp_path, monkeypatch):
    import json

    from hwmodels.loader import write_platform_file
    from real.validation.grid import GridPoint
    from real.validation.validate import QUICK, validate

    _, platform = _pair_and_platform()
    write_platform_file(platform, tmp_path / "platforms" / "host.toml")
    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", str(tmp_path / "platforms"))
    settings = replace(QUICK, calibration_prompts=2, eval_prompts=1, prompt_tokens=32, max_new_tokens=12, repeats=1,
                       random_models=())
    out = tmp_path / "report"
    from real.validation.hetero.report import markdown
    from real.validation.hetero.section import validate_hetero

    def section(models, host, ctx, folder):
        doc = validate_hetero(models, host, ctx, folder, _mini_settings(), False)
        return doc, markdown(doc)

    validate(out, preset="tiny", progress=False, settings=settings, grid=(GridPoint("ar"),), command="test",
             section=section)
    report = (out / "report.md").read_text()
    assert "## Heterogeneous execution" in report and "hcmp: partition ratio sweep" in report
    saved = json.loads((out / "results.json").read_text())
    assert 0.0 <= saved["hetero"]["hcmp"]["regret"] < 1.0
    assert (out / "hetero_ratio.png").stat().st_size > 0


def test_the_section_samples_prompts_as_the_main_validation():
    """--hetero-only measures acceptance on as many calibration prompts as the main validation: one acceptance
    protocol for both reports; the full section decodes more evaluation prompts than the main grid's blocks."""
    from real.validation import validate
    from real.validation.hetero import setup as hetero_setup
    for quick in (True, False):
        main, section = validate.settings_for(quick), hetero_setup.settings_for(quick)
        assert section.calibration_prompts == main.calibration_prompts
    assert hetero_setup.FULL.eval_prompts == 48 and validate.FULL.eval_prompts == 12
    assert validate.FULL.calibration_prompts == 64


def test_the_streaming_section_predicts_with_the_link_probed_before_it(tiny_demo, tmp_path, monkeypatch):
    """With a storage link the section re-runs the calibration's probes first and predicts with what they measure
    now; the calibration's link still prices every budget beside it, in the JSON and in hetero.md."""
    import torch

    import real.validation.hetero.streaming as hs
    from real.run.acceptance import measure_profile
    from real.train.corpus import prompts as corpus_prompts
    from real.validation.hetero.report import streaming_lines
    from real.validation.predict import PredictionContext

    pair, platform = _pair_and_platform()
    disk = Link(name="disk", kind="storage", src="storage", dst="cpu", bw_gbps=2.0, latency_us=50.0, efficiency=1.0)
    platform = replace(platform, links=platform.links + (disk,))
    slow = replace(disk, bw_gbps=0.5, host_share=0.2, sources={"bw_gbps": "measured now"})
    probed = []

    def reprobe(plat, dev, worker, rounds):
        probed.append((dev, worker, rounds))
        return replace(plat, links=tuple(slow if l.kind == "storage" else l for l in plat.links))

    monkeypatch.setattr(hs, "reprobed_platform", reprobe)
    calib = [list(p) for p in corpus_prompts(tiny_demo.tokenizer, "calibration", 2, 32, seed=0)]
    with torch.inference_mode():
        profile = measure_profile(tiny_demo, calib, 12, name="t", source="test")
    ctx = PredictionContext(target=tiny_demo.target.spec, draft_config=str(tiny_demo.folder / "draft" / "config.json"),
                            medusa_heads=tiny_demo.heads.n_heads, platform=platform, device="cpu", context=40,
                            profile=profile)
    settings = _mini_settings()
    doc = hs.streaming_table(tiny_demo, settings, pair[0], progress=False, platform=platform, ctx=ctx)
    assert probed == [(pair[0], pair[0], settings.stream_probe_rounds)] and not doc["missing"]
    assert doc["storage_link"]["bw_gbps"] == 0.5 and doc["storage_link"]["reprobed"]
    assert doc["calibration_link"]["bw_gbps"] == 2.0
    streamed = next(r for r in doc["rows"] if r["resident"] == "none")
    assert streamed["pred_load_ms"] > 1.5 * streamed["cal_pred_load_ms"]       # a 4x slower disk (latency alike)
    assert streamed["pred_step_ms"] > streamed["cal_pred_step_ms"]
    text = "\n".join(streaming_lines(doc))
    assert "re-run right before this section" in text and "calibration's link: step (ms) / tokens/s" in text


def test_a_gguf_referenced_target_streams_from_a_copy_written_from_the_loaded_model(tiny_demo, tmp_path):
    import torch

    from real.model.checkpoint import load_model
    from real.validation.hetero.streaming import private_checkpoint

    folder = tmp_path / "demo" / "target"              # what the smollm2 preset keeps: a reference, no weights
    folder.mkdir(parents=True)
    (folder / "gguf_target.json").write_text("{}")
    copy = private_checkpoint(folder, tiny_demo.target)
    try:
        assert copy.parent == folder.parent and sorted(f.name for f in copy.iterdir()) == ["config.json",
                                                                                          "model.safetensors"]
        loaded = load_model(copy)
        for name, tensor in tiny_demo.target.state_dict().items():
            assert torch.equal(loaded.state_dict()[name], tensor), name
    finally:
        import shutil

        shutil.rmtree(copy)


def test_the_dovetail_section_names_drafters_without_loop_costs():
    from real.validation.hetero.dovetail import missing_host_costs

    rows = [{"drafter": "cpu0"}, {"drafter": "cpu"}]
    assert missing_host_costs(host_like({"dovetail_step": 30.0, "dovetail_pass": 5.0}), rows) == ""
    text = missing_host_costs(host_like({"medusa_step": 30.0}), rows)
    assert "no dovetail loop costs for cpu, cpu0" in text and "priced 0" in text
