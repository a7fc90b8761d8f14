"""A dtype's own streamed GEMM curve: it prices that dtype's streamed linears (start-up of the rows
included, so no row cost on top), leaves every other dtype, resident and batched GEMMs to the fp32
curves, prices alike in the scalar roofline and the closed form, and round-trips through a preset file."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hwmodels.contention import standalone_bw
from hwmodels.errors import HetSpecError, PresetError
from hwmodels.loader import get_platform, load_platform_file, platform_to_dict, write_platform_file
from hwmodels.platform import Device
from hwmodels.roofline import roofline_time
from sim.closed_form import step_seconds
from sim.model_spec import get_model
from sim.step_graph import build_step_graph
from sim.step_timing import price_step

A100 = get_platform("a100-80gb-pcie")
FP32_EFF = ((1, 0.05), (8, 0.3), (64, 0.6))
ROWS = ((1, 100.0), (8, 20.0))
BF16_EFF = ((1, 0.5), (4, 0.25), (64, 0.9))


def _device(**extra) -> Device:
    return Device(name="cpu", kind="cpu", peak_tflops={"fp32": 0.2, "bf16": 0.4, "fp16": 0.04}, mem_bw_gbps=20.0,
                  mem_capacity_gb=16.0, bw_efficiency=1.0, compute_efficiency=1.0, op_overhead_us=10.0,
                  token_tile=1, sparse_attn_efficiency=0.0, gemm_efficiency_curve=FP32_EFF, gemm_row_ns_curve=ROWS,
                  cache_gemm_efficiency_curve=((1, 0.7),), cache_gb=0.03, cache_bw_gbps=100.0,
                  dtype_gemm_efficiency_curves={"bf16": BF16_EFF}, **extra)


def test_a_streamed_linear_in_a_dtype_with_its_own_curve_pays_that_curve_and_no_row_cost():
    dev = _device()
    flops, nbytes, rows = 2.0 * 4 * 1024 * 1024, 1024 * 1024 * 2.0, 1024
    for tokens, eff in ((1, 0.5), (4, 0.25), (16, 0.25), (256, 0.9)):
        got = roofline_time(dev, flops * tokens / 4, nbytes, "bf16", tokens=tokens, rows=rows)
        assert got.compute_s == pytest.approx(flops * tokens / 4 / (0.4e12 * eff), rel=1e-12)
    # fp16 has no curve of its own: fp32's curve on its own peak, plus the rows' start-up
    fp16 = roofline_time(dev, flops, nbytes, "fp16", tokens=1, rows=rows)
    assert fp16.compute_s == pytest.approx(flops / (0.04e12 * 0.05) + rows * 100e-9, rel=1e-12)
    fp32 = roofline_time(dev, flops, nbytes, "fp32", tokens=1, rows=rows)
    assert fp32.compute_s == pytest.approx(flops / (0.2e12 * 0.05) + rows * 100e-9, rel=1e-12)
    # weights in the cache, and a batched GEMM, keep their own curves in every dtype
    resident = roofline_time(dev, flops, nbytes, "bf16", tokens=1, rows=rows, resident=True)
    assert resident.compute_s == pytest.approx(flops / (0.4e12 * 0.7), rel=1e-12)
    batched = roofline_time(dev, flops, nbytes, "bf16", tokens=1, rows=rows, batched=True)
    assert batched.compute_s == pytest.approx(flops / (0.4e12 * 0.05) + rows * 100e-9, rel=1e-12)
    assert dev.row_start_s(1, rows, dtype="bf16") == 0.0 and dev.row_start_s(1, rows, dtype="fp32") > 0


@pytest.mark.parametrize("context", [0, 300])
def test_the_closed_form_prices_a_dtype_curve_as_the_step_graph_does(context):
    dev = replace(A100.devices["cpu"], gemm_efficiency_curve=FP32_EFF, gemm_row_ns_curve=ROWS,
                  dtype_gemm_efficiency_curves={"bf16": BF16_EFF})
    plat = replace(A100, devices={**A100.devices, "cpu": dev})
    for dtype in ("bf16", "fp16"):
        model = replace(get_model("llama-68m"), dtype=dtype)
        for q in (1, 3, 70):
            want = price_step(build_step_graph(model, q, context), dev, standalone_bw(plat, "cpu")).total_s
            assert step_seconds(model, plat, "cpu", q, context) == pytest.approx(want, rel=1e-9)
    bf16 = replace(get_model("llama-68m"), dtype="bf16")
    without = replace(plat, devices={**A100.devices, "cpu": replace(dev, dtype_gemm_efficiency_curves={})})
    assert step_seconds(bf16, plat, "cpu", 1, context) != step_seconds(bf16, without, "cpu", 1, context)


def test_a_curve_for_a_dtype_without_a_peak_is_refused():
    with pytest.raises(HetSpecError, match="dtype_gemm_efficiency_curve for 'int8'"):
        replace(_device(), dtype_gemm_efficiency_curves={"int8": BF16_EFF})


def test_dtype_curves_round_trip_through_a_preset_file(tmp_path):
    dev = replace(_device(), sources={"dtype_gemm_efficiency_curve.bf16": "measured: a test"})
    plat = replace(A100, name="t", devices={"cpu": dev}, links=(), memory_domains=(), loop_costs={})
    path = write_platform_file(plat, tmp_path / "t.toml")
    back = load_platform_file(path).device("cpu")
    assert back.dtype_gemm_efficiency_curves == {"bf16": BF16_EFF}
    assert back.sources["dtype_gemm_efficiency_curve.bf16"] == "measured: a test"
    assert platform_to_dict(load_platform_file(path)) == platform_to_dict(plat)


@pytest.mark.parametrize("entry, message", [
    ('int8 = { value = [[1, 0.5]], source = "x" }', "dtype_gemm_efficiency_curve.int8: no peak for this dtype"),
    ('bf16 = { value = [[1, 1.5]], source = "x" }', "dtype_gemm_efficiency_curve.bf16: needs tokens >= 1 and "
                                                    "efficiencies in (0, 1]"),
    ('bf16 = { value = [[1, 0.5]] }', "dtype_gemm_efficiency_curve.bf16"),
])
def test_a_bad_dtype_curve_fails_naming_the_field(tmp_path, entry, message):
    plat = replace(A100, name="t", devices={"cpu": replace(_device(), dtype_gemm_efficiency_curves={})}, links=(),
                   memory_domains=(), loop_costs={})
    path = write_platform_file(plat, tmp_path / "t.toml")
    path.write_text(path.read_text() + f"\n[devices.cpu.dtype_gemm_efficiency_curve]\n{entry}\n")
    with pytest.raises(PresetError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        load_platform_file(path)
