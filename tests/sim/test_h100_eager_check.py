"""The H100 eager check: HetSpec's own eager model (real.model.transformer.Transformer, fp16, Llama-2-7B and
TinyLlama-1.1B shapes) predicted from launch-inclusive operator calls, against its measured forward.

Both files were measured on one NVIDIA H100 80GB HBM3 SXM5 with torch 2.11.0+cu130 by this
project's GPU operator probe (hwmodels/presets/profiles/sources/): the operators one at a time from Python
(CUDA events, launch included), and one eager forward of the model at q new tokens (causal tree mask) over
s cached tokens. The profile is their import as launch-inclusive eager calls (mode eager,
tests/data/h100-sxm-eager.toml); the step graph, its eager kernel counts (Op.eager_launches) and the eager
model's extra operators (StepGraph.eager_ops) give the forward.

Tolerance: the median |error| over the 27 rows within 15 %; Llama-2-7B's median error within +-10 %;
TinyLlama's within -30 % .. 0 (it is under-predicted by about a quarter: a per-layer host cost the isolated
calls do not show, see docs/simulator.md); every row within 40 % (the measurement itself scatters: the same
7B step at s = 2048 took 26.6 to 38.9 ms for q = 16..128). Without counting what the eager model launches
(the step graph's 14 launches per layer; the eager model's are 40), the miss is over 40 %.
"""

from __future__ import annotations

import csv
import dataclasses
import statistics
from pathlib import Path

import pytest

from hwmodels.loader import builtin_preset_dir, load_platform_file
from sim.model_spec import get_model
from sim.op_timing import op_time
from sim.step_graph import build_step_graph
from sim.step_timing import price_step
from paths import DATA

DATA = DATA
STEPS = builtin_preset_dir() / "profiles" / "sources" / "h100-hetspec-model-eager-steps.csv"
DEVICE = load_platform_file(DATA / "h100-sxm-eager.toml").device("gpu")


def measured() -> list[tuple[str, int, int, float]]:
    with STEPS.open() as f:
        return [(r["model"], int(r["q"]), int(r["s"]), float(r["eager_ms"])) for r in csv.DictReader(f)]


def predicted_ms(model: str, q: int, s: int) -> float:
    return price_step(build_step_graph(get_model(model), q, s, 1), DEVICE).total_s * 1e3


def uncounted_ms(model: str, q: int, s: int) -> float:
    """The step graph's own operators and launch counts only (no eager kernels, no extra operators)."""
    graph = build_step_graph(get_model(model), q, s, 1)
    return sum(op_time(dataclasses.replace(op, eager_launches=None), DEVICE, graph.dtype)[0].time_s * op.count
               for op in graph.ops) * 1e3


def errors(predict) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for model, q, s, ms in measured():
        out.setdefault(model, []).append(predict(model, q, s) / ms - 1.0)
    return out


def test_the_measurement_has_the_rows_of_both_models():
    rows = measured()
    assert len(rows) == 27 and {r[0] for r in rows} == {"llama2-7b", "tinyllama-1.1b"}


def test_the_eager_forward_is_predicted_within_the_stated_tolerance():
    err = errors(predicted_ms)
    every = [e for v in err.values() for e in v]
    assert statistics.median(abs(e) for e in every) <= 0.15
    assert abs(statistics.median(err["llama2-7b"])) <= 0.10
    assert -0.30 <= statistics.median(err["tinyllama-1.1b"]) <= 0.0
    assert max(abs(e) for e in every) <= 0.40


def test_counting_what_the_eager_model_launches_is_what_closes_the_gap():
    before = [e for v in errors(uncounted_ms).values() for e in v]
    after = [e for v in errors(predicted_ms).values() for e in v]
    assert statistics.median(abs(e) for e in before) > 0.40
    assert statistics.median(abs(e) for e in after) < statistics.median(abs(e) for e in before) / 3


@pytest.mark.parametrize("model", ["llama2-7b", "tinyllama-1.1b"])
def test_most_of_an_eager_forward_is_launches(model):
    price = price_step(build_step_graph(get_model(model), 16, 256, 1), DEVICE)
    launches = sum(p.timing.overhead_s * p.op.count for p in price.ops if p.source.startswith("fallback"))
    measured_calls = sum(p.time_s for p in price.ops if p.source == "profile")   # launch-inclusive calls
    assert launches + measured_calls == pytest.approx(price.total_s, rel=0.02)
    assert launches / price.total_s > 0.5
