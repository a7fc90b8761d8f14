"""A trace of the cores' speed over time: what the contention guard (:mod:`real.run.contention`) watches.

    python -m real.validation.contention_trace [--seconds 150] [--threads 2] [--out trace.csv]

Every ~0.5 s it times, on ``--threads`` torch threads, a compute-bound linear of the small demo target's
MLP shape (64 tokens, 384 -> 1024, weights in the cache; median of 20 passes over 8 weights) and a
bandwidth-bound one (one token, 64 distinct 384 -> 1024 weights from DRAM; median of 5 passes), and the
guard's own probe (:func:`real.validation.machine.gemm_rate`). A stretch where the first and the probe
slow down while the second holds is contention from outside (docs/validation.md, "Contention from
outside"). Prints one line per sample and a summary; ``--out`` also writes the samples as CSV.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from hwmodels.errors import HetSpecError

#: The two linears of the trace: (tokens, d_in, d_out, distinct weights, passes per sample).
COMPUTE = (64, 384, 1024, 8, 20)
BANDWIDTH = (1, 384, 1024, 64, 5)


def _timer(shape):
    import torch
    import torch.nn.functional as F

    tokens, d_in, d_out, weights, passes = shape
    g = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, d_in, generator=g)
    ws = [torch.randn(d_out, d_in, generator=g) for _ in range(weights)]

    def sample() -> float:
        """Median microseconds of one linear over ``passes`` passes through the weights."""
        times = []
        with torch.inference_mode():
            for _ in range(passes):
                t = time.perf_counter()
                for w in ws:
                    F.linear(x, w)
                times.append((time.perf_counter() - t) / len(ws))
        return statistics.median(times) * 1e6
    return sample


def trace(seconds: float, threads: int, pause_s: float = 0.5, echo=print) -> list[dict]:
    """Samples for ``seconds``: time, the two linears (us per call) and the guard probe (GFLOP/s)."""
    from real.validation.machine import GUARD_PROBE_SAMPLES, gemm_rate
    from real.validation.microbench import torch_threads

    compute, bandwidth = _timer(COMPUTE), _timer(BANDWIDTH)
    rows, end = [], time.time() + seconds
    with torch_threads(threads):
        while time.time() < end:
            row = {"time": time.strftime("%H:%M:%S"), "compute_us": round(compute(), 1),
                   "bandwidth_us": round(bandwidth(), 1),
                   "probe_gflops": round(gemm_rate(threads, GUARD_PROBE_SAMPLES) / 1e9, 1)}
            rows.append(row)
            echo(f"{row['time']}  64-token linear {row['compute_us']:7.1f} us  one-token linear "
                 f"{row['bandwidth_us']:6.1f} us  guard probe {row['probe_gflops']:6.1f} GFLOP/s")
            time.sleep(pause_s)
    return rows


def summary(rows: list[dict]) -> list[str]:
    """Quantiles of each column: how far the slow stretches sit from the quiet ones."""
    out = []
    for key, what in (("compute_us", "64-token linear, us"), ("bandwidth_us", "one-token linear, us"),
                      ("probe_gflops", "guard probe, GFLOP/s")):
        xs = sorted(r[key] for r in rows)
        q = statistics.quantiles(xs, n=10) if len(xs) >= 2 else xs * 9
        out.append(f"{what}: min {xs[0]:.1f}, p10 {q[0]:.1f}, median {statistics.median(xs):.1f}, p90 {q[-1]:.1f}, "
                   f"max {xs[-1]:.1f} ({len(xs)} samples)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m real.validation.contention_trace", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=150.0, help="how long to trace (default 150)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--out", help="also write the samples to this CSV file")
    args = parser.parse_args(argv)
    try:
        if args.seconds <= 0 or args.threads < 1:
            raise HetSpecError(f"--seconds must be > 0 and --threads >= 1, got {args.seconds} and {args.threads}")
        rows = trace(args.seconds, args.threads)
        for line in summary(rows):
            print(line)
        if args.out:
            import csv

            with open(args.out, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
    except HetSpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
