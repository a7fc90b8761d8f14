"""``hetspec profile import-vidur`` / ``import-probe``: Vidur's profile format (Agrawal et al., "Vidur: A
Large-Scale Simulation Framework for LLM Inference", MLSys 2024; microsoft/vidur, MIT licence) and the GPU
operator probe's CSV into HetSpec profiles, on small hand-written fixtures; the shipped profiles are what the
importers make of the shipped sources."""

from __future__ import annotations

import math

import pytest

from hetspec.cli import main as hetspec_main
from hwmodels.errors import HetSpecError
from hwmodels.loader import builtin_preset_dir
from hwmodels.profile import read_profile
from sim.profile_import import import_probe, import_vidur

OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
       "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
STATS = ("min", "max", "mean", "median", "std")
#: Vidur's mlp.csv columns, as its profiler writes them (time_stats per operator, then the model and batch).
MLP_HEADER = ",".join([f"time_stats.{op}.{st}" for op in OPS for st in STATS]
                      + ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp", "num_tokens",
                         "num_tensor_parallel_workers"])
#: A GQA model of width 64: 4 heads of 16, 2 KV heads; gated MLP of 128. Medians in ms, per operator:
#: emb, input_layernorm, attn_pre_proj (64 -> 128: q 64 + k 32 + v 32), attn_rope, attn_post_proj (64 -> 64),
#: post_attention_layernorm, mlp_up_proj (64 -> 256: gate + up), mlp_act, mlp_down_proj (128 -> 64), add.
MEDIANS = {
    1: (0.002, 0.004, 0.008, 0.003, 0.005, 0.006, 0.012, 0.002, 0.007, 0.001),
    2: (0.002, 0.004, 0.008, 0.003, 0.005, 0.006, 0.012, 0.002, 0.007, 0.001),
    4: (0.003, 0.005, 0.010, 0.004, 0.006, 0.007, 0.016, 0.003, 0.009, 0.002),
}


def vidur_row(tokens: int, medians, tp: int = 1) -> str:
    cells = []
    for m in medians:   # min, max, mean around the median, a small std (the importer reads the median)
        cells += [f"{m * 0.9:.6f}", f"{m * 1.1:.6f}", f"{m:.6f}", f"{m:.6f}", "0.0001"]
    return ",".join(cells + ["4", "2", "64", "128", "32768", "True", str(tokens), str(tp)])


@pytest.fixture()
def mlp_csv(tmp_path):
    rows = [vidur_row(4, MEDIANS[4]),
            vidur_row(4, tuple(m + 0.002 for m in MEDIANS[4])),     # Vidur repeats some token counts
            vidur_row(2, MEDIANS[2]), vidur_row(1, MEDIANS[1]),
            vidur_row(1, tuple(9.0 for _ in OPS), tp=2)]               # another parallelism: not this profile
    path = tmp_path / "mlp.csv"
    path.write_text(MLP_HEADER + "\n" + "\n".join(rows) + "\n")
    return path


ATTENTION = """time_stats.attn_prefill.median,time_stats.attn_decode.median,n_embd,n_q_head,n_kv_head,block_size,num_tensor_parallel_workers,max_model_len,batch_size,prefill_chunk_size,kv_cache_size,is_prefill,attention_backend
0.020,,64,4,2,16,1,4096,1,16,0,True,AttentionBackend.FLASHINFER
0.024,,64,4,2,16,1,4096,1,16,32,True,AttentionBackend.FLASHINFER
,0.011,64,4,2,16,1,4096,1,0,32,False,AttentionBackend.FLASHINFER
,0.013,64,4,2,16,1,4096,2,0,32,False,AttentionBackend.FLASHINFER
,5.0,64,4,2,16,2,4096,1,0,32,False,AttentionBackend.FLASHINFER
"""


def rows_of(profile, op, shape, keys=0):
    for line in profile.table(op, shape).lines:
        if line[0] == keys:
            return dict(zip(line[1], line[2])), line[3], line[4]
    raise AssertionError(f"no {op} {shape} keys {keys}")


def test_vidur_mlp_becomes_the_step_graphs_operators(mlp_csv, tmp_path):
    out = tmp_path / "p.csv"
    summary = import_vidur(mlp_csv, None, out, "fixture GPU", "hand-written fixture")
    prof = read_profile(out)
    assert prof.dtype == "fp16" and prof.launch_us == {"graph": 0.0} and summary["repeated_token_counts"] == [4]
    assert summary["shares_replaced_by_direct_rows"] == ["linear 64x64"]
    # o_proj (attn_post_proj) is the measured 64x64 GEMM; q's share of the fused q/k/v GEMM is not used
    assert rows_of(prof, "linear", "64x64")[0] == pytest.approx({1: 5.0, 2: 5.0, 4: 7.0})
    # k and v: 32 of the fused GEMM's 128 output columns each
    assert rows_of(prof, "linear", "64x32")[0] == pytest.approx({1: 2.0, 2: 2.0, 4: 2.75})
    # gate and up: half of the fused 64 -> 256 GEMM each (the repeated 4-token rows, 16 and 18 us, averaged)
    assert rows_of(prof, "linear", "64x128")[0] == pytest.approx({1: 6.0, 2: 6.0, 4: 8.5})
    assert rows_of(prof, "linear", "128x64")[0] == pytest.approx({1: 7.0, 2: 7.0, 4: 10.0})
    # one norm kernel on one shape: the mean of Vidur's two layernorms
    assert rows_of(prof, "norm", "64")[0] == pytest.approx({1: 5.0, 2: 5.0, 4: 7.0})
    assert rows_of(prof, "rope", "h4kv2d16")[0] == pytest.approx({1: 3.0, 2: 3.0, 4: 5.0})
    assert rows_of(prof, "act_mul", "128")[0][4] == pytest.approx(4.0)
    assert set(rows_of(prof, "add", "64")[0]) == {1, 2, 4} and set(rows_of(prof, "embedding", "64")[0]) == {1, 2, 4}
    kernel, eager, graph = rows_of(prof, "linear", "64x32")
    assert all(math.isnan(e) for e in eager) and set(graph) == {0.0}     # kernel time only: no eager launch known
    assert sorted(prof.tables) == sorted([("linear", "64x64"), ("linear", "64x32"), ("linear", "64x128"),
                                          ("linear", "128x64"), ("norm", "64"), ("rope", "h4kv2d16"),
                                          ("act_mul", "128"), ("add", "64"), ("embedding", "64")])


def test_vidur_attention_rows_become_attention_by_queries_and_keys(mlp_csv, tmp_path):
    attention = tmp_path / "attention.csv"
    attention.write_text(ATTENTION)
    out = tmp_path / "p.csv"
    import_vidur(mlp_csv, attention, out, "", "fixture")
    prof = read_profile(out)
    assert rows_of(prof, "attention", "h4kv2d16", keys=16)[0] == {16: 20.0}     # prefill: 16 over 0 cached
    assert rows_of(prof, "attention", "h4kv2d16", keys=48)[0] == {16: 24.0}     # 16 over 32 cached
    assert rows_of(prof, "attention", "h4kv2d16", keys=33)[0] == {1: 11.0}      # decode: 1 over 32
    assert rows_of(prof, "attention", "h4kv2d16b2", keys=33)[0] == {1: 13.0}    # decode, batch 2


def test_the_cli_imports_vidur(mlp_csv, tmp_path, capsys):
    out = tmp_path / "cli.csv"
    assert hetspec_main(["profile", "import-vidur", str(mlp_csv), "--out", str(out)]) == 0
    assert f"wrote {out}: " in capsys.readouterr().out
    assert "Vidur profile (mlp.csv)" in read_profile(out).source


@pytest.mark.parametrize("edit, problem", [
    (lambda text: text.replace("time_stats.mlp_act.median,", "time_stats.mlp_act.p50,"),
     "header: time_stats.mlp_act.median: missing column"),
    (lambda text: text.replace(",True,2,1", ",True,two,1"), "row 3: num_tokens: must be a number"),
    (lambda text: text.replace(",64,128,32768,True,1,1", ",96,128,32768,True,1,1"), "n_embd: one model per file"),
])
def test_a_bad_vidur_file_fails_with_one_line(mlp_csv, tmp_path, edit, problem):
    mlp_csv.write_text(edit(mlp_csv.read_text()))
    with pytest.raises(HetSpecError, match=problem):
        import_vidur(mlp_csv, None, tmp_path / "p.csv", "", "fixture")


def test_the_probe_import_is_launch_inclusive_for_eager_mode(tmp_path):
    events = tmp_path / "events.csv"
    events.write_text("op,shape,q,s,ms\nlinear,64x64,1,0,0.03\nlinear,64x64,8,0,0.032\n"
                      "sdpa_mask_x,h4kv2d16,1,256,0.06\nsdpa_nomask_x,h4kv2d16,1,256,0.03\n"
                      "rmsnorm_eager,64,1,0,0.07\ntiny_op,8,1,0,0.011\nh2d_pinned,4096,1,0,0.02\n")
    summary = import_probe(events, tmp_path / "p.csv", "GPU", "fixture")
    prof = read_profile(tmp_path / "p.csv")
    assert summary["launch_us.eager"] == pytest.approx(10.0)          # 70 us over the RMSNorm's 7 kernels
    assert prof.launch_us == {"eager": pytest.approx(10.0)} and "graph" not in prof.launch_us
    kernel, eager, graph = rows_of(prof, "linear", "64x64")
    assert kernel == {1: 30.0, 8: 32.0} and set(eager) == {0.0} and all(math.isnan(g) for g in graph)
    assert rows_of(prof, "attention", "h4kv2d16", keys=256)[0] == {1: 60.0}
    assert summary["skipped"] == {"sdpa_nomask_x": 1, "tiny_op": 1, "h2d_pinned": 1}


@pytest.mark.parametrize("name, importer, sources", [
    ("vidur-a100-llama2-7b", "vidur", ("vidur-a100-llama2-7b-mlp-tp1.csv",)),
    ("vidur-h100-llama2-7b", "vidur", ("vidur-h100-llama2-7b-mlp-tp1.csv",)),
    ("h100-sxm-eager", "probe", ("h100-ops-eager-events.csv",)),
])
def test_the_shipped_profiles_are_the_importers_output_of_the_shipped_sources(tmp_path, name, importer, sources):
    here = builtin_preset_dir() / "profiles"
    shipped = read_profile(here / f"{name}.csv")
    src = here / "sources" / sources[0]
    if importer == "vidur":
        import_vidur(src, None, tmp_path / "p.csv", shipped.device, shipped.source)
    else:
        import_probe(src, tmp_path / "p.csv", shipped.device, shipped.source)
    assert (tmp_path / "p.csv").read_text() == (here / f"{name}.csv").read_text()
