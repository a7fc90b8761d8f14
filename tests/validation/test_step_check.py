"""``python -m real.validation.step_check``: a model's predicted ar step against the measured one, on the tiny
demo target (a Hugging Face folder), with a profile that covers its shapes and one that does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from demo_helpers import host_platform_folder

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _write_profile(specs, path: Path) -> None:
    from real.validation.profiler.profile_device import ProfileSettings, profile_device, write_device_profile

    settings = ProfileSettings(tokens=(1, 2, 4), attention_q=(1, 4), attention_keys=(16, 64), repeats=1, calls=2,
                               graph_copies=2)
    write_device_profile(profile_device("cpu", list(specs), settings, progress=False), path,
                         "hetspec calibrate --device cpu (test)")


def test_step_check_prices_by_every_profile_and_flags_the_fallback(tiny_demo, tmp_path, monkeypatch):
    from hwmodels.loader import get_platform
    from real.validation import step_check

    folder = host_platform_folder(tmp_path)
    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", folder)
    _write_profile([tiny_demo.target.spec], Path(folder) / "profiled-cpu")
    other = tmp_path / "other"
    _write_profile([tiny_demo.draft.spec], other)          # the draft's shapes only: the target falls back
    target = str(Path(tiny_demo.folder) / "target")
    out = tmp_path / "check"
    rc = step_check.main(["--model", target, "--dtypes", "fp32", "--devices", "cpu", "--context", "8",
                          "--decode", "4", "--repeats", "2", "--profiled", f"{other}.toml", "--out", str(out)])
    assert rc == 0
    doc = json.loads((out / "results.json").read_text())
    rows = doc["rows"]
    assert [r["pricing"].split(" ")[0] for r in rows] == ["roofline", "profile", "profile"]
    assert all(r["meas_ms"] > 0 and len(r["meas_ms_samples"]) == 2 for r in rows)
    # nothing fitted: each prediction is the simulator's ar step on the calibration alone
    spec = tiny_demo.target.spec
    assert rows[0]["pred_ms"] == pytest.approx(step_check.predict(spec, get_platform("host"), "cpu", 8 + 2)[0])
    assert rows[0]["fallback_share"] == 0.0 and rows[2]["fallback_share"] > step_check.FALLBACK_SHARE
    assert rows[0]["fallback"] is None and rows[0]["target"] == step_check.TARGET
    assert rows[2]["fallback"] and "calibrate --models" in rows[2]["fallback"]
    assert rows[2]["target"] == step_check.FALLBACK_TARGET
    for r in rows:
        assert r["error"] == pytest.approx((r["pred_ms"] - r["meas_ms"]) / r["meas_ms"])
        assert r["judged"] == (r["band"] / 2 < r["target"])
    rec = doc["record"]                                     # what `hetspec reports index` reads
    assert rec["kind"] == "step-check" and len(rec["headline"]) == 3
    assert rec["headline"]["fp32 cpu roofline error %"] == round(100 * rows[0]["error"], 1)
    judged = [r for r in rows if r["judged"]]
    assert f"{sum(r['meets'] for r in judged)} of {len(judged)} judged" in rec["verdict"]
    report = (out / "report.md").read_text()
    assert "Regenerate: `python -m real.validation.step_check --model" in report and "- fallback:" in report
    assert (out / "machine.json").is_file()


@pytest.mark.parametrize("argv, match", [
    (["--repeats", "0"], "--repeats must be"),
    (["--dtypes", "int4"], "--dtypes: 'int4'"),
    (["--devices", "cpu99"], "worker cpu99"),
    (["--model", "/nonexistent/model.gguf"], "no such file"),
    (["--model", "demo:tiny"], "trained here, not a pretrained file"),
    (["--model", "demo:nope"], "nope"),
])
def test_bad_input_is_one_line(tiny_demo, tmp_path, monkeypatch, capsys, argv, match):
    from real.validation import step_check

    monkeypatch.setenv("HETSPEC_PLATFORMS_DIR", host_platform_folder(tmp_path))
    base = {"--model": str(Path(tiny_demo.folder) / "target"), "--out": str(tmp_path / "o")}
    base.update(dict(zip(argv[::2], argv[1::2])))
    rc = step_check.main([x for kv in base.items() for x in kv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and match in err and not (tmp_path / "o").exists()


def test_a_pretrained_preset_names_its_installed_file():
    """``--model demo:smollm2``: the preset's GGUF file where this machine installed it, so a record's command
    names no machine's path."""
    from real.train.demo import get_recipe
    from real.train.pretrained import locate
    from real.validation.step_check import model_path

    path = model_path("demo:smollm2")
    assert path == str(locate(get_recipe("smollm2").target_gguf)) and path.endswith(".gguf")
