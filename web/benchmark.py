"""Answer times of the what-if page: ``python -m web.benchmark``.

Times what the server does for one change of a control (:func:`web.answer.answer` and the JSON of its
answer) on the reference example (Vicuna-7B on the Jetson Xavier NX at 204 MHz, Ghidorah's MBPP table),
for one method (Medusa: the closed form's search) and for all methods, each with a fresh what-if memory
bandwidth so that no answer repeats the one before. Targets: 300 ms for one method, 1.5 s for all.

Timings are noisy on a shared machine: the median of ``--repeats`` answers is reported with its spread
(lowest and highest), and each method's own median for the all-methods answer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from sim.whatif import WhatIf
from web.answer import Query, answer, search
from web.catalog import Catalog

MODEL, PLATFORM, ACCEPTANCE = "vicuna-7b", "jetson-xavier-nx-204mhz", "ghidorah-mbpp"
TARGETS_S = {"one method (medusa)": 0.3, "all methods": 1.5}


def _time(query: Query, catalog: Catalog) -> float:
    start = time.perf_counter()
    json.dumps(answer(query, catalog))
    return time.perf_counter() - start


def run(repeats: int) -> dict[str, list[float]]:
    catalog = Catalog()
    base = Query(model=MODEL, platform=PLATFORM, acceptance=ACCEPTANCE)
    _time(base, catalog)                                  # imports and preset tables, once
    out: dict[str, list[float]] = {}
    for label, methods in (("one method (medusa)", ("medusa",)), ("all methods", ("all",))):
        out[label] = [_time(Query(model=MODEL, platform=PLATFORM, acceptance=ACCEPTANCE, methods=methods,
                                  whatif=WhatIf(mem_bw=1.0 + 0.01 * (i + 1))), catalog) for i in range(repeats)]
    return out


def per_method(repeats: int) -> dict[str, float]:
    """Median seconds of each method's search alone (what the all-methods answer adds up)."""
    from web.answer import build_problem

    catalog = Catalog()
    problem = build_problem(Query(model=MODEL, platform=PLATFORM, acceptance=ACCEPTANCE), catalog)
    times: dict[str, list[float]] = {}
    for _ in range(repeats):
        for method in Query(model=MODEL, platform=PLATFORM).method_names:
            start = time.perf_counter()
            search(problem, (method,))
            times.setdefault(method, []).append(time.perf_counter() - start)
    return {m: statistics.median(t) for m, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m web.benchmark", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="answers timed per case (default 5)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    print(f"{MODEL} on {PLATFORM}, acceptance {ACCEPTANCE}, context 256, batch 1; {args.repeats} answers each")
    for label, times in run(args.repeats).items():
        med = statistics.median(times)
        verdict = "within" if med <= TARGETS_S[label] else "over"
        print(f"{label:20} median {med * 1e3:8.1f} ms  (spread {min(times) * 1e3:.1f}-{max(times) * 1e3:.1f} ms)  "
              f"target {TARGETS_S[label] * 1e3:.0f} ms: {verdict}")
    medians = per_method(max(1, args.repeats // 2))
    print("each method's search (median): " + ", ".join(f"{m} {t * 1e3:.0f} ms" for m, t in medians.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
