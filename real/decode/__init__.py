"""The real decode methods, selected by the method names of :mod:`sim.methods`.

Every decoder module has ``NAME``, a frozen config dataclass and ``generate(models, prompt,
max_new_tokens, config, clock, generator=None) -> DecodeResult`` (conventions in
:mod:`real.decode.common`). :func:`decoder` imports the module on first use, so that checking a
method name (:func:`check_method`) does not import torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from hwmodels.errors import UnknownNameError

#: method name -> module implementing it, and the config class name in that module.
DECODER_MODULES: dict[str, tuple[str, str]] = {
    "ar": ("real.decode.ar", "ArConfig"),
    "chain": ("real.decode.chain", "ChainConfig"),
    "draft-tree": ("real.decode.draft_tree", "DraftTreeConfig"),
    "medusa": ("real.decode.medusa", "MedusaConfig"),
}


@dataclass(frozen=True)
class Decoder:
    name: str
    generate: Callable
    config_type: type


def check_method(name: str) -> str:
    """``name`` if the real path implements it; otherwise one line listing the valid names."""
    if name not in DECODER_MODULES:
        raise UnknownNameError("method", name, DECODER_MODULES)
    return name


def decoder(name: str) -> Decoder:
    """The real decoder of method ``name``."""
    module_name, config_name = DECODER_MODULES[check_method(name)]
    module = importlib.import_module(module_name)
    return Decoder(name, module.generate, getattr(module, config_name))
