"""``python -m real.validation.step_check``: a model's predicted ``ar`` decode step against the measured one.

For a model given by path (a GGUF file, dequantized on load, or a Hugging Face folder), in every dtype of
``--dtypes`` and on every host device of ``--devices`` (``cpu``: all threads; ``cpuN``: the single-thread
worker on core N), in one run:

1. **measured**: the real decode loop's ``ar`` (:mod:`real.decode.ar`: the forward, the choice of the token and
   its read-back) over a ``--context``-token prompt, ms per token; the cases are interleaved repeat by repeat,
   so a machine that slows down slows every case alike, and each case's **noise band** is half the
   ``(P90 - P10) / median`` of its repeats (shown as ±);
2. **predicted**: the simulator's ``ar`` step on the calibrated host platform (the roofline), and on the same
   device priced by each CPU operator profile there is for it (``profiled-cpu.toml`` of the default
   ``hetspec calibrate``, ``profiled-cpuN.toml`` of ``hetspec calibrate --device cpuN``, and any ``--profiled
   FILE``), at the context the decode averages. Where a profile does not cover an operator of the step (its
   shapes or its dtype were not profiled), that operator is priced by the profile's fallback and the report
   says which.

An error is judged against ``--target`` only where the case's noise band is narrower than the target; else the
report says it cannot judge it, naming the band. Nothing is fitted: the predictions come from the calibration
and the profiles alone. Writes ``report.md``, ``results.json`` and ``machine.json`` into ``--out``.
"""

from __future__ import annotations

# ``python -m real.validation.step_check`` imports the package ``real`` first, which sets the OpenMP
# defaults before torch loads (real.OPENMP_DEFAULTS).
import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from hwmodels import atomic_files
from hwmodels.errors import HetSpecError

#: The step-time target of a real model's ``ar`` step (roofline and profile alike), and the fallback's.
TARGET = 0.10
FALLBACK_TARGET = 0.15
#: A pricing is the fallback's (judged against FALLBACK_TARGET) where the fallback prices more than this share
#: of the step's operator time: the profile lacks the model's shapes or dtype, not a few small operators.
FALLBACK_SHARE = 0.5
MAX_REPEATS = 100


@dataclass(frozen=True)
class Case:
    dtype: str
    device: str


def measure(model_path: str, cases: list[Case], context: int, new_tokens: int, repeats: int,
            progress: bool = True) -> tuple[dict, dict]:
    """ms per ``ar`` token of every case, ``repeats`` interleaved samples each; and the models' specs by dtype."""
    import torch
    from tqdm.auto import tqdm

    from real.decode import ar
    from real.decode.common import Clock, DecodeModels
    from real.run.worker import get_worker, on_worker
    from real.model.sources import load_any
    from real.run.repeats import interleaved

    models = {}
    for dtype in sorted({c.dtype for c in cases}):
        if progress:
            print(f"step check: loading {model_path} in {dtype}", file=sys.stderr, flush=True)
        models[dtype] = load_any(model_path, dtype)
    spec = next(iter(models.values())).spec
    if context + new_tokens + 2 > spec.max_position:
        raise HetSpecError(f"--context {context} + --decode {new_tokens} exceed {spec.name}'s {spec.max_position} "
                           "positions")
    prompt = torch.randint(0, spec.vocab, (context,), generator=torch.Generator().manual_seed(2)).tolist()
    bundles = {d: DecodeModels(m) for d, m in models.items()}
    workers = {c.device: get_worker(c.device) for c in cases}

    def one(i: int, _rep: int, _round: int) -> float:
        case = cases[i]
        with on_worker(workers[case.device]):
            result = ar.generate(bundles[case.dtype], prompt, new_tokens, ar.ArConfig(), Clock())
        return 1e3 * result.decode_s / result.steps

    with tqdm(total=len(cases) * (repeats + 1), desc="ar decodes", unit="decode", disable=not progress,
              file=sys.stderr) as bar:
        interleaved(len(cases), 1, one, tick=bar.update)        # warm-up: every case once
        samples = interleaved(len(cases), repeats, one, tick=bar.update)
    return ({c: [s[0] for s in row] for c, row in zip(cases, samples)},
            {d: m.spec for d, m in models.items()})


def pricings(host, device: str, extra: list[str]) -> list[tuple[str, object, str]]:
    """(label, platform, what made it) of every way ``device`` is priced: the roofline of ``host``, its CPU
    operator profile where there is one, and each ``extra`` profiled platform file (its device priced for
    ``device``); "what made it" is the platform's description (the calibration and its date)."""
    from hwmodels.loader import load_platform_file
    from real.validation.backends import profiled_variant, timed_by_profile
    from real.validation.trust import shown_path

    out = [("roofline", host, host.description)]
    variant = profiled_variant(host, device)
    if variant.platform is not None:
        out.append((f"profile ({variant.source['path']})", variant.platform, variant.source["description"]))
    for path in extra:
        prof = load_platform_file(path)
        timing = next(iter(prof.devices.values())).timing
        if timing is None or not timing.profiled:
            raise HetSpecError(f"--profiled {path}: no profiled device in it")
        out.append((f"profile ({shown_path(path)})", timed_by_profile(host, device, timing, Path(path).stem),
                    prof.description))
    return out


def predict(spec, platform, device: str, context: int) -> tuple[float, str | None, float]:
    """The simulator's ``ar`` step (ms) of ``spec`` on ``device`` of ``platform``, the line on what its
    operator profile did not cover (None: all measured, or the roofline), and the share of the step's
    operator time priced by the fallback."""
    from sim.step_graph import build_step_graph
    from sim.step_timing import fallback_note, price_step
    from sim.strategies import get_strategy
    from sim.strategies.base import Problem, StrategyConfig

    strategy = get_strategy("ar")
    problem = Problem(model=spec, platform=platform, context=context)
    est = strategy.estimate(problem, strategy.resolve(problem, StrategyConfig(method="ar", device=device)))
    price = price_step(build_step_graph(spec, 1, context), platform.device(device))
    fell = sum(p.time_s for p in price.ops if p.source.startswith("fallback"))
    return 1e3 * float(est.step_s), fallback_note(price, spec.name), fell / price.total_s if price.total_s else 0.0


def check(model_path: str, dtypes, devices, context: int, new_tokens: int, repeats: int, platform: str,
          extra: list[str], progress: bool = True) -> dict:
    from real.validation.trust import band, load_host, shown_path

    from real.run.worker import get_worker

    host = load_host(platform)
    for device in devices:
        get_worker(device)                   # a device this machine or the calibration lacks: one line, before
        host.device(device)                  # any model is loaded
    cases = [Case(d, dev) for d in dtypes for dev in devices]
    samples, specs = measure(model_path, cases, context, new_tokens, repeats, progress)
    priced_at = context + new_tokens // 2
    rows, made_by = [], {}
    for case in cases:
        meas = statistics.median(samples[case])
        noise = band(samples[case])
        for label, plat, description in pricings(host, case.device, extra):
            made_by[label] = description
            pred, note, fell = predict(specs[case.dtype], plat, case.device, priced_at)
            error = (pred - meas) / meas
            limit = FALLBACK_TARGET if fell > FALLBACK_SHARE else TARGET
            rows.append({"dtype": case.dtype, "device": case.device, "threads": host.device(case.device).cores,
                         "pricing": label, "meas_ms": meas, "meas_ms_samples": samples[case], "band": noise,
                         "pred_ms": pred, "error": error, "target": limit, "fallback": note,
                         "fallback_share": fell,
                         "judged": bool(noise / 2 < limit), "meets": bool(noise / 2 < limit and abs(error) <= limit)})
    spec = next(iter(specs.values()))
    return {"format": "hetspec-step-check/1", "record": record(rows),
            "model": {"path": shown_path(model_path), "name": spec.name, "params": spec.params},
            "platform": {"name": host.name, "path": shown_path(host.path), "description": host.description},
            "context": context, "decode_tokens": new_tokens, "repeats": repeats, "context_priced": priced_at,
            "pricings": made_by, "rows": rows}


def record(rows: list[dict]) -> dict:
    """The run record ``hetspec reports index`` reads: each case's error by pricing, and how many judged cases
    meet their target."""
    def short(pricing: str) -> str:          # "profile (~/x/profiled-cpu.toml)" -> "profile profiled-cpu"
        return pricing if pricing == "roofline" else "profile " + Path(pricing[len("profile ("):-1]).stem

    headline = {f"{r['dtype']} {r['device']} {short(r['pricing'])} error %": round(100 * r["error"], 1)
                for r in rows}
    judged = [r for r in rows if r["judged"]]
    verdict = (f"{sum(r['meets'] for r in judged)} of {len(judged)} judged cases within their target "
               f"(±{100 * TARGET:.0f} %, ±{100 * FALLBACK_TARGET:.0f} % where the fallback prices most of the step); "
               f"{len(rows) - len(judged)} not judged (noise band too wide); "
               f"largest band ±{50 * max(r['band'] for r in rows):.1f} %")
    return {"kind": "step-check", "headline": headline, "verdict": verdict}


def lines(doc: dict) -> list[str]:
    out = ["| dtype | device (threads) | pricing | fallback share | measured ms [band] | predicted ms | error "
           "| verdict |",
           "|---|---|---|---:|---:|---:|---:|---|"]
    for r in doc["rows"]:
        verdict = (("meets" if r["meets"] else "misses") + f" ±{100 * r['target']:.0f} %" if r["judged"] else
                   f"cannot judge: band ±{50 * r['band']:.1f} % is not narrower than ±{100 * r['target']:.0f} %")
        out.append(f"| {r['dtype']} | {r['device']} ({r['threads']}) | {r['pricing']} | "
                   f"{100 * r['fallback_share']:.0f} % | {r['meas_ms']:.2f} "
                   f"[±{50 * r['band']:.1f} %] | {r['pred_ms']:.2f} | {100 * r['error']:+.1f} % | {verdict} |")
    notes = sorted({r["fallback"] for r in doc["rows"] if r["fallback"]})
    return out + ([""] + [f"- {n}" for n in notes] if notes else [])


def write(doc: dict, out: Path, command: str, started: datetime) -> None:
    from sim.records.machine import write_machine_json

    out.mkdir(parents=True, exist_ok=True)
    doc = {**doc, "command": command}
    atomic_files.write_text(out / "results.json", json.dumps(doc, indent=1) + "\n")
    m = doc["model"]
    text = [f"# ar step of {m['name']}: predicted and measured", "",
            f"Regenerate: `{command}`", "",
            f"Model {m['path']} ({m['params'] / 1e6:.1f} M parameters); platform {doc['platform']['name']} "
            f"({doc['platform']['path']}). Measured: the real decode loop's ar, {doc['decode_tokens']} tokens after "
            f"a {doc['context']}-token prompt, median of {doc['repeats']} interleaved repeats per case; band: "
            f"half of (P90 - P10) / median. Predicted at context {doc['context_priced']}. Target ±"
            f"{100 * TARGET:.0f} % (±{100 * FALLBACK_TARGET:.0f} % where the profile's fallback prices over half the "
            "step).", "",
            *lines(doc), "", "Pricings:", "",
            *[f"- {label}: {text}" for label, text in doc.get("pricings", {}).items()], ""]
    atomic_files.write_text(out / "report.md", "\n".join(text))
    write_machine_json(out, command=command, started=started,
                       calibration={"platform": doc["platform"]["path"], "description": doc["platform"]["description"]})


def model_path(name: str) -> str:
    """The model file or folder of ``--model``: a path, or ``demo:<preset>`` for a preset whose target is a
    pretrained file of an installed package (found where this machine installed it)."""
    if name.startswith("demo:"):
        from real.train.demo import get_recipe
        from real.train.pretrained import locate

        recipe = get_recipe(name.split(":", 1)[1])
        if not recipe.pretrained:
            raise HetSpecError(f"--model {name}: that preset's target is trained here, not a pretrained file; "
                               "give its folder instead")
        return str(locate(recipe.target_gguf))
    if not Path(name).exists():
        raise HetSpecError(f"--model {name}: no such file or folder")
    return name


def main(argv: list[str] | None = None) -> int:
    from sim.cli_numbers import check_int

    p = argparse.ArgumentParser(prog="python -m real.validation.step_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, metavar="PATH",
                   help="a GGUF file, a Hugging Face model folder, or demo:<preset> for a preset whose target is an "
                        "installed pretrained file (demo:smollm2)")
    p.add_argument("--dtypes", default="fp32,bf16", help="dtypes the model runs in (default fp32,bf16)")
    p.add_argument("--devices", default="cpu,cpu0",
                   help="host devices: cpu (all threads), cpuN (the single-thread worker on core N); default cpu,cpu0")
    p.add_argument("--context", type=int, default=80, help="prompt tokens before the decode (default 80)")
    p.add_argument("--decode", type=int, default=32, help="ar tokens per timed decode (default 32)")
    p.add_argument("--repeats", type=int, default=7, help=f"interleaved repeats per case (default 7, at most "
                                                           f"{MAX_REPEATS})")
    p.add_argument("--platform", default="host", help="calibrated platform (default host)")
    p.add_argument("--profiled", action="append", default=[], metavar="FILE",
                   help="also price by this profiled platform file (repeatable), e.g. one whose profile lacks the "
                        "model's shapes, to check the fallback")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for report.md, results.json, machine.json")
    p.add_argument("--json", action="store_true", help="print results.json instead of the table")
    try:
        args = p.parse_args(argv)
        check_int(args.context, "--context", 1)
        check_int(args.decode, "--decode", 1)
        check_int(args.repeats, "--repeats", 1, MAX_REPEATS)
        dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
        for d in dtypes:
            if d not in ("fp32", "bf16", "fp16"):
                raise HetSpecError(f"--dtypes: {d!r} is not one of fp32, bf16, fp16")
        devices = [d.strip() for d in args.devices.split(",") if d.strip()]
        model = model_path(args.model)
        for f in args.profiled:
            if not Path(f).is_file():
                raise HetSpecError(f"--profiled {f}: no such file")
        started = datetime.now(timezone.utc)
        command = "python -m real.validation.step_check " + " ".join(argv if argv is not None else sys.argv[1:])
        doc = check(model, dtypes, devices, args.context, args.decode, args.repeats, args.platform,
                    args.profiled, progress=not args.json)
        write(doc, Path(args.out), command, started)
    except HetSpecError as exc:
        print(f"step_check: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(doc, indent=1) if args.json else "\n".join(lines(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
