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
from real.hetero import HETERO_DECODER_MODULES

#: method name -> module implementing it, and the config class name in that module.
DECODER_MODULES: dict[str, tuple[str, str]] = {
    "ar": ("real.decode.ar", "ArConfig"),
    "chain": ("real.decode.chain", "ChainConfig"),
    "draft-tree": ("real.decode.draft_tree", "DraftTreeConfig"),
    "medusa": ("real.decode.medusa", "MedusaConfig"),
}
#: Every method the real path runs: the single-worker ones above and the heterogeneous ones
#: (several workers; real/hetero).
ALL_DECODER_MODULES: dict[str, tuple[str, str]] = {**DECODER_MODULES, **HETERO_DECODER_MODULES}


@dataclass(frozen=True)
class Decoder:
    name: str
    generate: Callable
    config_type: type


def check_method(name: str) -> str:
    """``name`` if the real path implements it; otherwise one line listing the valid names."""
    if name not in ALL_DECODER_MODULES:
        raise UnknownNameError("method", name, ALL_DECODER_MODULES)
    return name


def decoder(name: str) -> Decoder:
    """The real decoder of method ``name``."""
    module_name, config_name = ALL_DECODER_MODULES[check_method(name)]
    module = importlib.import_module(module_name)
    return Decoder(name, module.generate, getattr(module, config_name))
