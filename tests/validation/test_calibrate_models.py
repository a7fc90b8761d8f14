"""``hetspec calibrate --models`` without ``--device`` (the CPU's operator profile covers the given models' shapes
beside the demo models'; nothing measured here: the measuring functions are replaced), and a profile that lacks
a model's shapes: every operator priced above zero, and ``hetspec step`` / ``predict`` naming the fallback and the
command that would profile it."""

from __future__ import annotations

import json

import pytest

from cli_runner import one_line_error
from gguf_files import TINY, write_tiny_llama
from hwmodels.loader import get_platform, write_platform_file
from sim.model_spec import get_model
from sim.step_graph import build_step_graph, forward_key

#: A profiled model the tiny GGUF model is not: its forward_rest rows are what the tiny model's rest scales from.
OTHER_REST = "L1H64I176h2kv1d32V512"
OTHER_REST_US = 20.0


@pytest.fixture
def no_measuring(monkeypatch, tmp_path):
    """``hetspec calibrate`` with its host measurement replaced (a preset's CPU written as host.toml) and the CPU's
    operator profile replaced by a recorder of the model names it was asked for."""
    from real.validation.calibration import calibrate as cal_mod
    from real.validation.calibration import cpu_profiles

    asked: dict = {}
    host = tmp_path / "host.toml"

    def calibrate(out, **kwargs):
        write_platform_file(get_platform("apple-m2"), out)
        return None, out, None

    monkeypatch.setattr(cal_mod, "calibrate", calibrate)
    monkeypatch.setattr(cal_mod, "summary_lines", lambda platform, cal: ["host measured (test)"])

    def profile_and_write(device_text, model_names, dtype, quick, out, command, *args, **kwargs):
        asked.setdefault("calls", []).append({"device": device_text, "models": model_names and list(model_names),
                                                  "command": command})
        return [f"profiled {device_text} (test)"]

    monkeypatch.setattr(cpu_profiles, "profile_and_write", profile_and_write)
    return host, asked


def _hf_folder(tmp_path):
    folder = tmp_path / "hf-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(get_model("tinyllama-1.1b").to_hf_config()))
    return folder


def test_calibrate_models_puts_gguf_and_hf_paths_into_the_cpu_profile_beside_the_demo_models(no_measuring, tmp_path,
                                                                                             capsys):
    from hetspec.cli import main
    from real.validation.profiler.profile_device import default_models, resolve_models

    host, asked = no_measuring
    gguf = tmp_path / "tiny.gguf"
    write_tiny_llama(gguf)
    folder = _hf_folder(tmp_path)
    assert main(["calibrate", "--models", f"{gguf},{folder}", "--out", str(host)]) == 0
    out = capsys.readouterr().out
    assert "profiled cpu (test)" in out
    [call] = asked["calls"]
    assert call["device"] == "cpu"
    assert call["models"] == default_models("cpu") + [str(gguf), str(folder)]
    assert f"--models {gguf},{folder}" in call["command"]      # the profile's source names what it covers
    keys = {forward_key(spec) for spec in resolve_models(call["models"])}
    want = {forward_key(get_model(str(gguf))), forward_key(get_model("tinyllama-1.1b"))}
    assert want <= keys and len(keys) > len(want)              # the given models' shapes and the demo models'
    assert forward_key(get_model(str(gguf))) == "L2H64I96h4kv2d16V300"


def test_calibrate_without_models_profiles_the_demo_models(no_measuring, capsys):
    from hetspec.cli import main
    from real.validation.profiler.profile_device import default_models

    host, asked = no_measuring
    assert main(["calibrate", "--out", str(host)]) == 0
    capsys.readouterr()
    # no names: profile_and_write's default, the demo models (test_profile_device pins which)
    assert asked["calls"][0]["models"] is None and "--models" not in asked["calls"][0]["command"]
    assert set(default_models("cpu")) <= {"demo:small", "demo:tiny"}


def test_calibrate_models_refuses_bad_names_before_measuring(monkeypatch, tmp_path, capsys):
    from real.validation.calibration import calibrate as cal_mod
    from real.validation.profiler import profile_device

    monkeypatch.setattr(cal_mod, "calibrate", lambda *a, **k: pytest.fail("measured despite a bad --models"))
    monkeypatch.setattr(profile_device, "profile_and_write", lambda *a, **k: pytest.fail("profiled a bad --models"))
    missing = tmp_path / "missing.gguf"
    one_line_error(capsys, "calibrate", "--models", f"demo:tiny,{missing}", match=f"--models {missing}")
    one_line_error(capsys, "calibrate", "--models", str(tmp_path / "nowhere"), match="--models")
    one_line_error(capsys, "calibrate", "--models", "no-such-preset", match="--models no-such-preset")
    one_line_error(capsys, "calibrate", "--models", ",", match="at least one model")
    one_line_error(capsys, "calibrate", "--models", "demo:tiny", "--quick", match="--quick")
    one_line_error(capsys, "calibrate", "--device", "cpu", "--models", str(missing), match=f"--models {missing}")
    one_line_error(capsys, "calibrate", "--dtype", "fp32", match="--dtype goes with --device")


# ---------------------------------------------------------------------------- a profile that lacks a model's shapes
@pytest.fixture(scope="module")
def lacking(tmp_path_factory):
    """(tiny GGUF file, platform file): a CPU profile written as ``hetspec calibrate`` writes one, whose rows
    cover the tiny model's operators except its LM head (64x300) and its forward_rest, with the forward_rest rows of
    another model (:data:`OTHER_REST`)."""
    from real.validation.profiler.profile_device import DeviceProfile, write_device_profile

    folder = tmp_path_factory.mktemp("lacking")
    gguf = folder / "tiny.gguf"
    write_tiny_llama(gguf)
    spec = get_model(str(gguf)).dequantized("fp32")
    tables = {(op.table, op.shape) for op in build_step_graph(spec, 1, 16).ops if op.table}
    rows = []
    for table, shape in sorted(tables):
        if (table, shape) == ("linear", "64x300"):
            continue
        if table == "attention":
            rows += [(table, shape, q, k, 2.0 + 0.01 * q * k, 5.0, 0.0) for k in (64, 256) for q in range(1, 17)]
        else:
            rows += [(table, shape, t, 0, 1.0 + 0.1 * t, 5.0, 0.0) for t in range(1, 17)]
    rows += [("forward_rest", OTHER_REST, t, 0, 0.0, OTHER_REST_US, 0.0) for t in range(1, 17)]
    prof = DeviceProfile(device="cpu", name="Test CPU", dtype="fp32", rows=rows, launch_us={"eager": 5.0},
                         copy_gbps=10.0)
    _, toml = write_device_profile(prof, folder / "profiled-cpu", "the test")
    return gguf, toml


def _step(capsys, *args: str):
    from hetspec.cli import main

    assert main(["step", *args]) == 0
    return capsys.readouterr().out


def test_a_profile_lacking_a_models_shapes_prices_every_operator_above_zero_and_says_so(lacking, capsys):
    gguf, toml = lacking
    args = ("--model", str(gguf), "--platform", str(toml), "--tokens", "4", "--context", "64", "--dtype", "fp32")
    out = json.loads(_step(capsys, *args, "--json"))
    ops = {op["name"]: op for op in out["ops"]}
    # every operator above zero, but the fused parts of a measured attention call (its time is attn_score's)
    fused = {op["name"] for op in out["ops"] if op["source"] == "profile (in the attention call)"}
    assert fused == {"tree_score", "softmax", "attn_value", "tree_value"}
    assert all(op["time_s"] > 0 for op in out["ops"] if op["name"] not in fused), \
        [op["name"] for op in out["ops"] if not op["time_s"] > 0]
    assert ops["q_proj"]["source"] == "profile"
    assert ops["lm_head"]["source"] == "fallback: linear 64x300 not profiled"
    # the tiny model's forward_rest: the other model's rest per layer, times its 2 layers
    rest = ops["forward_rest"]
    assert rest["source"].startswith(f"fallback: forward_rest {forward_key(get_model(str(gguf)))} not profiled")
    assert OTHER_REST in rest["source"]
    assert rest["time_s"] == pytest.approx(TINY["n_layers"] * OTHER_REST_US * 1e-6)
    note = out["fallback"]
    assert note.startswith("fallback: ") and "\n" not in note
    assert "lm_head" in note and "forward_rest" in note and "q_proj" not in note
    assert f"`hetspec calibrate --models {gguf}` would profile them" in note
    fell = [op for op in out["ops"] if op["source"].startswith("fallback")]
    assert f"{len(fell)} of {len(out['ops'])} operators" in note
    # the text output: the same line, once, after the table
    text = _step(capsys, *args).strip().splitlines()
    assert text[-1] == note and sum(line.startswith("fallback: ") for line in text) == 1


def test_the_closed_form_prices_the_fallbacks_as_the_step_does(lacking):
    from hwmodels.contention import standalone_bw
    from hwmodels.loader import load_platform_file
    from sim.closed_form import step_seconds
    from sim.step_timing import price_step

    gguf, toml = lacking
    platform = load_platform_file(toml)
    model = get_model(str(gguf))
    for q in (1, 4, 16, 40):         # 40: beyond every row, the tiny model's rest still scaled from the other's
        want = price_step(build_step_graph(model, q, 64, 1, "fp32"), platform.device("cpu"),
                          standalone_bw(platform, "cpu")).total_s
        assert float(step_seconds(model, platform, "cpu", q, 64, dtype="fp32")) == pytest.approx(want, rel=1e-9)
    # at another dtype than the profile's nothing is looked up, yet the forward_rest is not left at zero
    from dataclasses import replace

    dev = platform.device("cpu")
    dev = replace(dev, peak_tflops={**dev.peak_tflops, "bf16": dev.peak_tflops["fp32"]})
    other = replace(platform, devices={**platform.devices, "cpu": dev})
    priced = price_step(build_step_graph(model, 4, 64, 1, "bf16"), dev, standalone_bw(other, "cpu"))
    rest = next(p for p in priced.ops if p.op.name == "forward_rest")
    assert rest.time_s > 0 and rest.source.startswith("fallback: dtype bf16 (profile is fp32)")
    assert float(step_seconds(model, other, "cpu", 4, 64, dtype="bf16")) == pytest.approx(priced.total_s, rel=1e-9)
    from sim.step_timing import fallback_note

    assert "--dtype fp32 prices them by the profile" in fallback_note(priced, "tiny.gguf")


def test_a_roofline_device_has_no_fallback_line(lacking, capsys):
    gguf, _ = lacking
    out = json.loads(_step(capsys, "--model", str(gguf), "--platform", "a100-80gb-pcie", "--tokens", "4",
                           "--context", "64", "--json"))
    assert out["fallback"] is None       # a roofline device: nothing falls back


def test_predict_names_the_fallback_of_its_best_configuration(lacking, capsys):
    from hetspec.cli import main

    gguf, toml = lacking
    assert main(["predict", "--model", str(gguf), "--platform", str(toml), "--method", "ar", "--context", "64",
                 "--dtype", "fp32"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    [note] = [line for line in lines if line.startswith("fallback: ")]
    assert "lm_head" in note and f"hetspec calibrate --models {gguf}" in note
    assert main(["predict", "--model", str(gguf), "--platform", str(toml), "--method", "ar", "--context", "64",
                 "--dtype", "fp32", "--json", "--no-table"]) == 0
    assert json.loads(capsys.readouterr().out)["fallback"] == note
