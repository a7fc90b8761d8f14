"""Demo presets: training, the cache (reuse, fingerprint, force), the summary, the CLI."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest
import torch
from cli_runner import run_cli

from hwmodels.errors import UnknownNameError
from real.train import demo
from real.train.demo import (
    CACHE_ENV,
    DEMO_PRESETS,
    cache_folder,
    cache_root,
    load_demo,
    with_steps,
)


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


#: A few steps of every phase of the tiny recipe: exercises the whole pipeline in seconds.
MICRO = replace(with_steps(DEMO_PRESETS["tiny"], 0.05, name="micro"), tokenizer_chars=200_000,
                corpus_chars=300_000, distill_prompts=16, eval_prompts=4)


@pytest.fixture()
def count_trainings(monkeypatch):
    calls = []
    real_train = demo.train_demo

    def counting(recipe, folder, progress=True, device="cpu"):
        calls.append(recipe.name)
        return real_train(recipe, folder, progress, device)

    monkeypatch.setattr(demo, "train_demo", counting)
    return calls


def test_tiny_demo_files_and_summary(tiny_demo):
    folder = tiny_demo.folder
    assert folder == cache_folder("tiny")
    for rel in ("tokenizer.json", "target/config.json", "target/model.safetensors", "draft/config.json",
                "draft/model.safetensors", "medusa/medusa_config.json", "medusa/medusa_heads.safetensors",
                "summary.json", "summary.md"):
        assert (folder / rel).is_file(), rel
    s = tiny_demo.summary
    assert s["fingerprint"] == DEMO_PRESETS["tiny"].fingerprint()
    assert s["params"]["target"] == sum(p.numel() for p in tiny_demo.target.parameters())
    assert s["params"]["draft"] < s["params"]["target"]
    assert tiny_demo.target.spec.vocab == tiny_demo.tokenizer.vocab_size == s["vocab"]
    assert tiny_demo.heads.n_heads == DEMO_PRESETS["tiny"].medusa_heads
    topk = s["medusa_topk_accuracy"]
    assert len(topk) == tiny_demo.heads.n_heads and all(len(row) == 10 for row in topk)
    for row, ranks in zip(topk, s["medusa_rank_accuracy"]):
        assert all(a <= b + 1e-9 for a, b in zip(row, row[1:]))          # top-i is cumulative
        assert sum(ranks) == pytest.approx(row[-1])
    assert "target" in (folder / "summary.md").read_text()
    assert set(s["train_time_s"]) >= {"target_s", "draft_s", "heads_s", "total_s"}


def test_tiny_demo_makes_acceptance_non_trivial(tiny_demo):
    s = tiny_demo.summary
    vocab = s["vocab"]
    assert s["target_eval_perplexity"] < vocab / 4                      # learned far beyond uniform
    assert s["draft_greedy_agreement"] > 0.3
    # trained heads beat the untrained ones (which repeat the LM head's prediction)
    assert s["medusa_topk_accuracy"][0][0] > s["medusa_untrained_top1"][0] + 0.1
    assert s["medusa_topk_accuracy"][0][0] > 0.25


def test_tiny_demo_models_are_ready_for_inference(tiny_demo):
    assert not tiny_demo.target.training and not tiny_demo.heads.training
    assert all(not p.requires_grad for p in tiny_demo.target.parameters())
    ids = tiny_demo.tokenizer.encode("def main():\n    return 0\n")
    with torch.inference_mode():
        logits, hidden = tiny_demo.target(torch.tensor([ids]), return_hidden=True)
        heads = tiny_demo.heads(hidden)
    assert heads.shape == (tiny_demo.heads.n_heads, 1, len(ids), tiny_demo.target.spec.vocab)


def test_second_load_comes_from_the_cache(tiny_demo, count_trainings):
    start = time.perf_counter()
    again = load_demo("tiny", progress=False)
    elapsed = time.perf_counter() - start
    assert count_trainings == []
    assert elapsed < 10.0
    assert _same_weights(again.target, tiny_demo.target)
    assert _same_weights(again.draft, tiny_demo.draft)
    assert _same_weights(again.heads, tiny_demo.heads)
    assert again.summary == tiny_demo.summary


def test_cache_reuse_force_and_stale_fingerprint(count_trainings, tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))       # a cache of its own: the session's may hold micro already
    first = load_demo(MICRO, progress=False)
    assert count_trainings == ["micro"]
    second = load_demo(MICRO, progress=False)
    assert count_trainings == ["micro"]                                   # reused
    assert _same_weights(first.target, second.target)
    forced = load_demo(MICRO, force=True, progress=False)
    assert count_trainings == ["micro", "micro"]                          # retrained
    assert _same_weights(first.target, forced.target)                     # seeded: same weights again
    assert _same_weights(first.heads, forced.heads)
    summary_file = cache_folder(MICRO) / "summary.json"
    summary = json.loads(summary_file.read_text())
    summary["fingerprint"] = "stale"
    summary_file.write_text(json.dumps(summary))
    load_demo(MICRO, progress=False)
    assert count_trainings == ["micro", "micro", "micro"]                 # stale cache retrained
    leftovers = [p.name for p in cache_folder(MICRO).parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []                                                # no temporary folders left


def test_fingerprint_changes_with_the_recipe():
    tiny = DEMO_PRESETS["tiny"]
    assert tiny.fingerprint() == DEMO_PRESETS["tiny"].fingerprint()
    assert replace(tiny, seed=1).fingerprint() != tiny.fingerprint()
    assert with_steps(tiny, 0.5).fingerprint() != tiny.fingerprint()
    assert DEMO_PRESETS["small"].fingerprint() != tiny.fingerprint()


def test_training_autocasts_to_bf16_only_where_the_cpu_has_native_bf16():
    """oneDNN says yes on any AVX-512 CPU, which emulates bf16 slower than fp32: the CPU's flags decide."""
    from real.train.loops import bf16_supported

    onednn = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert not bf16_supported(frozenset({"avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"}))
    assert bf16_supported(frozenset({"avx512f", "avx512_bf16"})) == onednn
    assert bf16_supported(frozenset({"amx_tile", "amx_bf16"})) == onednn


def test_cache_root_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HETSPEC_CACHE_DIR", str(tmp_path))
    assert cache_root() == tmp_path
    assert cache_folder("small") == tmp_path / "demo" / "small"
    monkeypatch.delenv("HETSPEC_CACHE_DIR")
    assert cache_root().name == "hetspec"


def test_unknown_preset():
    with pytest.raises(UnknownNameError, match="unknown demo preset 'huge'; valid: small, smollm2, tiny"):
        load_demo("huge")


def test_cli_prints_the_cached_summary(tiny_demo, demo_cache_dir):
    proc = run_cli("train-demo", "--preset", "tiny", "--json", env={"HETSPEC_CACHE_DIR": demo_cache_dir})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["fingerprint"] == tiny_demo.summary["fingerprint"]
    assert out["folder"] == str(tiny_demo.folder)
    proc = run_cli("train-demo", "--preset", "tiny", env={"HETSPEC_CACHE_DIR": demo_cache_dir})
    assert proc.returncode == 0
    assert proc.stdout.startswith(f"cache: {tiny_demo.folder}")
    assert "Medusa head top-i accuracy" in proc.stdout


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda:0", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))])
def test_the_demo_models_train_on_the_device_asked_and_load_on_the_cpu(demo_cache_dir, device):
    from real.train.loops import bf16_autocast

    recipe = replace(MICRO, name=f"micro-{device.replace(':', '')}")
    models = load_demo(recipe, force=True, progress=False, device=device)
    assert models.summary["device"].split(" ")[0] == device
    assert models.summary["bf16_autocast"] == bf16_autocast(device)
    assert models.target.lm_head.weight.device.type == "cpu" and models.heads.w1.device.type == "cpu"
    assert 1 < models.summary["target_eval_perplexity"] < MICRO.vocab          # learned something, finite
    assert 0 <= models.summary["draft_greedy_agreement"] <= 1
    assert f"on {models.summary['device']}, bf16 autocast" in (models.folder / "summary.md").read_text()


@pytest.mark.parametrize("device, message", [
    ("gpu0", "hetspec: error: --device 'gpu0': give cpu, cuda or cuda:N"),
    pytest.param("cuda:0", "hetspec: error: --device cuda:0: this machine has no CUDA device",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")),
])
def test_cli_training_device_that_cannot_run_here_is_one_line_exit_2(tmp_path, device, message):
    proc = run_cli("train-demo", "--preset", "tiny", "--device", device, env={"HETSPEC_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith(message)
    assert not (tmp_path / "demo").exists()


def test_cli_bad_preset_is_one_line_exit_2(tmp_path):
    proc = run_cli("train-demo", "--preset", "huge", env={"HETSPEC_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 2
    assert proc.stderr.strip() == "hetspec: error: unknown demo preset 'huge'; valid: small, smollm2, tiny"
    assert not (tmp_path / "demo").exists()


# ---------------------------------------------------------------------- metrics and schedule
def _random_target():
    from real.model.transformer import Transformer
    from sim.model_spec import ModelSpec

    torch.manual_seed(0)
    spec = ModelSpec("metric-test", n_layers=1, hidden=32, intermediate=64, n_heads=4, n_kv_heads=2, vocab=40,
                     dtype="fp32", max_position=128)
    return Transformer(spec).eval().requires_grad_(False)


def test_greedy_agreement_of_the_target_with_itself_is_one():
    from real.train.evaluate import greedy_agreement
    from real.train.generate import greedy_continuations

    target = _random_target()
    data = greedy_continuations(target, torch.randint(0, 40, (4, 6)).tolist(), 10)
    assert greedy_agreement(target, data) == 1.0
    other = _random_target()
    with torch.no_grad():
        other.lm_head.weight.neg_()                                   # argmax becomes the argmin
    assert greedy_agreement(other, data) < 0.5


def test_untrained_head_k_accuracy_is_the_lm_head_prediction_shifted():
    from real.model.medusa_heads import MedusaHeads
    from real.train.evaluate import head_topk_accuracy, rank_accuracies
    from real.train.generate import greedy_continuations

    target = _random_target()
    data = greedy_continuations(target, torch.randint(0, 40, (6, 5)).tolist(), 12)
    acc = head_topk_accuracy(MedusaHeads.from_target(target, 2), data, top_k=3)
    p, length = data.prompt_len, data.tokens.shape[1]
    with torch.inference_mode():
        top = target.lm_head(data.hidden).topk(3, dim=-1).indices     # [n, L-1, 3]
    for k in (1, 2):
        ts = [t for t in range(p - 1, length - 2) if t + k + 1 < length]
        hits = [[int(data.tokens[r, t + k + 1]) in top[r, t, :i].tolist() for r in range(6) for t in ts]
                for i in (1, 2, 3)]
        assert acc[k - 1] == pytest.approx([sum(h) / len(h) for h in hits])
    ranks = rank_accuracies(acc)
    assert ranks[0][0] == acc[0][0] and ranks[0][1] == pytest.approx(acc[0][1] - acc[0][0])


def test_perplexity_of_a_uniform_model_is_the_vocabulary_size():
    from real.train.evaluate import perplexity

    target = _random_target()
    with torch.no_grad():
        target.lm_head.weight.zero_()                                 # every logit 0: uniform
    stream = torch.randint(0, 40, (1000,))
    assert perplexity(target, stream, seq_len=32, max_windows=5) == pytest.approx(40.0, rel=1e-5)


def test_lr_schedule_warmup_then_cosine_to_the_floor():
    from real.train.loops import TrainConfig, lr_at

    cfg = TrainConfig(steps=100, batch=1, seq_len=8, lr=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(1e-4)
    assert lr_at(9, cfg) == pytest.approx(1e-3)
    assert lr_at(10, cfg) == pytest.approx(1e-3)
    assert lr_at(55, cfg) == pytest.approx(0.55e-3)                   # half way: midpoint of peak and floor
    assert lr_at(100, cfg) == pytest.approx(1e-4)
    assert all(lr_at(s, cfg) >= lr_at(s + 1, cfg) for s in range(10, 100))


def test_forward_times_are_positive_medians(tiny_demo):
    from real.train.demo import demo_forward_times

    times = demo_forward_times(tiny_demo, repeats=5)
    assert [(t.model, t.q) for t in times] == [("target", 1), ("target", 16), ("target", 64), ("draft", 1),
                                               ("draft", 16), ("draft", 64), ("medusa-heads", 1)]
    assert all(t.median_ms > 0 for t in times)


def test_stale_work_folders_of_dead_runs_are_removed(tmp_path):
    import subprocess
    import sys

    from real.train.demo import _remove_stale_work_folders

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()          # a pid whose process has ended
    (tmp_path / f".small.tmp-{dead}").mkdir()
    (tmp_path / ".small.tmp-1").mkdir()                                  # pid 1 is alive
    (tmp_path / "small").mkdir()
    _remove_stale_work_folders(tmp_path / "small")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".small.tmp-1", "small"]


def test_a_training_bar_logged_to_a_file_refreshes_on_its_interval_not_per_update(capsys):
    """Piped into a log (a CI job, a run record), every refresh of a bar is a line: the loss updates wait for the
    bar's own refresh interval instead of forcing one each time, so a short run logs its start and its end."""
    from real.model.transformer import Transformer
    from real.train.loops import REFRESH_S, TrainConfig, train_causal_lm
    from sim.model_spec import ModelSpec

    assert REFRESH_S[False] > REFRESH_S[True]
    torch.manual_seed(0)
    model = Transformer(ModelSpec(name="bar", n_layers=1, hidden=16, intermediate=32, n_heads=2, n_kv_heads=1,
                                  vocab=32, dtype="fp32", max_position=64))
    train_causal_lm(model, torch.randint(0, 32, (400,)), TrainConfig(steps=40, batch=2, seq_len=8, lr=1e-3,
                                                                     warmup_steps=4), desc="bar")
    refreshes = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines() if line.startswith("bar")]
    assert 1 <= len(refreshes) <= 3, refreshes          # forced every 5 steps, 40 steps logged 9 or more
