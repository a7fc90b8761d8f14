"""Measured operator profiles (hwmodels.profile) and the profiled timing backend (sim.op_timing): the file
format and its one-line errors, interpolation (exact at measured rows, monotone between them, no
smoothing), the fallback and its source, and the CLI (`hetspec profile show`, `hetspec step --json`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetspec.cli import main as hetspec_main
from hwmodels.errors import HetSpecError
from hwmodels.loader import builtin_preset_dir, get_platform, load_platform_file
from hwmodels.profile import COLUMNS, measured_efficiencies, read_profile
from hwmodels.roofline import roofline_time
from sim.model_spec import get_model
from sim.op_timing import lookup, lookup_scalar, op_time
from sim.step_graph import build_step_graph, linear_op
from sim.step_timing import price_step
from paths import DATA

DATA = DATA


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """``hetspec ARGV`` in-process: (exit code, stdout, stderr)."""
    code = hetspec_main(argv)
    out, err = capsys.readouterr()
    return code, out, err


HEADER = """# format: hetspec-op-profile/1
# dtype: fp16
# source: hand-written test fixture
# launch_us.graph: 1.5
# launch_us.graph.source: test
"""
#: Sorted by (op, shape, keys, tokens): rows 1-4 (lines 7-10) attention, rows 5-9 (lines 11-15) linear.
ROWS = """attention,h2kv2d4,1,16,5,-,0
attention,h2kv2d4,8,16,7,-,0
attention,h2kv2d4,1,48,9,-,0
attention,h2kv2d4,8,48,15,-,0
linear,64x128,1,0,10,-,1
linear,64x128,8,0,10,-,1
linear,64x128,16,0,14,-,1
linear,64x128,24,0,30,-,2
linear,64x128,64,0,40,-,2
"""


def fixture(tmp_path, rows: str = ROWS, header: str = HEADER, columns: str = ",".join(COLUMNS)):
    path = tmp_path / "prof.csv"
    path.write_text(header + columns + "\n" + rows)
    return path


# ---------------------------------------------------------------------- the format
def test_a_profile_reads_back_its_rows(tmp_path):
    prof = read_profile(fixture(tmp_path, ROWS))
    assert prof.rows == 9 and prof.dtype == "fp16" and prof.launch_us == {"graph": 1.5}
    lin = prof.table("linear", "64x128")
    assert lin.lines[0][1] == (1, 8, 16, 24, 64) and lin.lines[0][2] == (10, 10, 14, 30, 40)
    assert math.isnan(lin.lines[0][3][0]) and lin.lines[0][4] == (1, 1, 1, 2, 2)
    assert [line[0] for line in prof.table("attention", "h2kv2d4").lines] == [16, 48]


def test_only_a_forward_rest_row_may_carry_a_negative_eager_rest(tmp_path):
    """A forward timed whole faster than its rows leaves a negative rest (the rows were timed slower); any other
    row's eager time below zero contradicts the format."""
    rest = ROWS.replace("linear,64x128,1,", "forward_rest,L2H64I128h4kv2d16V256,1,0,0,-35.5,-\nlinear,64x128,1,")
    assert read_profile(fixture(tmp_path, rest)).table("forward_rest", "L2H64I128h4kv2d16V256").lines[0][3] == (-35.5,)
    with pytest.raises(HetSpecError, match=r"row 6 \(line 12\): eager_launch_us: must be >= 0"):
        read_profile(fixture(tmp_path, ROWS.replace("linear,64x128,8,0,10,-,1", "linear,64x128,8,0,10,-2,1")))


@pytest.mark.parametrize("edit, where", [
    (lambda rows: rows.replace("linear,64x128,16,0,14,", "linear,64x128,16,0,-14,"), "row 7 (line 13): kernel_us: must be >= 0"),
    (lambda rows: rows.replace("linear,64x128,8,0,10,-,1", "linear,64x128,8,0,10,-,-0.5"),
     "row 6 (line 12): graph_launch_us: must be >= 0"),
    (lambda rows: rows.replace("linear,64x128,16,0,14,", "linear,64x128,8,0,14,"),
     "row 7 (line 13): tokens: duplicate key (op linear, shape 64x128, keys 0, tokens 8), first at row 6"),
    (lambda rows: rows.replace("linear,64x128,16,0,14,", "linear,64x128,4,0,14,"),
     "row 7 (line 13): tokens: rows must be sorted by (op, shape, keys, tokens)"),
    (lambda rows: rows.replace("attention,h2kv2d4,1,48,", "attention,h2kv2d4,1,8,"),
     "row 3 (line 9): keys: rows must be sorted"),
    (lambda rows: rows.replace("linear,64x128,24,0,30,", "linear,64x128,24,0,fast,"), "row 8 (line 14): kernel_us: must be a number"),
    (lambda rows: rows.replace("linear,64x128,24,0,30,", "linear,64x128,24,3,30,"), "row 8 (line 14): keys: only attention, draft_pass and verify_pass rows"),
    (lambda rows: rows.replace("linear,64x128,24,0,30,", "linear,64-128,24,0,30,"), "row 8 (line 14): shape:"),
    (lambda rows: rows.replace("linear,64x128,24,0,30,", "linear,64x128,24,0,30,-\n"), "row 8 (line 14): graph_launch_us"),
    (lambda rows: rows.replace("linear,64x128,24,0,30,", "matmul,64x128,24,0,30,"), "row 8 (line 14): op: unknown operator"),
])
def test_a_contradicting_row_fails_with_one_line_naming_file_row_and_field(tmp_path, edit, where):
    path = fixture(tmp_path, edit(ROWS))
    with pytest.raises(HetSpecError) as info:
        read_profile(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: ") and where in message, message


def test_a_missing_column_fails_with_one_line(tmp_path):
    path = fixture(tmp_path, "linear,64x128,1,10,-,1\n", columns="op,shape,tokens,kernel_us,eager_launch_us,graph_launch_us")
    with pytest.raises(HetSpecError, match=r"prof\.csv: header \(line 6\): keys: missing column"):
        read_profile(path)


def test_the_cli_turns_a_bad_profile_into_one_error_line(tmp_path, capsys):
    path = fixture(tmp_path, ROWS.replace(",14,", ",-14,"))
    code, out, err = run_cli(["profile", "show", str(path)], capsys)
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and err.startswith("hetspec: error: ") and "row 7 (line 13): kernel_us" in err


@pytest.mark.parametrize("header, problem", [
    (HEADER.replace("# dtype: fp16\n", ""), "missing '# dtype: ...' line"),
    (HEADER.replace("hetspec-op-profile/1", "hetspec-op-profile/9"), "format must be"),
    (HEADER.replace("# launch_us.graph.source: test\n", ""), "needs a '# launch_us.graph.source"),
    (HEADER + "# launch_cost: 3\n", "unknown key 'launch_cost'"),
])
def test_a_bad_header_fails_with_one_line(tmp_path, header, problem):
    with pytest.raises(HetSpecError, match=problem):
        read_profile(fixture(tmp_path, ROWS, header=header))


# ---------------------------------------------------------------------- interpolation
def test_interpolation_is_exact_at_every_measured_row_of_the_shipped_profiles():
    for name in ("vidur-a100-llama2-7b", "vidur-h100-llama2-7b", "h100-sxm-eager"):
        prof = read_profile(builtin_preset_dir() / "profiles" / f"{name}.csv")
        mode = "eager" if "eager" in name else "graph"
        col = 3 if mode == "eager" else 4
        for (op, shape), table in prof.tables.items():
            for keys, tokens, kernel, eager, graph in table.lines:
                kern, launch, covered = lookup(prof, mode, op, shape, np.array(tokens), keys)
                assert covered.all()
                np.testing.assert_allclose(kern * 1e6, kernel, rtol=1e-12)
                np.testing.assert_allclose(launch * 1e6, (eager, graph)[col - 3], rtol=1e-12)
                for t, k in zip(tokens, kernel):
                    assert lookup_scalar(prof, mode, op, shape, t, keys)[0] * 1e6 == pytest.approx(k, rel=1e-12)


def test_interpolation_is_monotone_between_neighbours_and_keeps_measured_steps():
    prof = read_profile(builtin_preset_dir() / "profiles" / "vidur-a100-llama2-7b.csv")
    for (op, shape), table in prof.tables.items():
        keys, tokens, kernel, _, _ = table.lines[0]
        for (t0, k0), (t1, k1) in zip(zip(tokens, kernel), zip(tokens[1:], kernel[1:])):
            between = np.arange(t0, t1 + 1)
            got = lookup(prof, "graph", op, shape, between)[0] * 1e6
            assert np.all(np.diff(got) * np.sign(k1 - k0) >= -1e-9), (op, shape, t0, t1)
            assert got[0] == pytest.approx(k0) and got[-1] == pytest.approx(k1)
    # the measured step of the 4096x4096 GEMM between 64 and 72 tokens is kept, not smoothed away
    lin = lookup(prof, "graph", "linear", "4096x4096", np.array([56, 64, 72, 80]))[0] * 1e6
    assert lin[2] - lin[1] > 3 * abs(lin[1] - lin[0])


@settings(max_examples=60, deadline=None)
@given(t=st.floats(1, 8), k=st.floats(16, 48))
def test_attention_is_piecewise_linear_in_tokens_and_keys(tmp_path_factory, t, k):
    prof = read_profile(fixture(tmp_path_factory.mktemp("p"), ROWS))
    kern = float(lookup(prof, "graph", "attention", "h2kv2d4", t, k)[0]) * 1e6
    at16 = 5 + (7 - 5) * (t - 1) / 7
    at48 = 9 + (15 - 9) * (t - 1) / 7
    assert kern == pytest.approx(at16 + (at48 - at16) * (k - 16) / 32)
    assert lookup_scalar(prof, "graph", "attention", "h2kv2d4", t, k)[0] * 1e6 == pytest.approx(kern)


def test_outside_the_measured_range_nothing_is_covered(tmp_path):
    prof = read_profile(fixture(tmp_path, ROWS))
    for table, shape, t, k in (("linear", "64x128", 65, 0), ("linear", "64x128", 0.5, 0), ("linear", "64x64", 8, 0),
                               ("attention", "h2kv2d4", 4, 60), ("attention", "h2kv2d4", 9, 30)):
        assert not lookup(prof, "graph", table, shape, t, k)[2]
        assert lookup_scalar(prof, "graph", table, shape, t, k) is None


# ---------------------------------------------------------------------- pricing, fallback, sources
def test_a_profiled_call_costs_its_kernel_plus_the_launch_of_the_mode():
    dev = get_platform("a100-80gb-vidur").device("gpu")
    prof = dev.timing.profile
    op = linear_op("down_proj", 128, 11008, 4096, 2.0, 32)
    timing, source = op_time(op, dev, "fp16")
    assert source == "profile"
    assert timing.time_s == pytest.approx(float(lookup(prof, "graph", "linear", "11008x4096", 128)[0]))


def test_an_uncovered_operator_falls_back_to_the_roofline_at_the_profile_efficiencies_and_says_why():
    dev = get_platform("a100-80gb-vidur").device("gpu")
    eff = measured_efficiencies(dev.timing.profile, dev.mem_bw_gbps, dev.peak_tflops["fp16"])
    assert dev.bw_efficiency == round(eff["bw_efficiency"], 3)
    assert dev.compute_efficiency == round(eff["compute_efficiency"], 3)
    lm_head = linear_op("lm_head", 16, 4096, 32000, 2.0, 1, kind="lm_head", section="post")
    timing, source = op_time(lm_head, dev, "fp16")
    assert source == "fallback: linear 4096x32000 not profiled"
    assert timing == roofline_time(dev, lm_head.flops, lm_head.bytes, "fp16", tokens=16)
    big = linear_op("down_proj", 5000, 11008, 4096, 2.0, 32)
    assert op_time(big, dev, "fp16")[1] == "fallback: 5000 tokens outside the profiled 1..4096"


@pytest.mark.parametrize("rows, problem", [
    (ROWS.replace(",10,-,1", ",0,-,1").replace(",14,-,1", ",0,-,1").replace(",30,-,2", ",0,-,2")
     .replace(",40,-,2", ",0,-,2"), "every linear row's kernel time is zero (each call took no longer than the bare"),
    ("".join(line + "\n" for line in ROWS.splitlines() if line.startswith("attention")), "prof.csv: no linear rows: "),
])
def test_a_profile_without_a_timed_linear_row_cannot_measure_its_efficiencies_and_says_which(tmp_path, rows, problem):
    prof = read_profile(fixture(tmp_path, rows))
    with pytest.raises(HetSpecError) as info:
        measured_efficiencies(prof, 1.0, 1.0)
    assert problem in str(info.value) and "\n" not in str(info.value), str(info.value)
    assert measured_efficiencies(read_profile(fixture(tmp_path, ROWS)), 1.0, 1.0)["bw_where"] == "linear 64x128 at 8 tokens"


def test_the_attention_call_is_priced_once_at_the_operator_that_launches_it():
    dev = load_platform_file(DATA / "h100-sxm-eager.toml").device("gpu")
    graph = build_step_graph(get_model("llama2-7b"), 16, 1008, 1)
    price = {p.op.name: p for p in price_step(graph, dev).ops}
    measured = float(lookup(dev.timing.profile, "eager", "attention", "h32kv32d128", 16, 1024)[0])
    assert price["attn_score"].source == "profile" and price["attn_score"].timing.time_s == pytest.approx(measured)
    for member in ("tree_score", "softmax", "attn_value", "tree_value"):
        assert price[member].time_s == 0.0 and price[member].source == "profile (in the attention call)"


def test_step_json_names_the_source_of_every_operator(capsys):
    code, out, _ = run_cli(["step", "--model", "llama2-7b", "--platform", "a100-80gb-vidur", "--tokens", "16",
                            "--context", "1024", "--json"], capsys)
    assert code == 0
    import json

    ops = {op["name"]: op for op in json.loads(out)["ops"]}
    assert ops["q_proj"]["source"] == "profile" and ops["q_proj"]["bound"] == "measured"
    assert ops["lm_head"]["source"].startswith("fallback: ")
    assert ops["attn_score"]["source"].startswith("fallback: attention h32kv32d128 not profiled")
    code, out, _ = run_cli(["step", "--model", "llama2-7b", "--platform", "a100-80gb-pcie", "--tokens", "16",
                            "--context", "1024", "--json"], capsys)
    assert {op["source"] for op in json.loads(out)["ops"]} == {"roofline"}


def test_profile_show_prints_the_fields_a_profiled_device_carries(capsys):
    code, out, _ = run_cli(["profile", "show", str(builtin_preset_dir() / "profiles" / "vidur-a100-llama2-7b.csv"),
                            "--platform", "a100-80gb-pcie"], capsys)
    assert code == 0
    assert "bw_efficiency = 0.854" in out and "compute_efficiency = 0.796" in out and "op_overhead_us = 0.0" in out


# ---------------------------------------------------------------------- the platform file
def _platform(tmp_path, **edits) -> str:
    text = (builtin_preset_dir() / "a100-80gb-vidur.toml").read_text()
    text = text.replace('value = "profiles/', f'value = "{builtin_preset_dir()}/profiles/')
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "box.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("old, new, problem", [
    ("bw_efficiency = { value = 0.854", "bw_efficiency = { value = 0.67",
     "devices.gpu.bw_efficiency: 0.67, but the profile measures 0.854"),
    ('mode = { value = "graph"', 'mode = { value = "eager"', "devices.gpu.timing.mode: eager:"),
    ('mode = { value = "graph"', 'mode = { value = "jit"', "devices.gpu.timing.mode: unknown mode 'jit'"),
    ('backend = { value = "profiled"', 'backend = { value = "measured"', "unknown backend 'measured'"),
    ("vidur-a100-llama2-7b.csv", "nowhere.csv", "nowhere.csv does not exist"),
    ('profile = { value = "', 'profile = { value = "', None),
])
def test_a_bad_profiled_device_fails_with_one_line(tmp_path, old, new, problem):
    path = _platform(tmp_path, **{old: new})
    if problem is None:
        assert load_platform_file(path).device("gpu").timing.profiled
        return
    with pytest.raises(HetSpecError) as info:
        load_platform_file(path)
    assert problem in str(info.value) and "\n" not in str(info.value)


def test_an_eager_only_profile_cannot_price_graph_mode(tmp_path):
    text = (DATA / "h100-sxm-eager.toml").read_text()
    path = tmp_path / "h.toml"
    text = text.replace('value = "../../hwmodels/', f'value = "{builtin_preset_dir().parent}/')
    path.write_text(text.replace('mode = { value = "eager"', 'mode = { value = "graph"', 1))
    with pytest.raises(HetSpecError, match=r"devices\.gpu\.timing\.mode: graph: .* has no graph_launch_us"):
        load_platform_file(path)
