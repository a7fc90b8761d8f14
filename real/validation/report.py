"""``report.md``, ``results.json`` and the plots of ``hetspec validate``, from the results document.

Everything here reads the document that :func:`real.validation.validate.validate` builds (the same content
as ``results.json``), so a report can be regenerated from a saved ``results.json``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from real.run.contention import guard_line
from real.validation.trust import drift_moved, slowed_cores
from real.validation.metrics import (
    FULL_REGRET_TARGET,
    FULL_STEP_ERROR_TARGET,
    FULL_TPS_ERROR_TARGET,
    REGRET_TARGET,
    STEP_ERROR_TARGET,
    TPS_ERROR_TARGET,
    regret_definition,
    within_full_targets,
)

PLOTS = {"step_latency": "step_latency.png", "tokens_per_s": "tokens_per_s.png", "errors": "errors.png",
         "random_weight": "random_weight_timing.png"}
#: Predicted breakdown parts -> the measured trace phase they correspond to.
DRAFT_PARTS = ("draft", "heads", "transfer")
VERIFY_PARTS = ("verify", "decode")


def _pct(x) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.1f} %"


def _spct(x) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:+.1f} %"


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


def slowed_words(slowed: dict) -> str:
    """A calibration measured on slowed cores (``probe_gflops``, ``peak_gflops``), one sentence."""
    return (f"the calibration was {slowed_cores(slowed['probe_gflops'], slowed['peak_gflops'])}: its "
            "numbers mix quiet and slowed stretches, so the predictions inherit them; recalibrate on quiet cores "
            "(`hetspec calibrate --check` says when)")


def machine_state(doc: dict) -> str:
    """The reference probe before (and after) the grid against the calibration, one sentence."""
    def probe(d: dict, when: str) -> str:
        text = (f"{when}: fixed cost per operator {d['now_us']:.2f} us vs {d['calibrated_us']:.2f} us at calibration "
                f"({_spct(d['change'])})")
        if "triad_now_gbps" in d:
            text += (f", DRAM triad {d['triad_now_gbps']:.1f} vs {d['triad_calibrated_gbps']:.1f} GB/s "
                     f"({_spct(d['triad_change'])})")
        if "gemm_change" in d:
            text += (f", GEMM rate {d['gemm_now_gflops']:.1f} vs {d['gemm_calibrated_gflops']:.1f} GFLOP/s "
                     f"({_spct(d['gemm_change'])})")
        return text

    before, after = doc["drift"], doc.get("drift_after")
    if before is None:   # a GPU run priced on a platform without the host's CPU: nothing to re-time
        return (f"- Machine state: no reference probe (the grid ran on {doc['platform'].get('placement')}, priced on "
                f"{doc['platform']['name']}, which describes no host CPU to re-time).")
    def wait(d: dict) -> str:
        settled = d.get("settled") or {}
        return (f" (taken once the contention guard's probe read the cores quiet: {settled['waited_s']:.0f} s waited, "
                f"{settled['retakes']} retaken{', the last still slowed' if settled.get('contended') else ''})"
                if settled.get("waited_s") or settled.get("retakes") else "")

    def again(d: dict) -> str:
        earlier = d.get("earlier") or []
        return (f" (read {len(earlier) + 1} times, the earlier reading{'s' if len(earlier) > 1 else ''} moved: "
                f"{'; then '.join(earlier)})" if earlier else "")

    parts = ([probe(before, "before the grid") + wait(before) + again(before)]
             + ([probe(after, "after it") + wait(after)] if after else []))
    moved = any(drift_moved(d) for d in (before, after) if d)
    policy = before.get("omp_wait_policy")
    return ("- Machine state, the calibration's reference probe re-timed " + "; ".join(parts)
            + (f"; OpenMP: {policy}" if policy else "")
            + (" — **the machine's state changed since calibration (load, clocks): every prediction inherits it; "
               "recalibrate and validate on a quiet machine.**" if moved else "."))


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


def profiled_section(doc: dict, untrusted: bool) -> list[str]:
    """The grid priced twice from the same measurements: the CPU's measured operator profile (the
    ``profiled`` backend) beside the calibrated roofline, per method; or why there is no second pricing."""
    prof = doc.get("profiled")
    if not prof:
        return []
    title = ["", "### Operator timing: measured profile beside the roofline" + (" — not a validation" if untrusted
                                                                                  else ""), ""]
    if "methods" not in prof:
        return title + [f"Priced by the roofline only: {prof['reason']}."]
    src = prof["source"]
    quick = doc["settings"].get("label") == "quick"
    full_targets = (f"A full run (`hetspec validate` without `--quick`) on an idle machine is held to stricter "
                    f"targets per speculative method: median |step-latency error| <= {100 * FULL_STEP_ERROR_TARGET:.0f} "
                    f"%, median |tokens/s error| <= {100 * FULL_TPS_ERROR_TARGET:.0f} %, regret <= "
                    f"{100 * FULL_REGRET_TARGET:.0f} %.")
    lines = title + [
        f"The same measurements, predicted twice: by the calibrated roofline of `{doc['platform']['name']}` (above) "
        f"and with every operator timed by the CPU's measured profile `{src['profile']}` ({src['description']}; "
        f"{src['mode']} mode), the host's decode-loop costs and cache kept. Nothing here is fitted to the "
        "validation: both come from their own calibration runs."
        + (f" **Two calibration runs:** {src['older_than_host']}." if src.get("older_than_host") else ""), "",
        f"{full_targets} The last column checks them for both backends"
        + (" (this run is quick: it is not held to them)." if quick else "."), "",
        "| method | backend | median step error | median tokens/s error | predicted best | regret "
        "| regret of the medians | within the full run's targets |",
        "|---|---|---:|---:|---|---:|---:|---|"]
    profiled = {m["method"]: m for m in prof["methods"]}
    for m in doc["methods"]:
        for backend, row in (("roofline", m), ("profiled", profiled.get(m["method"]))):
            if row is None:
                continue
            ok = within_full_targets(row["median_step_error"], row["median_tokens_per_s_error"], row["regret"])
            verdict = ("(baseline)" if m["method"] == "ar" else "not judged" if untrusted
                       else "yes" if ok else "**no**")
            lines.append(f"| {m['method']} | {backend} | {_pct(row['median_step_error'])} | "
                         f"{_pct(row['median_tokens_per_s_error'])} | {row['predicted_best']} | "
                         f"{_pct(row['regret'])} | {_pct(row.get('regret_of_medians'))} | {verdict} |")
    return lines


def markdown(doc: dict) -> str:
    plat, st = doc["platform"], doc["settings"]
    target, draft = doc["models"]["target"], doc["models"]["draft"]
    trust = doc.get("trust") or {"trusted": True, "headline": None}
    untrusted = not trust["trusted"]
    not_a_validation = " — not a validation" if untrusted else ""
    lines = [
        "# HetSpec validation: predicted vs measured decode speed on this machine",
        "",
        f"Generated by `{doc['command']}` on {doc['date']} in {doc['seconds']:.0f} s. "
        f"Regenerate with the same command; do not edit by hand.",
        "",
    ]
    if untrusted:
        headline = trust["headline"]
        advice = ("Calibrate again on a quiet machine (`hetspec calibrate`) and run the same command again."
                  if doc["drift"] is not None else
                  "The phase-by-phase table shows which part of a step the prediction misses.")
        lines += [f"**{headline[0].upper()}{headline[1:]}.** The numbers below were measured, but they do not "
                  f"judge the model: they are labelled as such and no target is checked. {advice}", ""]
    lines += [
        "## Setup",
        "",
        f"- Platform `{plat['name']}` ({plat['description']}), device `{plat['device']}` with {plat['threads']} "
        f"torch thread(s); file `{plat['path']}`.",
        f"- Demo preset `{doc['preset']}` ({doc['preset_reason']}): target {target['n_layers']} layers x "
        f"{target['hidden']} hidden, vocab {target['vocab']}; draft {draft['n_layers']} x {draft['hidden']}; "
        f"{doc['models']['medusa_heads']} Medusa heads; "
        + (f"decoded on {plat['placement']}." if plat.get("placement") else "fp32 on the CPU.")
        + training_words(doc["models"].get("summary") or {}),
        f"- Acceptance profile measured on {st['calibration_prompts']} **calibration** prompts "
        f"({doc['acceptance'].get('positions')} positions); real runs on {st['eval_prompts']} held-out "
        f"**evaluation** prompts of {st['prompt_tokens']} tokens, {st['max_new_tokens']} new tokens each, greedy, "
        f"{st['repeats']} interleaved repeats"
        + (", each in a process of its own (the models handed over, a warm-up per point)" if doc.get("fresh_processes")
           else "") + ", medians. Predictions priced at a KV context of "
        f"{doc['context_priced']} tokens (the middle of the decoded stretch).",
        f"- Predicted: the simulator's closed form (`sim.strategies`) on `{plat['name']}:{plat['device']}` for the "
        "exact configuration run (same Medusa trees, the draft model's own shape, the heads the real path "
        "computes). Tokens per step: the profile's tables replayed on the calibration prompts (draft-tree: "
        "the real decoder's rounds on them, by tree budget: its passes, tokens verified and emitted).",
        machine_state(doc),
        *([f"- Calibration: {slowed_words(doc['calibration_slowed'])}"] if doc.get("calibration_slowed") else []),
        *([f"- {guard_line(doc['contention'])}"] if doc.get("contention") else []),
        "",
        f"## Acceptance check{not_a_validation}",
        "",
        f"Targets per speculative method: median |step-latency error| <= {100 * STEP_ERROR_TARGET:.0f} %, median "
        f"|tokens/s error| <= {100 * TPS_ERROR_TARGET:.0f} %, regret <= {100 * REGRET_TARGET:.0f} % "
        f"({regret_definition(all(m.get('regret_paired') for m in doc['methods']))}).",
        "",
        "| method | configs | median step error | median tokens/s error | median tokens/step error | predicted best "
        "| measured best | regret | regret of the medians | meets targets |",
        "|---|---:|---:|---:|---:|---|---|---:|---:|---|",
    ]
    for m in doc["methods"]:
        ok = "yes" if m["passes"] else "**no**"
        if m["method"] == "ar":
            ok = "(baseline)"
        elif untrusted:
            ok = "not judged"
        lines.append(f"| {m['method']} | {m['points']} | {_pct(m['median_step_error'])} | "
                     f"{_pct(m['median_tokens_per_s_error'])} | {_pct(m['median_tokens_per_step_error'])} | "
                     f"{m['predicted_best']} | {m['measured_best']} | {_pct(m['regret'])} | "
                     f"{_pct(m.get('regret_of_medians'))} | {ok} |")
    missing = sorted({r["method"] for r in doc["points"] if r["missing"]})
    for method in missing:
        why = next(r["missing"] for r in doc["points"] if r["method"] == method)
        lines.append(f"| {method} | - | no prediction: {why} | | | | | | | **no** |")
    lines += profiled_section(doc, untrusted)
    misses = [m for m in doc["methods"] if m["method"] != "ar" and not m["passes"] and not untrusted]
    if misses:
        lines += ["", "### Where the model misses", ""]
        for m in misses:
            parts = []
            if m["median_step_error"] > STEP_ERROR_TARGET:
                parts.append(f"step latency by {_pct(m['median_step_error'])}")
            if m["median_tokens_per_s_error"] > TPS_ERROR_TARGET:
                parts.append(f"tokens/s by {_pct(m['median_tokens_per_s_error'])}")
            if m["regret"] > REGRET_TARGET:
                parts.append(f"regret {_pct(m['regret'])}")
            lines.append(f"- **{m['method']}** misses: {', '.join(parts)}. Phase by phase (medians over its grid):")
            lines += diagnosis(doc, m)
    lines += ["", "## Plots", "",
              f"![step latency]({PLOTS['step_latency']})", "",
              f"![tokens/s]({PLOTS['tokens_per_s']})", "",
              f"![errors]({PLOTS['errors']})", ""]
    lines += [f"## Every configuration{not_a_validation}", "",
              "Step latency in ms per decode step (measured: median, min-max over repeats); tokens/step measured vs "
              "predicted from the replayed tables (in brackets: from independent per-head accuracies / Omega(γ, α), "
              "what a profile without replay gives).", "",
              "| config | pred step ms | meas step ms | error | pred tok/step | meas tok/step | pred tok/s | "
              "meas tok/s | error |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in doc["points"]:
        if r["missing"]:
            lines.append(f"| {r['label']} | - | {_f(r['meas_step_ms'], 3)} | - | - | {_f(r['meas_tokens_per_step'])} "
                         f"| - | {_f(r['meas_tokens_per_s'], 1)} | - |")
            continue
        indep = r["pred_tokens_per_step_independent"]
        tok = _f(r["pred_tokens_per_step"]) + (f" ({_f(indep)})" if indep is not None else "")
        lines.append(f"| {r['label']} | {_f(r['pred_step_ms'], 3)} | {_f(r['meas_step_ms'], 3)} "
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
        lines += ["", f"## Random-weight timing runs{not_a_validation}", "",
                  "One forward step of q new tokens (a chain mask, as in verification) over a KV cache of "
                  f"{doc['random_weight'][0]['context']} tokens, for Llama-shaped models with **random weights** "
                  "(timing only; shapes of public checkpoints, nothing downloaded), large enough that their fp32 "
                  "weights stream from DRAM here.", "",
                  f"![random-weight timing]({PLOTS['random_weight']})", "",
                  "| model | weights MB | tokens q | pred ms | meas ms | error |", "|---|---:|---:|---:|---:|---:|"]
        for r in doc["random_weight"]:
            lines.append(f"| {r['model']} (random-weight timing run) | {r['weight_mb']:.0f} | {r['tokens']} | "
                         f"{r['pred_ms']:.2f} | {r['meas_ms']:.2f} | {_spct(r['error_signed'])} |")
    if doc.get("hetero"):   # the heterogeneous section (real/validation/hetero/section.py)
        from real.validation.hetero.report import markdown as hetero_markdown

        lines += [""] + hetero_markdown(doc["hetero"])
    lines += ["", "## Host platform as priced", "", "```json", json.dumps(plat["device_fields"], indent=1), "```", ""]
    return "\n".join(lines)


def write_report(doc: dict, out: Path) -> Path:
    """``results.json``, the plots and ``report.md`` in ``out``; returns the report's path."""
    from real.validation import plots

    from hwmodels.datafile import output_folder, writing

    out = output_folder(out, "report folder")
    with writing(out / "results.json", "results file"):
        (out / "results.json").write_text(json.dumps(clean_json(doc), indent=1) + "\n")
    subtitle = f"{doc['preset']} preset, {doc['platform']['name']}:{doc['platform']['device']}"
    if not (doc.get("trust") or {"trusted": True})["trusted"]:
        subtitle += " - not a validation: the machine changed"    # the plots show the errors too
    rows = [r for r in doc["points"]]
    plots.plot_step_latency(rows, out / PLOTS["step_latency"], subtitle)
    plots.plot_tokens_per_s(rows, out / PLOTS["tokens_per_s"], subtitle,
                            {m["method"]: m["measured_best"] for m in doc["methods"] if m.get("regret_paired")})
    plots.plot_errors(rows, out / PLOTS["errors"], subtitle)
    if doc["random_weight"]:
        plots.plot_random_weight(doc["random_weight"], out / PLOTS["random_weight"], doc["platform"]["name"])
    path = out / "report.md"
    with writing(path, "report"):
        path.write_text(markdown(doc))
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
