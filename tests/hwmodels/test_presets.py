"""The platform presets: every required one exists and loads, every number has a source, memory
domains and links have the shape of the hardware, and the numbers are physically sane."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

from cli_runner import run_cli
from hwmodels.errors import PresetError
from hwmodels.loader import builtin_preset_dir, get_platform, load_platform_file
from sim.model_spec import get_model
from sim.step_graph import build_step_graph
from sim.step_timing import price_step

#: The built-in platform presets, exactly.
REQUIRED = (
    "jetson-xavier-nx", "jetson-xavier-nx-204mhz", "jetson-orin-nx", "jetson-tx2", "apple-m2",
    "xeon4214r-rtx2080super", "xeon4310-rtx3090", "a100-80gb-pcie", "h100-sxm", "rtx4090-pcie4",
    "rtx2080ti-pcie3", "tenstorrent-n150x8", "snapdragon865",
    # the A100 and H100 presets with their GPUs priced by Vidur's measured kernel latencies (sim.op_timing)
    "a100-80gb-vidur", "h100-sxm-vidur",
)
#: Systems on a chip: CPU, GPU (and NPU) read one DRAM.
SOCS = ("jetson-xavier-nx", "jetson-xavier-nx-204mhz", "jetson-orin-nx", "jetson-tx2", "apple-m2", "snapdragon865")
#: Discrete GPUs and the PCIe generation their host link must have.
PCIE_GEN = {"xeon4214r-rtx2080super": 3, "rtx2080ti-pcie3": 3, "xeon4310-rtx3090": 4, "rtx4090-pcie4": 4,
            "a100-80gb-pcie": 4, "h100-sxm": 5, "a100-80gb-vidur": 4, "h100-sxm-vidur": 5}
#: x16 per-direction rate: GT/s x 16 lanes x 128/130 / 8 bits.
PCIE_X16_GBPS = {gen: rate * 16 * 128 / 130 / 8 for gen, rate in {3: 8, 4: 16, 5: 32}.items()}

GB_MIN, GB_MAX = 1.0, 10_000.0          # memory bandwidth sanity range, GB/s (1 GB/s .. 10 TB/s)
LINK_GB_MIN = 0.1                         # eMMC (0.4 GB/s) is the slowest link a preset may have
TFLOPS_MIN, TFLOPS_MAX = 0.01, 5_000.0    # a phone core cluster .. an H100's FP8
US_MAX = 1_000.0                          # no fixed per-op or link latency reaches a millisecond


def preset_path(name: str) -> Path:
    return builtin_preset_dir() / f"{name}.toml"


def unsourced_numbers(node, where: str = "") -> list[str]:
    """Dotted paths of numbers in a raw preset document without a non-empty ``source`` beside them.

    A number is sourced when it sits in ``{ value = <number>, source = "..." }``; a bare number
    (``x = 3``) or an empty/missing source is reported.
    """
    found: list[str] = []
    if isinstance(node, dict):
        if "value" in node:
            source = node.get("source")
            if not isinstance(source, str) or not source.strip():
                found.append(where)
            return found
        for key, child in node.items():
            found += unsourced_numbers(child, f"{where}.{key}" if where else key)
    elif isinstance(node, list):
        for i, child in enumerate(node):
            found += unsourced_numbers(child, f"{where}[{i}]")
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        found.append(where)
    return found


@pytest.fixture(scope="module")
def platforms():
    return {name: get_platform(name) for name in REQUIRED}


# ----------------------------------------------------------------------------------- existence
@pytest.mark.parametrize("name", REQUIRED)
def test_preset_file_exists_loads_and_is_named_after_its_file(name):
    path = preset_path(name)
    assert path.is_file(), f"missing preset file {path}"
    plat = load_platform_file(path)
    assert plat.name == name == path.stem
    assert plat.devices, f"{name} has no device"
    assert plat.description.strip()


def test_no_stray_builtin_presets():
    assert sorted(p.stem for p in builtin_preset_dir().glob("*.toml")) == sorted(REQUIRED)


def test_platforms_command_lists_every_preset():
    result = run_cli("platforms", "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    import json

    listed = {row["name"] for row in json.loads(result.stdout)}
    assert set(REQUIRED) <= listed


# ------------------------------------------------------------------------------------- sources
@pytest.mark.parametrize("name", REQUIRED)
def test_every_number_has_a_source(name):
    doc = tomllib.loads(preset_path(name).read_text())
    assert unsourced_numbers(doc) == []


def test_source_walk_catches_missing_empty_and_bare_numbers(tmp_path):
    doc = tomllib.loads(preset_path("jetson-tx2").read_text())
    doc["devices"]["gpu"]["mem_bw_gbps"] = {"value": 59.7}
    doc["devices"]["cpu"]["peak_tflops"]["fp32"]["source"] = "   "
    doc["links"][0]["latency_us"] = 100.0
    assert unsourced_numbers(doc) == ["devices.gpu.mem_bw_gbps", "devices.cpu.peak_tflops.fp32", "links[0].latency_us"]


def test_loader_rejects_a_preset_with_a_missing_source(tmp_path):
    text = preset_path("jetson-orin-nx").read_text()
    needle = 'mem_capacity_gb = { value = 8.0, source = "LLMCad Table 2: Jetson Orin NX, 8 GB RAM (shared by CPU and GPU)" }'
    assert needle in text
    bad = tmp_path / "orin-no-source.toml"
    bad.write_text(text.replace(needle, "mem_capacity_gb = { value = 8.0 }", 1))
    assert unsourced_numbers(tomllib.loads(bad.read_text())) == ["devices.gpu.mem_capacity_gb"]
    with pytest.raises(PresetError, match=r"devices\.gpu\.mem_capacity_gb: missing source"):
        load_platform_file(bad)


@pytest.mark.parametrize("name", REQUIRED)
def test_judgements_are_marked_assumed_not_dressed_as_citations(name):
    """Efficiencies and overheads are judgement calls unless a paper or a measurement gives them;
    a source for them must say where the number comes from or say 'assumed'."""
    plat = get_platform(name)
    for dev in plat.devices.values():
        for key in ("bw_efficiency", "compute_efficiency", "op_overhead_us"):
            src = dev.sources[key]
            assert len(src) > 20, f"{name}/{dev.name}.{key}: source too thin: {src!r}"


# --------------------------------------------------------------------------------- memory shape
@pytest.mark.parametrize("name", SOCS)
def test_soc_units_share_one_memory_domain(platforms, name):
    plat = platforms[name]
    units = [d.name for d in plat.devices.values()]
    assert {"cpu", "gpu"} <= set(units)
    domain = plat.domain_of("cpu")
    assert domain is not None and set(units) <= set(domain.devices)
    assert domain.contention_efficiency < 1.0, "a shared DRAM must lose something to contention"
    for unit in units:
        assert plat.device(unit).mem_bw_gbps <= domain.bw_gbps * (1 + 1e-9)
        assert plat.device(unit).mem_capacity_gb == domain.capacity_gb
    assert plat.has_link("cpu", "gpu", kind="unified")
    assert plat.link("cpu", "gpu").latency_us <= 100.0   # Ghidorah §II-D: page sync < 0.1 ms
    assert plat.storage_link("cpu") is not None


@pytest.mark.parametrize("name", sorted(PCIE_GEN))
def test_discrete_gpu_has_own_memory_and_a_pcie_link_of_the_named_generation(platforms, name):
    plat = platforms[name]
    link = plat.link("cpu", "gpu", kind="pcie")
    assert math.isclose(link.bw_gbps, PCIE_X16_GBPS[PCIE_GEN[name]], rel_tol=0.01), (name, link.bw_gbps)
    assert not plat.shares_memory("cpu", "gpu")
    assert plat.domain_of("gpu").devices == ("gpu",)


def test_pcie_generations_are_the_usual_figures():
    assert math.isclose(PCIE_X16_GBPS[3], 15.75, rel_tol=1e-3)
    assert math.isclose(PCIE_X16_GBPS[4], 31.5, rel_tol=1e-3)


def test_dovetail_systems_match_the_paper(platforms):
    a, b = platforms["xeon4214r-rtx2080super"], platforms["xeon4310-rtx3090"]
    for plat in (a, b):
        cpu = plat.cpu
        assert cpu.cores == 24 and cpu.mem_capacity_gb == 128.0          # Dovetail §III
        assert "fp32" in cpu.peak_tflops                                   # the target verifies in fp32
        assert "fp16" in plat.device("gpu").peak_tflops                    # the drafter runs in fp16
    assert a.device("gpu").mem_capacity_gb == 8.0 and b.device("gpu").mem_capacity_gb == 24.0
    # one AVX-512 FMA unit (Cascade Lake Silver) vs two (Ice Lake-SP): 24 x 2.4 x 32 vs 24 x 2.1 x 64
    assert math.isclose(a.cpu.peak_tflops["fp32"], 24 * 2.4 * 32 / 1e3, rel_tol=1e-3)
    assert math.isclose(b.cpu.peak_tflops["fp32"], 24 * 2.1 * 64 / 1e3, rel_tol=1e-3)
    # both sockets' channels: 2 x 6 x DDR4-2400 and 2 x 8 x DDR4-2666
    assert math.isclose(a.cpu.mem_bw_gbps, 2 * 6 * 2.4 * 8, rel_tol=1e-3)
    assert math.isclose(b.cpu.mem_bw_gbps, 2 * 8 * 2.6667 * 8, rel_tol=1e-3)


def test_204mhz_variant_scales_only_the_gpu_clock(platforms):
    base, locked = platforms["jetson-xavier-nx"], platforms["jetson-xavier-nx-204mhz"]
    g0, g1 = base.device("gpu"), locked.device("gpu")
    assert g0.peak_tflops.keys() == g1.peak_tflops.keys()
    for dtype, peak in g0.peak_tflops.items():
        assert math.isclose(g1.peak_tflops[dtype], peak * 204 / 1100, rel_tol=2e-3), dtype
    assert math.isclose(g1.peak_tflops["fp16"], 48 * 64 * 2 * 0.204 / 1e3, rel_tol=1e-3)  # 1.25 TFLOPS
    for key in ("mem_capacity_gb", "bw_efficiency", "compute_efficiency", "op_overhead_us",
                "token_tile", "sparse_attn_efficiency", "cores"):
        assert getattr(g0, key) == getattr(g1, key), key
    # the GPU's own memory path runs at the GPU clock: fitted to Ghidorah (preset source), below the DRAM
    assert g1.mem_bw_gbps < g0.mem_bw_gbps
    assert base.cpu == locked.cpu
    assert base.links == locked.links and base.memory_domains == locked.memory_domains


def test_tenstorrent_ring(platforms):
    plat = platforms["tenstorrent-n150x8"]
    chips = [d for d in plat.devices.values() if d.kind == "npu"]
    assert len(chips) == 8 and plat.cpu is None
    for i, chip in enumerate(chips):
        assert chip.token_tile == 32                                        # ALSpec: 32x32 tiles
        assert plat.domain_of(chip.name).devices == (chip.name,)           # own GDDR6 each
        assert plat.has_link(chip.name, chips[(i + 1) % 8].name, kind="ethernet")
        assert sum(1 for l in plat.links if chip.name in (l.src, l.dst)) == 2
    assert chips[0].peak_tflops["fp8"] == 262.0                            # ALSpec App. C.2


def test_h100_gpus_talk_over_nvlink(platforms):
    plat = platforms["h100-sxm"]
    nvlink = plat.link("gpu", "gpu1", kind="nvlink")
    assert nvlink.bw_gbps > plat.link("cpu", "gpu", kind="pcie").bw_gbps
    assert plat.accelerator.name == "gpu"


# ------------------------------------------------------------------------------------- sanity
@pytest.mark.parametrize("name", REQUIRED)
def test_numbers_are_physically_sane(platforms, name):
    plat = platforms[name]
    for dev in plat.devices.values():
        where = f"{name}/{dev.name}"
        assert GB_MIN <= dev.mem_bw_gbps <= GB_MAX, where
        assert 1.0 <= dev.mem_capacity_gb <= 4096.0, where
        assert 0.0 < dev.bw_efficiency <= 1.0 and 0.0 < dev.compute_efficiency <= 1.0, where
        assert 0.0 <= dev.sparse_attn_efficiency < 1.0, where
        assert 0.0 <= dev.op_overhead_us <= US_MAX, where
        assert dev.token_tile in (1, 2, 4, 8, 16, 32, 64, 128), where
        for dtype, peak in dev.peak_tflops.items():
            assert TFLOPS_MIN <= peak <= TFLOPS_MAX, (where, dtype, peak)
        # a lower-precision format is never slower than fp32 on the same device
        if "fp32" in dev.peak_tflops:
            for dtype in ("fp16", "bf16", "fp8", "int8"):
                if dtype in dev.peak_tflops:
                    assert dev.peak_tflops[dtype] >= dev.peak_tflops["fp32"] * (1 - 1e-9), (where, dtype)
    for link in plat.links:
        assert LINK_GB_MIN <= link.bw_gbps <= GB_MAX, (name, link.name)
        assert 0.0 <= link.latency_us <= US_MAX and 0.0 < link.efficiency <= 1.0, (name, link.name)
    for domain in plat.memory_domains:
        assert GB_MIN <= domain.bw_gbps <= GB_MAX, (name, domain.name)
        for member in domain.devices:
            assert plat.device(member).mem_bw_gbps <= domain.bw_gbps * (1 + 1e-9), (name, member)
    covered = {d for dom in plat.memory_domains for d in dom.devices}
    assert covered == set(plat.devices), f"{name}: every device reads some memory domain"


@pytest.mark.parametrize("name", REQUIRED)
def test_a_decode_step_on_the_default_device_respects_the_bandwidth_limit(platforms, name):
    """Llama-2-7B, one token: never faster than reading its weights at the DRAM peak."""
    plat = platforms[name]
    dev = plat.accelerator
    dtype = "fp16" if "fp16" in dev.peak_tflops else next(iter(dev.peak_tflops))
    graph = build_step_graph(get_model("llama2-7b"), 1, 256, 1, dtype)
    total = price_step(graph, dev).total_s
    domain = plat.domain_of(dev.name)
    floor = graph.total_bytes / (min(dev.mem_bw_gbps, domain.bw_gbps) * 1e9)
    assert floor <= total < 10 * floor + 0.5, (name, total, floor)
