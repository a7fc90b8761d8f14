"""alspec on the real path: lambda = 0 equals exact decoding; hits take the receiver's output; statistics."""

from __future__ import annotations

import pytest
import torch
from demo_helpers import evaluation_prompts, reference_ids

from hwmodels.errors import HetSpecError
from real.hetero.alspec import AlspecConfig, prepare, sink_window_attention
from real.hetero.runner import agreement, run_runtime
from real.run.worker import allowed_cores

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CORES = allowed_cores()
WORKERS = (f"cpu{CORES[0]}", f"cpu{CORES[-1]}") if len(CORES) > 1 else ("cpu", f"cpu{CORES[0]}")


@pytest.fixture(scope="module")
def setup(tiny_demo):
    prompts = evaluation_prompts(tiny_demo, 3, 48, seed=3)
    return tiny_demo, prompts, reference_ids(tiny_demo, prompts, 24)


def _run(demo, prompts, config):
    with prepare(demo, config) as runtime:
        out = run_runtime(runtime, "alspec", config, prompts, 24, worker=config.workers[0], warmup=False)
        return out, runtime.hit_rate, runtime.hit_rates_by_layer(), list(runtime.rel_errors)


@pytest.mark.parametrize("window", [2, 8])
def test_lambda_zero_equals_exact_decoding(setup, window):
    demo, prompts, reference = setup
    out, hit_rate, by_layer, errors = _run(demo, prompts, AlspecConfig(lam=0.0, window=window, workers=WORKERS,
                                                                       trace_ops=True))
    assert [r.ids for r in out.results] == reference
    assert hit_rate == 0.0 and all(r == 0.0 for r in by_layer)
    assert any(e > 0 for e in errors)       # the approximation was computed and differs: every miss recomputed
    ops = {r.op.split("/")[-1] for r in out.records if r.op}
    assert {"approx", "exact", "post_attn_speculative", "post_attn"} <= ops
    assert {r.device for r in out.records if r.op.endswith("post_attn_speculative")} == {WORKERS[1]}


def test_a_window_covering_the_cache_always_hits_and_stays_exact(setup):
    demo, prompts, reference = setup
    out, hit_rate, _, errors = _run(demo, prompts, AlspecConfig(lam=0.01, window=512, workers=WORKERS))
    assert hit_rate == 1.0 and max(errors) == 0.0
    assert [r.ids for r in out.results] == reference      # the receiver's output was used, and it is exact


def test_hit_rate_grows_with_lambda(setup):
    demo, prompts, _ = setup
    rates = [_run(demo, prompts, AlspecConfig(lam=lam, window=4, workers=WORKERS))[1] for lam in (0.02, 0.3, 1e9)]
    assert rates[0] <= rates[1] <= rates[2] == 1.0


def test_sink_window_attention_selects_first_and_last_slots():
    from real.model.transformer import KVCache
    from sim.model_spec import ModelSpec

    spec = ModelSpec(name="t", n_layers=1, hidden=8, intermediate=16, n_heads=2, n_kv_heads=1, vocab=11,
                     dtype="fp32", arch="llama", max_position=64)
    cache = KVCache(spec, 32)
    cache.k.normal_()
    cache.v.normal_()

    class Attn:
        n_heads, n_kv, hd = 2, 1, 4
    xq = torch.randn(1, 2, 1, 4)
    got = sink_window_attention(Attn, xq, cache, 0, 20, 3)
    keep = [0, 1, 2, 17, 18, 19]
    ref = torch.nn.functional.scaled_dot_product_attention(xq, cache.k[0, :, :, keep], cache.v[0, :, :, keep],
                                                           enable_gqa=True)
    assert torch.allclose(got, ref.transpose(1, 2).reshape(1, 1, 8))


def test_agreement_metric():
    a = agreement([[1, 2, 3, 4], [5, 6]], [[1, 2, 9, 4], [5, 6]])
    assert a["positionwise"] == pytest.approx(5 / 6) and a["prefix_fraction"] == pytest.approx((0.5 + 1.0) / 2)
    assert (a["identical_prompts"], a["prompts"]) == (1, 2)


@pytest.mark.parametrize("kwargs,message", [
    ({"lam": -0.1}, "lambda must be a number >= 0"),
    ({"window": 0}, "window S must be an integer >= 1"),
    ({"workers": ("cpu0", "cpu0")}, "two different workers"),
])
def test_alspec_config_errors(kwargs, message):
    with pytest.raises(HetSpecError, match=message):
        AlspecConfig(**kwargs)
