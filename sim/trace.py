"""The per-step trace schema shared by the simulator's engine and the real PyTorch path.

One :class:`TraceRecord` is one interval of work on one device (or worker): a draft pass, a
verification pass, a transfer, a weight load, or a single operator when ``op`` is set. Simulated
and measured traces use the same columns, so prediction and measurement line up row by row.

Counting rule: the token counts of a step sit on exactly one record of that step, the one that
decides it (phase ``verify`` for speculative methods, ``decode`` for autoregressive decoding);
every other record of the step carries zeros. Hence the sum of ``tokens_accepted`` over a trace
is the number of tokens generated, and ``tokens_proposed`` the number of speculative tokens
offered for verification.

Files (:mod:`sim.trace_files`): ``.csv`` (one row per record), ``.jsonl`` (one JSON object per line) and
``.json`` (Chrome trace-event format: open it in chrome://tracing or https://ui.perfetto.dev to look at
a step).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from hwmodels.errors import HetSpecError

#: Phases in use. ``decode`` = one autoregressive target step; ``verify`` = one target pass over
#: speculative tokens; ``draft`` = one draft pass (or a draft model's whole proposal when ``op``
#: is empty); ``transfer`` = bytes over a link; ``load`` = weights read from storage or over PCIe;
#: ``sync`` = page synchronisation / barrier; ``recompute`` = ALSpec's exact re-run after a miss.
PHASES = ("prefill", "decode", "draft", "verify", "transfer", "load", "sync", "attention", "recompute", "accept")


@dataclass(frozen=True)
class TraceRecord:
    step: int               # decode step (verification round) index, 0-based; -1 for prefill
    phase: str              # one of PHASES
    device: str             # device (simulator) or worker (real path) name
    start_s: float          # seconds from the start of the run
    end_s: float
    tokens_proposed: int = 0  # speculative tokens offered to verification in this step
    tokens_accepted: int = 0  # tokens this step added to the output (accepted drafts + target's own)
    op: str = ""            # operator name for operator-level records, "" for a whole phase

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise HetSpecError(f"trace phase {self.phase!r} unknown; valid: {', '.join(PHASES)}")
        if self.end_s < self.start_s:
            raise HetSpecError(f"trace record ends before it starts ({self.start_s} > {self.end_s})")

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


TRACE_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(TraceRecord))


@dataclass(frozen=True)
class TraceSummary:
    steps: int                 # decode steps (records carrying token counts)
    tokens: int                # tokens generated
    proposed: int              # speculative tokens offered
    decode_s: float            # wall time of the decode steps (prefill excluded)

    @property
    def mean_accepted_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def step_s(self) -> float:
        return self.decode_s / self.steps if self.steps else 0.0


def summarize(records: Sequence[TraceRecord]) -> TraceSummary:
    """Steps, tokens, and decode time (from the first to the last non-prefill record)."""
    decode = [r for r in records if r.step >= 0]
    counted = [r for r in decode if r.phase in ("decode", "verify") and r.tokens_accepted > 0]
    steps = len({r.step for r in counted})
    tokens = sum(r.tokens_accepted for r in decode)
    proposed = sum(r.tokens_proposed for r in decode)
    span = (max(r.end_s for r in decode) - min(r.start_s for r in decode)) if decode else 0.0
    return TraceSummary(steps=steps, tokens=tokens, proposed=proposed, decode_s=span)
