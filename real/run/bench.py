"""``hetspec bench`` (or ``python -m real.run.bench``): how fast the real path's forward runs on a device.

For a random-weight model of a real checkpoint's shape (:mod:`real.model.random_models`) on one torch
device, in one run:

1. the device's **copy bandwidth** (a buffer far larger than the last-level cache copied into
   another: bytes read plus bytes written per second, STREAM's "copy" convention; on CUDA a 1 GiB
   device-to-device copy), sampled between the timed steps and decodes (median);
2. the **step time** of one forward of q new tokens over a cache of ``--context`` tokens (a chain
   of q tokens under its tree mask, as a verification pass) for every q of ``--tokens``: eager, and
   replayed as a CUDA graph on a GPU (:mod:`real.model.executor`), medians of interleaved repeats;
3. an **ar decode** of ``--decode`` tokens with the real decode loop (:mod:`real.decode.ar`: the
   forward, the choice of the token and its read-back every step);

and for each time the rate at which the weights stream (weight bytes / step time) and its fraction of
the copy bandwidth. Nothing here is a language model: the weights are random, only the timing means
anything.
"""

from __future__ import annotations

# ``python -m real.run.bench`` imports the package ``real`` first, which sets the OpenMP defaults
# before torch loads (real.OPENMP_DEFAULTS).
import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from hwmodels.errors import HetSpecError

DEFAULT_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Largest token count one step times: the CUDA-graph buckets stop there (real.model.executor.DEFAULT_BUCKETS),
#: and the help promises 1 to 256.
MAX_TOKENS = 256
#: Bytes of each buffer of the CPU copy probe: far beyond any last-level cache.
CPU_COPY_BYTES = 512 * 2**20
#: Most interleaved repeats one run takes: each repeat times every token count of every layout, samples the
#: copy bandwidth and decodes; medians settle long before, and a larger count is refused with this bound.
MAX_REPEATS = 100
CUDA_COPY_BYTES = 2**30


@dataclass(frozen=True)
class StepRow:
    tokens: int
    layout: str                     # the weight layout of eager_ms / graph_ms (real.model.packing)
    eager_ms: float
    graph_ms: float | None          # None: no CUDA graphs on this device
    by_layout: dict[str, float] = field(default_factory=dict)   # --layout all: eager ms of every layout


@dataclass(frozen=True)
class BenchResult:
    model: str
    device: str
    dtype: str
    threads: int | None
    context: int
    weight_bytes: int
    copy_gbps: float                # bytes read + written per second
    rows: tuple[StepRow, ...]
    decode_tokens: int
    decode_layout: str
    decode_eager_ms: float | None   # ms per token of an ar decode
    decode_graph_ms: float | None
    load_average: float | None
    decode_by_layout: dict[str, float] = field(default_factory=dict)   # --layout all
    notes: tuple[str, ...] = field(default=())

    def stream_fraction(self, ms: float | None) -> float | None:
        """Weight bytes per second at a step of ``ms`` over the copy bandwidth."""
        if ms is None or ms <= 0:
            return None
        return self.weight_bytes / (ms * 1e-3) / (self.copy_gbps * 1e9)

    def to_json(self) -> dict:
        out = asdict(self)
        out["rows"] = [{**asdict(r), "eager_stream_fraction": self.stream_fraction(r.eager_ms),
                        "graph_stream_fraction": self.stream_fraction(r.graph_ms)} for r in self.rows]
        out["decode_eager_stream_fraction"] = self.stream_fraction(self.decode_eager_ms)
        out["decode_graph_stream_fraction"] = self.stream_fraction(self.decode_graph_ms)
        return out

    def lines(self) -> list[str]:
        gb = self.weight_bytes / 1e9
        head = (f"{self.model} (random weights, {gb:.2f} GB streamed per step) on {self.device} {self.dtype}"
                + (f", {self.threads} thread(s)" if self.threads else "") + f", context {self.context}"
                + (f", load average {self.load_average:.2f}" if self.load_average is not None else ""))
        out = [head, f"copy bandwidth {self.copy_gbps:.1f} GB/s (read + write, measured in this run)"]
        graphs = any(r.graph_ms is not None for r in self.rows)
        layouts = sorted({k for r in self.rows for k in r.by_layout})
        out.append(f"{'tokens':>6} {'layout':>7} {'eager ms':>9} {'GB/s':>7} {'of copy':>8}"
                   + (f" {'graph ms':>9} {'GB/s':>7} {'of copy':>8}" if graphs else "")
                   + "".join(f" {name + ' ms':>10} {'of copy':>8}" for name in layouts))
        for r in self.rows:
            line = (f"{r.tokens:6d} {r.layout:>7} {r.eager_ms:9.3f} {gb / (r.eager_ms * 1e-3):7.1f} "
                    f"{self._pct(r.eager_ms):>8}")
            if graphs:
                line += (f" {r.graph_ms:9.3f} {gb / (r.graph_ms * 1e-3):7.1f} {self._pct(r.graph_ms):>8}"
                         if r.graph_ms is not None else "")
            line += "".join(f" {r.by_layout[name]:10.3f} {self._pct(r.by_layout[name]):>8}" for name in layouts)
            out.append(line)
        if self.decode_eager_ms is not None:
            line = (f"ar decode ({self.decode_layout}), {self.decode_tokens} tokens: eager "
                    f"{self.decode_eager_ms:.3f} ms/token ({self._pct(self.decode_eager_ms)} of copy bandwidth)")
            if self.decode_graph_ms is not None:
                line += f"; graph {self.decode_graph_ms:.3f} ms/token ({self._pct(self.decode_graph_ms)})"
            out.append(line)
        for name, ms in sorted(self.decode_by_layout.items()):
            out.append(f"  ar decode ({name}): {ms:.3f} ms/token ({self._pct(ms)} of copy bandwidth)")
        out.extend(self.notes)
        return out

    def _pct(self, ms) -> str:
        f = self.stream_fraction(ms)
        return "-" if f is None else f"{100 * f:.1f} %"


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


class CopyProbe:
    """Copy bandwidth of a device, sampled between the timed steps (on a shared machine the bandwidth
    drifts; sampling it in the same interleaved rounds as the steps compares like with like)."""

    def __init__(self, device):
        import torch

        n = CUDA_COPY_BYTES if device.type == "cuda" else CPU_COPY_BYTES
        self.device, self.bytes = device, n
        self.src = torch.ones(n // 4, dtype=torch.float32, device=device)
        self.dst = torch.empty_like(self.src)
        self.dst.copy_(self.src)
        self.samples: list[float] = []

    def sample(self) -> float:
        """One copy; returns (and keeps) its bytes read + written per second."""
        _sync(self.device)
        t = time.perf_counter()
        self.dst.copy_(self.src)
        _sync(self.device)
        rate = 2 * self.bytes / (time.perf_counter() - t)
        self.samples.append(rate)
        return rate

    def gbps(self) -> float:
        return statistics.median(self.samples) / 1e9

    def close(self) -> None:
        del self.src, self.dst


def _step_fn(model, cache, q: int, context: int, device):
    """One verification-shaped forward of q tokens (a chain under its tree mask) after ``context`` committed."""
    import torch

    from real.decode.device_tree import tree_tensors
    from sim.tree import TokenTree

    tt = tree_tensors(TokenTree.chain(q - 1), device)
    block = torch.randint(0, model.spec.vocab, (1, q), generator=torch.Generator().manual_seed(q)).to(device)

    def step():
        model(block, cache, positions=context + tt.depth, tree_mask=tt.mask, position_bound=context + q)
        cache.discard()
    return step


def time_steps(models: Sequence, tokens: Sequence[int], context: int, repeats: int, device,
               probe: CopyProbe | None = None, tick=None) -> list[dict[int, float]]:
    """Median ms of one forward per q for each of ``models`` (all (model, q) items, and the copy probe,
    interleaved over the repeats; the device drained around each call). ``tick`` is called after each
    timing (a progress bar's ``update``)."""
    import torch

    from real.run.repeats import interleaved

    items = []
    with torch.inference_mode():
        for model in models:
            cache = model.new_cache(context + max(tokens) + 1)
            prompt = torch.randint(0, model.spec.vocab, (1, context), generator=torch.Generator().manual_seed(1))
            model(prompt.to(device), cache)
            cache.keep(range(context))
            items += [_step_fn(model, cache, q, context, device) for q in tokens]
        for step in items:        # warm-up (and, with CUDA graphs, the capture of every bucket)
            step()
            step()
        if probe is not None:
            items.append(probe.sample)

        def measure(i: int, _rep: int, _round: int) -> float:
            _sync(device)
            t = time.perf_counter()
            items[i]()
            _sync(device)
            return time.perf_counter() - t

        samples = interleaved(len(items), repeats, measure, tick=tick)
    per_q = len(tokens)
    return [{q: 1e3 * statistics.median(s[0] for s in samples[m * per_q + i]) for i, q in enumerate(tokens)}
            for m in range(len(models))]


def time_decode(models: Sequence, context: int, new_tokens: int, repeats: int,
                probe: CopyProbe | None = None, tick=None) -> list[float]:
    """Median ms per token of a greedy ar decode (the real decode loop) after a ``context``-token prompt,
    for each of ``models`` (interleaved per repeat, the copy probe sampled before each round)."""
    import torch

    from real.decode import ar
    from real.decode.common import Clock, DecodeModels

    prompt = torch.randint(0, models[0].spec.vocab, (context,), generator=torch.Generator().manual_seed(2)).tolist()
    bundles = [DecodeModels(m) for m in models]
    for b in bundles:
        ar.generate(b, prompt, min(8, new_tokens), ar.ArConfig(), Clock())     # warm-up
    per_token: list[list[float]] = [[] for _ in models]
    for rep in range(repeats):
        if probe is not None:
            probe.sample()
        for i in [(rep + k) % len(models) for k in range(len(models))]:
            result = ar.generate(bundles[i], prompt, new_tokens, ar.ArConfig(), Clock())
            per_token[i].append(result.decode_s / result.steps)
            if tick is not None:
                tick()
    return [1e3 * statistics.median(t) for t in per_token]


def run_bench(model_name: str = "random-smollm-360m", device: str | None = None, dtype: str | None = None,
              tokens: Sequence[int] = DEFAULT_TOKENS, context: int = 256, repeats: int = 5, decode: int = 32,
              threads: int | None = None, graphs: str = "auto", layout: str = "auto",
              progress: bool = True) -> BenchResult:
    """The bench of ``model_name`` on ``device``; ``progress``: a line per phase and a progress bar over every
    timing on stderr (the bar only on a terminal)."""
    import torch
    from tqdm import tqdm

    from real.model.executor import attach, detach
    from real.model.packing import LAYOUTS, layout_for, pack
    from real.model.placement import resolve
    from real.model.random_models import random_spec, random_transformer, streamed_bytes

    spec = random_spec(model_name)
    if dtype is None:
        dtype = "fp16" if (device or "").startswith("cuda") or (device is None and torch.cuda.is_available()) \
            else "fp32"
    placement = resolve(device, dtype, graphs)
    dev = torch.device(placement.device)
    if min(tokens) < 1 or context < 1 or decode < 0:
        raise HetSpecError("--tokens and --context must be >= 1 and --decode >= 0")
    check_repeats(repeats)
    if context + max(tokens) + decode + 8 > spec.max_position:
        raise HetSpecError(f"--context {context} + {max(tokens)} tokens + --decode {decode} exceed "
                           f"{spec.name}'s {spec.max_position} positions")
    if layout not in LAYOUTS + ("auto", "all"):
        raise HetSpecError(f"--layout {layout!r}: give auto, all or one of {', '.join(LAYOUTS)}")
    if threads is not None and threads < 1:
        raise HetSpecError(f"--threads must be >= 1, got {threads}")
    if dev.type == "cpu":
        from real.model.placement import default_threads

        torch.set_num_threads(threads or default_threads())

    def say(text: str) -> None:
        if progress:
            print(text, file=sys.stderr, flush=True)

    def chosen(q: int) -> str:
        return layout_for(dev.type, q) if layout in ("auto", "all") else layout

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    names = list(LAYOUTS) if layout == "all" else sorted({chosen(q) for q in (*tokens, 1)})
    say(f"bench: {spec.name} on {placement.describe()}, weight layouts {', '.join(names)}")
    models = {name: pack(random_transformer(spec, device=dev, dtype=placement.torch_dtype()), name) for name in names}
    weight = streamed_bytes(spec, placement.torch_dtype().itemsize)
    probe = CopyProbe(dev)
    decode_layout = chosen(1)
    decode_names = (names if layout == "all" else [decode_layout]) if decode else []
    used = sorted({chosen(q) for q in tokens})
    timings = repeats * (len(names) * len(tokens) + 1 + len(decode_names))   # + 1: the copy probe's sample
    if placement.graphs:
        timings += repeats * (len(used) * len(tokens) + 1 + (1 if decode else 0))
    bar = tqdm(total=timings, desc="bench", unit="timing", disable=None if progress else True, leave=False)
    say(f"bench: eager steps at {', '.join(map(str, tokens))} tokens, copy bandwidth sampled between them")
    eager = dict(zip(names, time_steps([models[n] for n in names], tokens, context, repeats, dev, probe,
                                       tick=bar.update)))
    decode_by_layout = {}
    if decode:
        decode_by_layout = dict(zip(decode_names, time_decode([models[n] for n in decode_names], context, decode,
                                                              repeats, probe, tick=bar.update)))
    decode_eager = decode_by_layout.get(decode_layout)
    graph, decode_graph = {}, None
    if placement.graphs:
        say("bench: the same steps replayed as CUDA graphs")
        for name in used:
            attach(models[name], graphs=True)
        timed = dict(zip(used, time_steps([models[n] for n in used], tokens, context, repeats, dev, probe,
                                          tick=bar.update)))
        graph = {q: timed[chosen(q)][q] for q in tokens}
        decode_graph = time_decode([models[decode_layout]], context, decode, repeats, probe,
                                   tick=bar.update)[0] if decode else None
        for name in used:
            detach(models[name])
    bar.close()
    copy_gbps = probe.gbps()
    probe.close()
    rows = tuple(StepRow(q, chosen(q), eager[chosen(q)][q], graph.get(q),
                         {n: eager[n][q] for n in names} if layout == "all" else {}) for q in tokens)
    notes = () if placement.is_cuda else ("CUDA graphs: not on a CPU (eager only)",)
    return BenchResult(model=spec.name, device=placement.device, dtype=placement.dtype,
                       threads=torch.get_num_threads() if dev.type == "cpu" else None, context=context,
                       weight_bytes=weight, copy_gbps=copy_gbps, rows=rows, decode_tokens=decode,
                       decode_layout=decode_layout, decode_eager_ms=decode_eager, decode_graph_ms=decode_graph,
                       decode_by_layout=decode_by_layout if layout == "all" else {}, load_average=load, notes=notes)


# ---------------------------------------------------------------------------- command line
def add_arguments(p) -> None:
    p.add_argument("--model", default="random-smollm-360m",
                   help="random-weight shape: random-smollm-135m, random-smollm-360m, random-tinyllama-1.1b, "
                        "random-llama2-7b (default random-smollm-360m; real.model.random_models)")
    p.add_argument("--device", default=None, metavar="D", help="cpu, cuda or cuda:N (default cuda:0 where CUDA exists)")
    p.add_argument("--dtype", default=None, choices=("fp32", "fp16", "bf16"),
                   help="default fp16 on CUDA, fp32 on the CPU")
    p.add_argument("--graphs", default="auto", choices=("auto", "on", "off"),
                   help="also time CUDA-graph replay (auto: on a CUDA device)")
    p.add_argument("--tokens", default=",".join(map(str, DEFAULT_TOKENS)), metavar="Q1,Q2,...",
                   help=f"token counts of the steps, 1 to {MAX_TOKENS} (default 1 to 256 in powers of two)")
    p.add_argument("--context", type=int, default=256, help="cached tokens before each step (default 256)")
    p.add_argument("--repeats", type=int, default=5,
                   help=f"interleaved repeats per token count (default 5, at most {MAX_REPEATS})")
    p.add_argument("--decode", type=int, default=32, help="tokens of the ar decode timed (default 32; 0: none)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads on a CPU (default: $OMP_NUM_THREADS, else every core this process may use)")
    p.add_argument("--layout", default="auto", choices=("auto", "all", "hf", "fused", "in-out"),
                   help="weight layout in memory (real.model.packing): auto picks per token count as hetspec run "
                        "does; all times every layout at every token count (interleaved)")
    p.add_argument("--json", action="store_true", help="print JSON")


def check_repeats(repeats) -> int:
    """``--repeats`` in [1, :data:`MAX_REPEATS`]."""
    from sim.cli_numbers import check_int

    return check_int(repeats, "--repeats", 1, MAX_REPEATS)


def parse_tokens(text: str) -> tuple[int, ...]:
    from sim.cli_numbers import int_list

    return int_list(text, "--tokens", 1, MAX_TOKENS, what="token counts", example="1,16,64")


def handle(args) -> int:
    from real.model.placement import check_device_name

    tokens = parse_tokens(args.tokens)
    check_repeats(args.repeats)             # before any model is built
    check_device_name(args.device)
    result = run_bench(args.model, args.device, args.dtype, tokens, args.context, args.repeats, args.decode,
                       args.threads, args.graphs, args.layout, progress=not args.json)
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        print("\n".join(result.lines()))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m real.run.bench", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return handle(args)
    except HetSpecError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
