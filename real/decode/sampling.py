"""How a token is chosen from logits (torch-free, so command-line values validate without torch)."""

from __future__ import annotations

from dataclasses import dataclass

from hwmodels.errors import HetSpecError


@dataclass(frozen=True)
class Sampling:
    """Greedy when ``temperature == 0``; otherwise softmax(logits / T), then nucleus top-p."""

    temperature: float = 0.0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not self.temperature >= 0.0:
            raise HetSpecError(f"temperature must be >= 0, got {self.temperature}")
        if self.temperature == float("inf"):     # softmax(logits / inf) is uniform noise, not a decode
            raise HetSpecError(f"temperature must be a finite number, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise HetSpecError(f"top-p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
