"""Platform files in the user's platform folder: names, bad files, derived dtype peaks."""

from __future__ import annotations

import pytest
import tomli_w

from hetspec.cli import main
from hwmodels.errors import HetSpecError
from hwmodels.loader import get_platform, load_platform_file, parse_platform, platform_names, platform_to_dict


def _doc(name: str = "a100-80gb-pcie") -> dict:
    return platform_to_dict(get_platform(name))


def _write(folder, stem: str, doc: dict) -> None:
    (folder / f"{stem}.toml").write_text(tomli_w.dumps(doc))


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", str(tmp_path))
    return tmp_path


# ---------------------------------------------------------------------- a name that differs from the file name
def test_user_platform_is_named_by_its_file(user_dir, capsys):
    doc = _doc()
    doc["name"] = "host"                       # e.g. a calibrated host.toml kept under another name
    _write(user_dir, "old-host", doc)
    plat = get_platform("old-host")
    assert plat.name == "old-host"             # the name every table prints is the one that finds it
    assert get_platform(plat.name).devices == plat.devices
    assert load_platform_file(user_dir / "old-host.toml").name == "old-host"
    with pytest.raises(HetSpecError, match="old-host.toml declares that name.*'old-host'"):
        get_platform("host")
    assert main(["platforms"]) == 0
    assert "old-host" in capsys.readouterr().out


def test_a_file_given_by_path_keeps_its_declared_name(tmp_path):
    doc = _doc()
    doc["name"] = "declared"
    _write(tmp_path, "elsewhere", doc)
    assert get_platform(str(tmp_path / "elsewhere.toml")).name == "declared"


# ---------------------------------------------------------------------- one bad file among good ones
def test_a_bad_user_file_is_named_and_the_others_are_listed(user_dir, capsys):
    _write(user_dir, "my-box", _doc())
    (user_dir / "broken.toml").write_text("name = [unclosed\n")
    assert main(["platforms"]) == 0
    out, err = capsys.readouterr()
    assert "my-box" in out and "a100-80gb-pcie" in out and "broken" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hetspec: warning:") and "broken.toml" in lines[0]
    # asking for the bad one by name still fails with its one-line error
    assert main(["platform", "show", "broken"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hetspec: error:") and "broken.toml" in err[0]


def test_sweep_over_all_platforms_skips_a_bad_file_and_says_so(user_dir, tmp_path, capsys):
    (user_dir / "broken.toml").write_bytes(b"\xff\xfe not text")
    out = tmp_path / "out" / "t.csv"
    assert main(["sweep", "--models", "tinyllama-1.1b", "--platforms", "all", "--methods", "ar",
                 "--out", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "broken.toml" in err and "hetspec: warning:" in err
    import pandas as pd

    assert set(pd.read_csv(out)["platform"]) >= {"a100-80gb-pcie"}


# ---------------------------------------------------------------------- derived peaks (host calibration: fp32 only)
def _fp32_only_cpu(doc: dict, derived: dict | None) -> dict:
    cpu = doc["devices"]["cpu"]
    cpu["peak_tflops"] = {"fp32": cpu["peak_tflops"]["fp32"]}
    if derived is not None:
        cpu["derived_peak_tflops"] = derived
    return doc


DERIVED = {dt: {"from": "fp32", "factor": 1.0, "source": "not measured: fp16 GEMMs computed in fp32"}
           for dt in ("fp16", "bf16")}


def test_a_device_carries_peaks_derived_from_fp32(user_dir, capsys):
    _write(user_dir, "fp32box", _fp32_only_cpu(_doc(), DERIVED))
    cpu = get_platform("fp32box").device("cpu")
    assert cpu.peak_flops_per_s("fp16") == cpu.peak_flops_per_s("fp32")
    assert cpu.derived_peaks == {"fp16": ("fp32", 1.0), "bf16": ("fp32", 1.0)}
    assert cpu.measured_peaks == {"fp32": cpu.peak_tflops["fp32"]}
    assert "derived" in cpu.sources["peak_tflops.fp16"]
    # written back as derived, not as a measured peak
    again = parse_platform(platform_to_dict(get_platform("fp32box")), "again").device("cpu")
    assert again == cpu
    assert main(["platform", "show", "fp32box"]) == 0
    assert "fp16 5.02 (derived from fp32)" in capsys.readouterr().out
    # an fp16 model on the CPU prices with the derived peak
    assert main(["predict", "--model", "tinyllama-1.1b", "--platform", "fp32box", "--method", "ar",
                 "--device", "cpu", "--json"]) == 0


def test_without_a_derived_peak_the_missing_dtype_is_one_line(user_dir, capsys):
    _write(user_dir, "fp32box", _fp32_only_cpu(_doc(), None))
    assert main(["predict", "--model", "tinyllama-1.1b", "--platform", "fp32box", "--method", "ar",
                 "--device", "cpu"]) == 2
    assert "no peak FLOP/s for dtype 'fp16'" in capsys.readouterr().err


@pytest.mark.parametrize("entry, field", [
    ({"fp16": {"from": "int8", "factor": 1.0, "source": "x"}}, "derived_peak_tflops.fp16.from"),
    ({"fp16": {"from": "fp32", "factor": 0, "source": "x"}}, "derived_peak_tflops.fp16.factor"),
    ({"fp16": {"from": "fp32", "factor": 1.0, "source": " "}}, "derived_peak_tflops.fp16.source"),
    ({"fp32": {"from": "fp32", "factor": 1.0, "source": "x"}}, "derived_peak_tflops.fp32"),
    ({"fp99": {"from": "fp32", "factor": 1.0, "source": "x"}}, "derived_peak_tflops.fp99"),
    ({"fp16": {"from": "fp32", "source": "x"}}, "derived_peak_tflops.fp16"),
])
def test_bad_derived_peaks_name_the_field(tmp_path, entry, field):
    _write(tmp_path, "bad", _fp32_only_cpu(_doc(), entry))
    with pytest.raises(HetSpecError, match=f"devices.cpu.{field}") as info:
        load_platform_file(tmp_path / "bad.toml")
    assert "\n" not in str(info.value)


def test_platform_names_still_list_every_file(user_dir):
    (user_dir / "broken.toml").write_text("x = 1\n")
    assert "broken" in platform_names()        # listed by name, fails with its own line when loaded
    with pytest.raises(HetSpecError, match="broken.toml"):
        get_platform("broken")


def test_a_sweep_says_which_platform_it_skipped_and_why(user_dir, tmp_path, capsys):
    _write(user_dir, "fp32box", _fp32_only_cpu(_doc(), None))       # a host calibrated before derived peaks
    _write(user_dir, "host", _fp32_only_cpu(_doc(), DERIVED))
    out = tmp_path / "t.csv"
    assert main(["sweep", "--models", "tinyllama-1.1b", "--platforms", "fp32box,host", "--methods", "ar",
                 "--device", "cpu", "--out", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["hetspec: skipped tinyllama-1.1b on fp32box (ar; 1 problem): device cpu has no peak FLOP/s for "
                   "dtype 'fp16'; it has: fp32"]
    import pandas as pd

    assert list(pd.read_csv(out)["platform"]) == ["host"]      # the derived fp16 peak prices it
