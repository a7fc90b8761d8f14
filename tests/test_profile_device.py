"""``hetspec calibrate --device D``: the measured operator profile of a torch device and its platform."""

from __future__ import annotations

import math

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
    from real.validation.profile_device import ProfileSettings, profile_device, write_device_profile

    settings = ProfileSettings(tokens=(1, 2, 8), attention_q=(1, 4), attention_keys=(8, 16), repeats=1, calls=2,
                               graph_copies=2)
    prof = profile_device("cpu", [SPEC], settings, progress=False)
    out = tmp_path_factory.mktemp("profile") / "probe-cpu"
    csv_path, toml_path = write_device_profile(prof, out, "hetspec calibrate --device cpu (test)")
    return prof, csv_path, toml_path


def test_the_profile_covers_the_step_graph_operators_at_every_token_count(tiny_profile):
    prof, csv_path, _ = tiny_profile
    from hwmodels.profile import read_profile

    profile = read_profile(csv_path)
    for key in (("linear", "64x64"), ("linear", "64x32"), ("linear", "64x128"), ("linear", "128x64"),
                ("linear", "64x256"), ("norm", "64"), ("add", "64"), ("act_mul", "128")):
        table = profile.table(*key)
        assert table is not None, key
        assert table.lines[0][1] == (1, 2, 8), key
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


def test_bad_devices_are_one_line():
    from real.validation.profile_device import parse_device

    with pytest.raises(HetSpecError, match="give cpu, cuda or cuda:N"):
        parse_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(HetSpecError, match="no CUDA device"):
            parse_device("cuda:0")


def test_cli_errors_are_one_line_exit_2():
    proc = run_cli("calibrate", "--models", "llama2-7b")
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "hetspec: error: --models and --dtype go with --device (the operator profile of a torch device)")
    proc = run_cli("calibrate", "--device", "tpu:0")
    assert proc.returncode == 2 and "give cpu, cuda or cuda:N" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("extra", [(), ("--device", "cpu")])
def test_a_platform_file_that_cannot_be_written_fails_before_measuring(tmp_path, extra):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = run_cli("calibrate", "--out", str(blocker / "host.toml"), *extra, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"hetspec: error: cannot write platform file {blocker / 'host.toml'}: {blocker} is a file, not a folder")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_profile_has_graph_and_eager_launch_costs(tmp_path):
    from real.validation.profile_device import ProfileSettings, profile_device

    settings = ProfileSettings(tokens=(1, 8), attention_q=(1,), attention_keys=(16,), repeats=1, calls=2,
                               graph_copies=4)
    prof = profile_device("cuda:0", [SPEC], settings, progress=False)
    assert {"eager", "graph"} <= set(prof.launch_us) and prof.links
    assert all(not math.isnan(r[6]) for r in prof.rows)
