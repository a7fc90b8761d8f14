"""Registry of the simulator's decode strategies, by the method names of :mod:`sim.methods`.

Each strategy lives in its own module, which exposes ``STRATEGY``: its :class:`Strategy`
subclass (see :mod:`sim.strategies.base` for the contract and :mod:`sim.strategies.ar` for the
worked example). Adding a method = writing that module and adding one line below.
"""

from __future__ import annotations

import importlib.util

from hwmodels.errors import HetSpecError
from sim.methods import method_info, method_names
from sim.registry import import_registered
from sim.strategies.base import (Estimate, EstimateArrays, Knob, Problem, Strategy, StrategyConfig)

#: method name -> module that implements its strategy
STRATEGY_MODULES: dict[str, str] = {
    "ar": "sim.strategies.ar",
    "offload": "sim.strategies.offload",
    "chain": "sim.strategies.chain",
    "draft-tree": "sim.strategies.draft_tree",
    "medusa": "sim.strategies.medusa",
    "hcmp": "sim.strategies.hcmp",
    "dovetail": "sim.strategies.dovetail",
    "alspec": "sim.strategies.alspec",
}


def get_strategy(name: str) -> Strategy:
    """The strategy of method ``name``; an unknown name is one line listing the valid ones."""
    method_info(name)
    module_name = STRATEGY_MODULES[name]
    strategy = import_registered(module_name, f"method {name} has no simulator strategy").STRATEGY()
    if strategy.name != name:
        raise HetSpecError(f"{module_name}: STRATEGY.name is {strategy.name!r}, expected {name!r}")
    return strategy


def available_methods() -> tuple[str, ...]:
    """Methods whose strategy module exists, in the order of :mod:`sim.methods`."""
    return tuple(name for name in method_names() if importlib.util.find_spec(STRATEGY_MODULES[name]) is not None)


__all__ = ["Estimate", "EstimateArrays", "Knob", "Problem", "Strategy", "StrategyConfig", "STRATEGY_MODULES",
           "available_methods", "get_strategy"]
