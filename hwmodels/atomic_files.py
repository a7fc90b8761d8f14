"""Atomic file output: a file HetSpec writes is either the complete new file or the one it replaces.

Every writer goes through :func:`atomic_path` (for libraries that write to a path: pandas, safetensors,
matplotlib) or :func:`atomic_write` (an open file handle). The content goes to a hidden temporary file
in the destination's own folder (``.<name>.<pid>-<random>.tmp``: a rename never crosses file systems),
is flushed and fsynced, and only then is renamed over the destination with ``os.replace``, which is
atomic on POSIX and Windows. A run killed before the rename leaves the previous file (or no file) and,
at worst, its hidden temporary, which the next write of the same file deletes once its process is gone
(:func:`remove_stale_temporaries`).
"""

from __future__ import annotations

import glob
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

#: Suffix of the temporary files (hidden by their leading dot).
TEMP_SUFFIX = ".tmp"


def temporary_name(path: Path) -> Path:
    """The temporary sibling of ``path`` this process writes first."""
    return path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}{TEMP_SUFFIX}")


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (POSIX; a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path to write ``path``'s new content to; renamed over ``path`` when the block ends
    without an exception, deleted when it raises (``path`` is then untouched)."""
    path = Path(path)
    temp = temporary_name(path)
    try:
        yield temp
        _fsync_file(temp)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)
    remove_stale_temporaries(path)


@contextmanager
def atomic_write(path: str | Path, mode: str = "w", **open_kwargs) -> Iterator[IO]:
    """``open(path, mode)`` whose content appears at ``path`` only once complete (see :func:`atomic_path`)."""
    if not mode.startswith("w"):
        raise ValueError(f"atomic_write writes a new file (mode 'w' or 'wb'), got {mode!r}")
    with atomic_path(path) as temp:
        with open(temp, mode, **open_kwargs) as fh:
            yield fh
            fh.flush()


def write_text(path: str | Path, text: str) -> Path:
    """``Path.write_text``, atomically."""
    with atomic_write(path) as fh:
        fh.write(text)
    return Path(path)


def write_bytes(path: str | Path, data: bytes) -> Path:
    """``Path.write_bytes``, atomically."""
    with atomic_write(path, "wb") as fh:
        fh.write(data)
    return Path(path)


def remove_stale_temporaries(path: str | Path) -> list[Path]:
    """Delete the temporaries of ``path`` whose writing process no longer exists; returns them."""
    path = Path(path)
    removed = []
    for temp in path.parent.glob(f".{glob.escape(path.name)}.*{TEMP_SUFFIX}"):
        pid = temp.name[: -len(TEMP_SUFFIX)].rsplit(".", 1)[-1].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)        # signal 0: only asks whether the process exists
        except ProcessLookupError:
            temp.unlink(missing_ok=True)
            removed.append(temp)
        except (PermissionError, OSError):
            pass
    return removed
