"""Reading a user's JSON or TOML file, with one clear error line when it is missing or malformed."""

from __future__ import annotations

import json
import tomllib
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
    text = path.read_text()
    if path.suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PresetError(str(path), "toml", f"not valid TOML ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PresetError(str(path), "json", f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
