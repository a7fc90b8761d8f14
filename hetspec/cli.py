"""``hetspec`` command line: parses arguments and hands each subcommand to one function.

Each command module (``sim.commands.*``, ``real.<package>.commands``) exposes ``register(subparsers)``
which adds its subcommand(s) and sets ``func`` on the parser. Command modules must not import
torch at module level, so ``hetspec platforms`` stays fast; real-path commands import it
inside their handlers.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from hetspec import __version__
from hwmodels.errors import HetSpecError

# Order here is the order of ``hetspec --help``.
COMMAND_MODULES: tuple[str, ...] = (
    "sim.commands.catalog",
    "sim.commands.step",
    "sim.commands.predict",
    "sim.commands.simulate",
    "sim.commands.sweep",
    "sim.commands.reproduce",
    "sim.commands.profile",
    "sim.commands.reports",
    "real.run.commands",
    "real.train.commands",
    "real.validation.commands",
    "web.commands",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hetspec",
        description="Simulate, predict and measure speculative LLM decoding on heterogeneous devices.",
    )
    parser.add_argument("--version", action="version", version=f"hetspec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def close_progress_bars() -> None:
    """End the lines of the progress bars an error left open, so that the error gets a line of its own (a bar
    closed later, when it is collected, would draw itself again after it)."""
    std = sys.modules.get("tqdm.std")           # never imported here: only a command that drew a bar loaded it
    if std is not None:
        for bar in list(getattr(std.tqdm, "_instances", ())):
            bar.close()


def main(argv: list[str] | None = None) -> int:
    # OpenMP reads its wait policy once, when torch starts it: importing this package (hetspec/__init__)
    # already set the project's defaults (real.OPENMP_DEFAULTS) before any command imports torch, so
    # calibration and the runs it prices run under the same policy.
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except HetSpecError as exc:
        close_progress_bars()
        print(f"hetspec: error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)     # 3: the machine changed under a measurement
    except KeyboardInterrupt:
        close_progress_bars()
        print("hetspec: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and closed early: not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
