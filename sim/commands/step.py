"""``hetspec step``: the operators of one forward step and their roofline time on a device."""

from __future__ import annotations

import argparse
import json

from hwmodels.dtypes import DTYPE_BYTES
from hwmodels.loader import get_platform
from sim.model_spec import get_model
from sim.step_graph import build_step_graph
from sim.op_timing import is_profiled
from sim.step_timing import fallback_note, price_step


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("step", help="operators of one decode/verify step: FLOPs, bytes, intensity, time (roofline, or "
                                    "the device's measured profile)")
    p.add_argument("--model", required=True, help="model preset, or path to a config.json or a .gguf file (its "
                                                  "weights priced as stored, e.g. Q4_1)")
    p.add_argument("--platform", required=True, help="platform preset or path to a platform .toml")
    p.add_argument("--device", help="device of the platform (default: its GPU, else NPU, else CPU)")
    p.add_argument("--tokens", type=int, required=True, help="q: new tokens per sequence (tree width)")
    p.add_argument("--context", type=int, required=True, help="s: tokens already in the KV cache")
    p.add_argument("--batch", type=int, default=1, help="b: sequences in the batch (default 1)")
    p.add_argument("--dtype", choices=sorted(DTYPE_BYTES), help="compute dtype (default: the model's)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_step)


def cmd_step(args: argparse.Namespace) -> int:
    from sim.cli_numbers import check_int
    from sim.commands.predict import check_positions, format_rows
    from sim.sanity import warn_memory

    check_int(args.tokens, "--tokens", 1)
    check_int(args.context, "--context", 0)
    check_int(args.batch, "--batch", 1)
    model = get_model(args.model)
    check_positions(model, args.context, args.tokens, ("--context", "--tokens"))
    platform = get_platform(args.platform)
    device = platform.device(args.device) if args.device else platform.accelerator
    graph = build_step_graph(model, args.tokens, args.context, args.batch, args.dtype)
    warn_memory(model, device, args.context, args.batch, args.tokens, args.dtype)
    price = price_step(graph, device)
    note = fallback_note(price, args.model)    # operators a measured profile does not cover, in one line
    if args.json:
        out = {"platform": platform.name, **price.to_dict(), "fallback": note}
        print(json.dumps(out, indent=2))
        return 0
    print(f"{model.name} on {platform.name}/{device.name}: q={graph.tokens} s={graph.context} b={graph.batch} "
          f"{graph.dtype}")
    profiled = is_profiled(device)    # a measured profile prices it: say where each time comes from
    rows = []
    for p in price.ops:
        d = p.to_dict()
        rows.append([d["name"], d["weight_type"] or "-", str(d["count"]), f"{d['flops'] / 1e9:.3f}", f"{d['bytes'] / 1e6:.2f}",
                     f"{d['intensity']:.2f}", f"{d['time_s'] * 1e3:.4f}", d["bound"]] + ([d["source"]] * profiled))
    rows.append(["total", "", "", f"{graph.total_flops / 1e9:.3f}", f"{graph.total_bytes / 1e6:.2f}", "",
                 f"{price.total_s * 1e3:.4f}", ""] + [""] * profiled)
    # widths from the cells, so no value runs into its neighbour however large it is
    print(format_rows(["operator", "weights", "x", "GFLOP", "MB", "FLOP/B", "time ms", "bound"] + ["source"] * profiled,
                      rows, left=(0, 1, 7, 8), sep="  "))
    if note:
        print(note)
    return 0
