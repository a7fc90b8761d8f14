"""Content hashes of the demo cache's files: written into ``summary.json`` when the models are trained,
checked when they load, so damage that keeps a file readable (bytes flipped inside the weights, an edited
tokenizer entry) is found and named instead of decoding garbage. Torch-free."""

from __future__ import annotations

import hashlib
from pathlib import Path

from hwmodels.errors import HetSpecError

#: Bytes read at a time while hashing (the weights are tens of megabytes).
CHUNK_BYTES = 1 << 20


def file_hash(path: Path) -> str:
    """``sha256:<hex>`` of the file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK_BYTES):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def content_hashes(folder: Path, exclude: tuple[str, ...] = ()) -> dict[str, str]:
    """Every file under ``folder`` (paths relative to it, ``/``-separated) -> its hash, except ``exclude``."""
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): file_hash(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and p.relative_to(folder).as_posix() not in exclude}


def check_content_hashes(folder: Path, expected: dict[str, str] | None, where: Path) -> None:
    """One line naming the first file of ``folder`` that is missing or whose content differs from the hash
    ``where`` (the summary) records for it; a summary without hashes fails too (nothing can be checked)."""
    folder = Path(folder)
    if not isinstance(expected, dict) or not expected:
        raise HetSpecError(f"{where} records no content hashes of the cached files, so they cannot be checked")
    for name, digest in expected.items():
        path = folder / name
        if not path.is_file():
            raise HetSpecError(f"{path} is missing")
        if file_hash(path) != digest:
            raise HetSpecError(f"{path} does not match the content hash recorded when it was trained "
                               f"(damaged or edited)")
