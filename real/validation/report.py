"""``report.md``, ``results.json`` and the plots of ``hetspec validate``, from the results document.

Everything here reads the document that :func:`real.validation.validate.validate` builds (the same content
as ``results.json``), so a report can be regenerated from a saved ``results.json``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from hwmodels import atomic_files
from real.validation.verdict import CONFIDENCE, headline, measured_speedup, pct, speedup_interval

PLOTS = {"step_latency": "step_latency.png", "tokens_per_s": "tokens_per_s.png", "errors": "errors.png",
         "random_weight": "random_weight_timing.png"}
#: Predicted breakdown parts -> the measured trace phase they correspond to.
DRAFT_PARTS = ("draft", "heads", "transfer")
VERIFY_PARTS = ("verify", "decode")


def _spct(x) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:+.1f} %"


def blocks_taken(doc: dict) -> int:
    """How many A/B blocks each configuration of the run got (a run of a fixed count: its settings')."""
    counts = {len(r["pairs"]["decode_s"]) for r in doc["points"] if r["method"] != "ar" and "pairs" in r}
    return max(counts) if counts else doc["settings"]["repeats"]


def _f(x, nd=2) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{nd}f}"


def phase_split(row: dict) -> dict:
    """Predicted and measured ms per step in draft / verify / host (accept + untraced) parts."""
    b, m = row["pred_breakdown_ms"], row["meas_phase_ms"]
    pred_draft = sum(b.get(k, 0.0) for k in DRAFT_PARTS)
    pred_verify = sum(b.get(k, 0.0) for k in VERIFY_PARTS)
    pred_host = row["pred_step_ms"] - pred_draft - pred_verify
    return {"pred_draft": pred_draft, "pred_verify": pred_verify, "pred_host": pred_host,
            "meas_draft": m.get("draft", 0.0), "meas_verify": m.get("verify", 0.0),
            "meas_host": m.get("accept", 0.0) + m.get("other", 0.0)}


def diagnosis(doc: dict, method: dict) -> list[str]:
    """Where a method's prediction is off: phase by phase (medians over its grid) and acceptance."""
    rows = [r for r in doc["points"] if r["method"] == method["method"] and not r["missing"]]
    if not rows:
        return []
    import statistics

    def med(key):
        return statistics.median(phase_split(r)[key] for r in rows)
    lines = []
    for part, label in (("draft", "draft phase (draft passes / Medusa heads)"), ("verify", "verification pass"),
                        ("host", "host-side work (acceptance, cache compaction, Python loop)")):
        p, m = med(f"pred_{part}"), med(f"meas_{part}")
        if m > 0 or p > 0:
            rel = (p - m) / m if m > 0 else float("nan")
            lines.append(f"  - {label}: predicted {p:.3f} ms, measured {m:.3f} ms per step ({_spct(rel)})")
    tok = statistics.median((r["pred_tokens_per_step"] - r["meas_tokens_per_step"]) / r["meas_tokens_per_step"]
                            for r in rows)
    lines.append(f"  - tokens per step (acceptance measured on calibration prompts, decoded on evaluation "
                 f"prompts): median {_spct(tok)}")
    return lines


def training_words(summary: dict) -> str:
    """Which training of the demo models was validated: the same recipe (fingerprint) trained on another
    device or precision gives other weights."""
    if not summary.get("trained_at"):
        return ""
    how = (f" on {summary['device']}" + (" with bf16 autocast" if summary.get("bf16_autocast") else " in fp32")
           if summary.get("device") else "")
    words = [f" Weights trained{how} at {summary['trained_at']}"
             + (f" (torch {summary['torch']})" if summary.get("torch") else "")
             + f", recipe fingerprint {summary.get('fingerprint')}"]
    if summary.get("target_eval_perplexity") is not None:
        words.append(f"target perplexity {summary['target_eval_perplexity']:.2f}")
    if summary.get("draft_greedy_agreement") is not None:
        words.append(f"draft greedy agreement {summary['draft_greedy_agreement']:.3f}")
    return "; ".join(words) + "."


def verdict_section(doc: dict) -> list[str]:
    """The paired verdict of every pricing: its headline and one row per speculative method."""
    v0 = doc["verdicts"][0]
    t = v0["targets"]
    lines = ["## Verdict: predicted speedups over ar against the paired measurements", "",
             f"Every configuration was timed in {blocks_taken(doc)} A/B blocks with `ar` in one process, "
             "each block one pair per evaluation prompt (`ar` and the configuration back to back); a "
             "configuration's measured speedup is its tokens/s over the paired `ar` runs', summed over all its "
             f"pairs, and the paired band (±{pct(v0['paired']['band'], False)}) the median half-width of the "
             f"{100 * CONFIDENCE:.0f} % interval of a measured speedup, from a bootstrap redrawing each prompt's "
             "pairs among its blocks; the paired figures are judged where it is under their target. "
             "Per speculative method: the median error of the predicted speedup over `ar` "
             f"(target {pct(t['speedup_error'], False)}) and the regret of the predicted best configuration "
             f"(1 - measured speedup of the predicted best / the highest measured speedup, or, where they "
             f"differ, 1 - the ratio of the two timed head to head, below; target {pct(t['regret'], False)}). "
             f"Absolute step-latency and tokens/s errors are judged against {pct(t['absolute_error'], False)} only "
             f"where the run's noise band (P90 - P10 over the median of the `ar` seconds per token of every pair: "
             f"{pct(v0['noise_band'], False)}) is narrower than that.", ""]
    for v in doc["verdicts"]:
        lines += [f"**{headline(v)}**", ""]
    for method, h in (doc.get("head_to_head") or {}).items():
        for label, pairs in h["pairs"].items():
            ratio, (lo, hi) = measured_speedup({"pairs": pairs}), speedup_interval({"pairs": pairs})
            lines += [f"- Head to head, {h['blocks']} A/B blocks: {method}'s predicted best `{label}` ran at "
                      f"{_f(ratio, 3)}x the measured best `{h['against']}` ({100 * CONFIDENCE:.0f} % interval "
                      f"{_f(lo, 3)}-{_f(hi, 3)}x).", ""]
    lines += ["| pricing | method | configs | speedup error | regret | predicted best | measured best "
              "| step error | tokens/s error | meets the paired targets |",
              "|---|---|---:|---:|---:|---|---|---:|---:|---|"]
    for v in doc["verdicts"]:
        judged = v["absolute"]["judged"]
        for m in v["methods"]:
            if m["method"] == "ar":
                continue
            abs_words = (pct(m["median_step_error"]), pct(m["median_tokens_per_s_error"])) if judged else \
                (f"not judged ({pct(m['median_step_error'])})", f"not judged ({pct(m['median_tokens_per_s_error'])})")
            ok = "not judged" if not v["paired"]["judged"] else "yes" if m["meets_paired"] else "**no**"
            lines.append(f"| {v['pricing']} | {m['method']} | {m['points']} | {pct(m['median_speedup_error'])} | "
                         f"{pct(m['regret'])} | {m['predicted_best']} | {m['measured_best']} | {abs_words[0]} | "
                         f"{abs_words[1]} | {ok} |")
    missing = sorted({r["method"] for r in doc["points"] if r["missing"]})
    for method in missing:
        why = next(r["missing"] for r in doc["points"] if r["method"] == method)
        lines.append(f"| roofline | {method} | - | no prediction: {why} | | | | | | **no** |")
    prof = doc.get("profiled") or {}
    if "source" in prof:
        src = prof["source"]
        lines += ["", f"The profiled pricing times every operator by the CPU's measured profile `{src['profile']}` "
                      f"({src['description']}; {src['mode']} mode), the host's decode-loop costs kept. Nothing is "
                      "fitted to the validation: both pricings come from their own calibration runs."
                  + (f" **Two calibration runs:** {src['older_than_host']}." if src.get("older_than_host") else "")]
    elif prof.get("reason"):
        lines += ["", f"Priced by the roofline only: {prof['reason']}."]
    return lines


def markdown(doc: dict, extra: list[str] | None = None) -> str:
    plat, st = doc["platform"], doc["settings"]
    target, draft = doc["models"]["target"], doc["models"]["draft"]
    lines = [
        "# HetSpec validation: predicted vs measured decode speed on this machine",
        "",
        f"Generated by `{doc['command']}` on {doc['date']} in {doc['seconds']:.0f} s. "
        f"Regenerate with the same command; do not edit by hand.",
        "",
        f"**{doc['record']['verdict']}**",
        "",
        "## Setup",
        "",
        f"- Platform `{plat['name']}` ({plat['description']}), device `{plat['device']}` with {plat['threads']} "
        f"torch thread(s); file `{plat['path']}`, as priced in [`{plat['file']}`]({plat['file']}) beside this "
        "report (every number with its source, the decode-loop costs among them).",
        f"- Demo preset `{doc['preset']}` ({doc['preset_reason']}): target {target['n_layers']} layers x "
        f"{target['hidden']} hidden, vocab {target['vocab']}; draft {draft['n_layers']} x {draft['hidden']}; "
        f"{doc['models']['medusa_heads']} Medusa heads; "
        + (f"decoded on {plat['placement']}." if plat.get("placement") else "fp32 on the CPU.")
        + training_words(doc["models"].get("summary") or {}),
        f"- Acceptance profile measured on {st['calibration_prompts']} **calibration** prompts "
        f"({doc['acceptance'].get('positions')} positions); real runs on {st['eval_prompts']} held-out "
        f"**evaluation** prompts of {st['prompt_tokens']} tokens, {st['max_new_tokens']} new tokens each, greedy, "
        f"every configuration in {blocks_taken(doc)} A/B blocks with `ar`, medians. Predictions priced at a KV "
        f"context of {doc['context_priced']} tokens (the middle of the decoded stretch).",
        f"- Predicted: the simulator's closed form (`sim.strategies`) on `{plat['name']}:{plat['device']}` for the "
        "exact configuration run (same Medusa trees, the draft model's own shape, the heads the real path "
        "computes), priced from the calibration alone.",
        "",
        *verdict_section(doc),
    ]
    roofline = doc["verdicts"][0]
    misses = [m for m in roofline["methods"] if m["method"] != "ar" and not m["meets_paired"]]
    if misses and roofline["paired"]["judged"]:
        lines += ["", "### Where the model misses", ""]
        for m in misses:
            lines.append(f"- **{m['method']}**: speedup error {pct(m['median_speedup_error'])}, regret "
                         f"{pct(m['regret'])}. Phase by phase (medians over its grid):")
            lines += diagnosis(doc, m)
    lines += ["", "## Plots", "",
              f"![step latency]({PLOTS['step_latency']})", "",
              f"![tokens/s]({PLOTS['tokens_per_s']})", "",
              f"![errors]({PLOTS['errors']})", ""]
    lines += ["## Every configuration", "",
              "Step latency in ms per decode step (measured: median, min-max over blocks); speedup over ar predicted "
              f"/ measured (all its pairs pooled; in brackets its {100 * CONFIDENCE:.0f} % interval); tokens/step measured vs "
              "predicted from the replayed tables (in brackets: from independent per-head accuracies / Omega(γ, α), "
              "what a profile without replay gives).", "",
              "| config | speedup pred / meas | pred step ms | meas step ms | error | pred tok/step | meas tok/step "
              "| pred tok/s | meas tok/s | error |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    speedups = {label: s for m in roofline["methods"] for label, s in m["speedups"].items()}
    for r in doc["points"]:
        if r["missing"]:
            lines.append(f"| {r['label']} | - | - | {_f(r['meas_step_ms'], 3)} | - | - | {_f(r['meas_tokens_per_step'])} "
                         f"| - | {_f(r['meas_tokens_per_s'], 1)} | - |")
            continue
        indep = r["pred_tokens_per_step_independent"]
        tok = _f(r["pred_tokens_per_step"]) + (f" ({_f(indep)})" if indep is not None else "")
        s = speedups.get(r["label"], {})
        lo, hi = speedup_interval(r)
        within = f" ({_f(lo)}-{_f(hi)})" if r["method"] != "ar" and math.isfinite(lo) else ""
        lines.append(f"| {r['label']} | {_f(s.get('predicted'))} / {_f(s.get('measured'))}{within} | {_f(r['pred_step_ms'], 3)} "
                     f"| {_f(r['meas_step_ms'], 3)} "
                     f"({_f(r['meas_step_ms_min'], 3)}-{_f(r['meas_step_ms_max'], 3)}) | {_spct(r['step_error_signed'])} "
                     f"| {tok} | {_f(r['meas_tokens_per_step'])} | {_f(r['pred_tokens_per_s'], 1)} | "
                     f"{_f(r['meas_tokens_per_s'], 1)} | {_spct(r['tps_error_signed'])} |")
    lines += ["", "### Phase by phase", "",
              "ms per decode step. Draft: draft-model passes (chain, draft-tree) or the Medusa heads' proposal; "
              "verify: the target pass; host: acceptance, cache compaction and the Python loop (measured: the "
              "trace's accept records plus untraced time; predicted: what the strategy prices beyond draft and "
              "verify). Verified tokens and draft passes per step: what the prediction priced (draft-tree: the kinds "
              "of round the real decoder made on the calibration prompts, weighted by their share) / what the run "
              "counted.", "",
              "| config | draft pred | draft meas | verify pred | verify meas | host pred | host meas | "
              "verified tokens/step pred / meas | draft passes/step pred / meas |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in doc["points"]:
        if r["missing"]:
            continue
        p = phase_split(r)
        lines.append(f"| {r['label']} | {p['pred_draft']:.3f} | {p['meas_draft']:.3f} | {p['pred_verify']:.3f} | "
                     f"{p['meas_verify']:.3f} | {p['pred_host']:.3f} | {p['meas_host']:.3f} | "
                     f"{_f(r.get('pred_verified_per_step'))} / {r['meas_verified_per_step']:.2f} | "
                     f"{_f(r.get('pred_draft_passes_per_step'))} / {r['meas_draft_passes_per_step']:.2f} |")
    if doc["random_weight"]:
        lines += ["", "## Random-weight timing runs", "",
                  "One forward step of q new tokens (a chain mask, as in verification) over a KV cache of "
                  f"{doc['random_weight'][0]['context']} tokens, for Llama-shaped models with **random weights** "
                  "(timing only; shapes of public checkpoints, nothing downloaded), large enough that their fp32 "
                  "weights stream from DRAM here.", "",
                  f"![random-weight timing]({PLOTS['random_weight']})", "",
                  "| model | weights MB | tokens q | pred ms | meas ms | error |", "|---|---:|---:|---:|---:|---:|"]
        for r in doc["random_weight"]:
            lines.append(f"| {r['model']} (random-weight timing run) | {r['weight_mb']:.0f} | {r['tokens']} | "
                         f"{r['pred_ms']:.2f} | {r['meas_ms']:.2f} | {_spct(r['error_signed'])} |")
    if extra:   # a further section's own markdown (the heterogeneous section of --hetero)
        lines += [""] + list(extra)
    return "\n".join(lines + [""])


def write_report(doc: dict, out: Path, extra: list[str] | None = None) -> Path:
    """``results.json``, the plots and ``report.md`` in ``out``; returns the report's path."""
    from real.validation import plots

    from hwmodels.datafile import output_folder, writing

    out = output_folder(out, "report folder")
    with writing(out / "results.json", "results file"):
        atomic_files.write_text(out / "results.json", json.dumps(clean_json(doc), indent=1) + "\n")
    subtitle = f"{doc['preset']} preset, {doc['platform']['name']}:{doc['platform']['device']}"
    rows = [r for r in doc["points"]]
    plots.plot_step_latency(rows, out / PLOTS["step_latency"], subtitle)
    plots.plot_tokens_per_s(rows, out / PLOTS["tokens_per_s"], subtitle,
                            {m["method"]: m["measured_best"] for m in doc["verdicts"][0]["methods"]})
    plots.plot_errors(rows, out / PLOTS["errors"], subtitle)
    if doc["random_weight"]:
        plots.plot_random_weight(doc["random_weight"], out / PLOTS["random_weight"], doc["platform"]["name"])
    path = out / "report.md"
    with writing(path, "report"):
        atomic_files.write_text(path, markdown(doc, extra))
    return path


def clean_json(value):
    """``value`` with NaN / infinity replaced by None and numpy scalars by Python numbers (strict JSON)."""
    if isinstance(value, dict):
        return {str(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
