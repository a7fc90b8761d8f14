"""The fields of a model file, each with its type and range: one definition for a Hugging Face
``config.json`` (:func:`sim.model_spec.spec_from_hf_config`) and a GGUF file's metadata
(:func:`sim.model_gguf.spec_fields`) alike. A wrong field is one line naming the file and the field
(:class:`hwmodels.errors.PresetError`), never replaced by a default."""

from __future__ import annotations

import math

from hwmodels.errors import PresetError


def field_int(config: dict, where: str, *keys: str, default: int | None = None, low: int = 1) -> int:
    """The first of ``keys`` present (not null) as an integer >= ``low``; ``default`` when none is.
    ``true``, ``"256"`` and ``256.9`` are not integers: one line naming the file and the field."""
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer() and value >= low:
                return int(value)                  # 4096.0: an integer written as a float
            raise PresetError(where, key, f"must be an integer >= {low}, got {value!r}")
        if value < low:
            raise PresetError(where, key, f"must be an integer >= {low}, got {value}")
        return value
    if default is None:
        raise PresetError(where, keys[0], "missing field")
    return default


def field_float(config: dict, where: str, key: str, default: float) -> float:
    """``key`` as a finite number > 0 (``default`` when absent or null)."""
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise PresetError(where, key, f"must be a finite number > 0, got {value!r}")
    return float(value)


def field_bool(config: dict, where: str, key: str, default: bool) -> bool:
    """``key`` as ``true`` or ``false`` (``default`` when absent or null)."""
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise PresetError(where, key, f"must be true or false, got {value!r}")
    return value
