"""The passes of HetSpec's chain loop against an ar step, under each OpenMP wait setting.

Runs ``ar`` and ``chain`` (gamma 1) on the tiny demo models in alternation, one child process per setting
(OpenMP reads its settings once, when torch starts it), and prints per setting the medians over ten
pairs of: a chain step, a draft pass, the verification and the acceptance, each over the ar step of the
same pair. Usage (the tiny demo models must be cached: ``hetspec train-demo --preset tiny``)::

    python scripts/loop_pass_costs.py

The settings: two threads with this project's default bounded spin (``GOMP_SPINCOUNT=10000``), two threads
spinning a hundred times longer, and one thread. docs/validation.md ("Honest limits") quotes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

SETTINGS = (("2 threads, GOMP_SPINCOUNT=10000", 2, "10000"), ("2 threads, GOMP_SPINCOUNT=1000000", 2, "1000000"),
            ("1 thread", 1, "10000"))
PAIRS = 10
NEW_TOKENS = 64


def measure(threads: int) -> dict:
    import statistics

    import torch

    from real.decode import decoder
    from real.decode.ar import ArConfig
    from real.decode.chain import ChainConfig
    from real.decode.common import Clock, DecodeModels, traced_phase_seconds
    from real.train.demo import load_demo

    torch.set_num_threads(threads)
    demo = load_demo("tiny", progress=False, train=False)
    models = DecodeModels(demo.target, demo.draft, demo.heads)
    prompt = list(range(5, 60))
    ar, chain = decoder("ar").generate, decoder("chain").generate
    rows = []
    with torch.inference_mode():
        for _ in range(3):     # warm-up
            ar(models, prompt, 16, ArConfig(), Clock())
            chain(models, prompt, 16, ChainConfig(draft_depth=1), Clock())
        for _ in range(PAIRS):
            a = ar(models, prompt, NEW_TOKENS, ArConfig(), Clock())
            c = chain(models, prompt, NEW_TOKENS, ChainConfig(draft_depth=1), Clock())
            step = a.decode_s / a.steps
            phases = traced_phase_seconds(c.records)
            rows.append({"chain step": c.decode_s / c.steps / step,
                         "draft pass": phases["draft"] / c.draft_passes / step,
                         "verification": phases["verify"] / c.steps / step,
                         "acceptance": phases["accept"] / c.steps / step})
    return {key: statistics.median(r[key] for r in rows) for key in rows[0]}


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(measure(int(sys.argv[2]))))
        return 0
    print(f"tiny demo models, chain gamma 1 against ar, medians of {PAIRS} pairs of {NEW_TOKENS} tokens "
          "(each figure over the ar step of its pair)")
    for label, threads, spin in SETTINGS:
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": spin}
        out = subprocess.run([sys.executable, __file__, "--child", str(threads)], env=env, capture_output=True,
                             text=True, check=False)
        if out.returncode != 0:
            print(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"{label}: failed", file=sys.stderr)
            return 1
        got = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"  {label:34s} " + ", ".join(f"{k} {v:.2f}" for k, v in got.items()))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    raise SystemExit(main())
