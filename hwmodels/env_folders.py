"""Folders named by environment variables (``HETSPEC_CACHE_DIR``, ``HETSPEC_PLATFORMS_DIR``,
``HETSPEC_REPORTS_DIR``), checked where they are read: a variable that names a file, a folder under a
file, or (for a folder HetSpec writes) a folder it may not write, is one line naming the variable."""

from __future__ import annotations

import os
from pathlib import Path

from hwmodels.errors import HetSpecError

CACHE_DIR_ENV = "HETSPEC_CACHE_DIR"
PLATFORMS_DIR_ENV = "HETSPEC_PLATFORMS_DIR"
REPORTS_DIR_ENV = "HETSPEC_REPORTS_DIR"


def env_folder(variable: str, writable: bool) -> Path | None:
    """The folder ``$variable`` names (None when unset or empty), checked: not a file, no file among its
    parents and, with ``writable``, a folder this process may create and write (it need not exist yet)."""
    value = os.environ.get(variable)
    if not value:
        return None
    path = Path(value).expanduser()
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        where = "it is a file" if existing == path else f"{existing} is a file"
        raise HetSpecError(f"{variable}={value} must name a folder, but {where}")
    if writable and existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise HetSpecError(f"{variable}={value}: cannot write there ({existing}: Permission denied); "
                           f"point {variable} at a folder you may write")
    return path
