"""Registries of modules by name (strategies, paper reproductions): import one, or say it is not written yet."""

from __future__ import annotations

import importlib
from types import ModuleType

from hwmodels.errors import HetSpecError


def import_registered(module_name: str, missing: str) -> ModuleType:
    """The module ``module_name`` of a registry. When that module itself does not exist (a registry may
    name pieces not written yet), one line ``<missing> yet (<its path>.py)``; an import error inside an
    existing module propagates unchanged."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise HetSpecError(f"{missing} yet ({module_name.replace('.', '/')}.py)") from None
        raise
