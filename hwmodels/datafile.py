"""Reading a user's JSON or TOML file, with one clear error line when it is missing or malformed, and
preparing an output file or folder, with one clear line when it cannot be written."""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hwmodels.errors import HetSpecError, PresetError


def read_data_file(path: str | Path, what: str) -> Any:
    """The parsed content of a ``.json`` or ``.toml`` file (by its ending; JSON otherwise).

    ``what`` names the file in the error (``"platform file"``, ``"tree file"``, ...): a missing file
    gives ``<what> <path> does not exist``; a malformed one ``<path>: json: not valid JSON (...)``.
    """
    path = Path(path)
    if not path.is_file():
        raise HetSpecError(f"{what} {path} does not exist")
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise PresetError(str(path), path.suffix.lstrip(".") or "text", "not UTF-8 text") from None
    except OSError as exc:
        raise HetSpecError(f"cannot read {what} {path}: {_reason(exc, path)}") from None
    if path.suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PresetError(str(path), "toml", f"not valid TOML ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PresetError(str(path), "json", f"not valid JSON ({exc.msg} at line {exc.lineno})") from None


# ---------------------------------------------------------------------- writing
def _reason(exc: OSError, path: Path) -> str:
    """``Permission denied``, ``Not a directory (x)``: the OS's reason, and the path it names if not ``path``."""
    reason = exc.strerror or exc.__class__.__name__
    where = exc.filename if exc.filename is not None else None
    return f"{reason} ({where})" if where is not None and str(where) != str(path) else reason


def output_path(path: str | Path, what: str = "output file") -> Path:
    """``path`` ready to be written: its folder created (with parents), and one line if it cannot be.

    Commands call it before the work, so a file that cannot be written (a read-only folder, a
    parent that is a file) fails in milliseconds as ``cannot write <what> <path>: <reason>``.
    """
    path = Path(path)
    if path.is_dir():
        raise HetSpecError(f"cannot write {what} {path}: it is a folder")
    _check_folders(path.parent, path, what)
    with writing(path, what):
        path.parent.mkdir(parents=True, exist_ok=True)
    target = path if path.exists() else path.parent
    if not os.access(target, os.W_OK | (0 if target is path else os.X_OK)):
        raise HetSpecError(f"cannot write {what} {path}: Permission denied ({target})")
    return path


def output_folder(path: str | Path, what: str = "output folder") -> Path:
    """Folder ``path`` created (with parents) and writable, else one line (see :func:`output_path`)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise HetSpecError(f"cannot write {what} {path}: it exists and is not a folder")
    _check_folders(path, path, what)
    with writing(path, what):
        path.mkdir(parents=True, exist_ok=True)
    if not os.access(path, os.W_OK | os.X_OK):
        raise HetSpecError(f"cannot write {what} {path}: Permission denied")
    return path


def _check_folders(folder: Path, path: Path, what: str) -> None:
    """One line if an existing part of ``folder`` (or a parent) is a file, where a folder is needed."""
    for part in (folder, *folder.parents):
        if part.exists():
            if not part.is_dir():
                raise HetSpecError(f"cannot write {what} {path}: {part} is a file, not a folder")
            return


@contextmanager
def writing(path: str | Path, what: str = "output file") -> Iterator[Path]:
    """Turn an ``OSError`` raised while writing ``path`` into one line: ``cannot write <what> <path>: <reason>``."""
    path = Path(path)
    try:
        yield path
    except OSError as exc:
        raise HetSpecError(f"cannot write {what} {path}: {_reason(exc, path)}") from None
