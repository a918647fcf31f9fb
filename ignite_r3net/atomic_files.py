"""Files that appear whole or not at all: written under a temporary name beside the target, then
renamed onto it, so a reader, or a later run after an interruption, never sees half a file. Every
file this package writes for someone to read later goes through ``atomic_output`` (a folder of
files, the Hub export, through ``atomic_folder``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

TEMP_PREFIX = ".tmp-"  # hidden, so no listing of maps or images picks them up


@contextmanager
def atomic_output(path: str | Path, durable: bool = True) -> Iterator[Path]:
    """A temporary path beside ``path`` (its folder is created) for the block to write; when the block
    ends without an error the file is made readable by all (0644) and renamed onto ``path``. On an
    error or interruption it is removed and ``path`` is untouched. ``durable`` also fsyncs the file
    and the rename, against a power loss; the rename alone is enough against a killed process, and
    the fsyncs cost milliseconds per file, too much for thousands of small ones."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=path.suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        if durable:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; what we write is read by others too
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if durable:
        _fsync_directory(path.parent)


def _fsync_directory(folder: Path) -> None:
    """Make a rename in ``folder`` durable, where the filesystem can sync a folder at all."""
    with suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_bytes(data: bytes, path: str | Path) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_output(path) as tmp:
        tmp.write_bytes(data)


def write_text(text: str, path: str | Path) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(data: Any, path: str | Path) -> None:
    """Write ``data`` as JSON atomically (floats as Python's shortest round-trip repr)."""
    write_text(json.dumps(data, indent=2) + "\n", path)


@contextmanager
def atomic_folder(path: str | Path) -> Iterator[Path]:
    """``atomic_output`` for a folder: a new temporary folder beside ``path`` that, filled without an
    error, has its files made readable by all and fsynced, and replaces ``path`` (a folder already
    there is removed after the swap): a reader sees the old folder or the new one, never a mix."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=path.parent))
    old = tmp.with_name(tmp.name + ".old")
    try:
        yield tmp
        for file in tmp.iterdir():
            file.chmod(0o644)  # some writers create 0600 (safetensors); the folder is shared
            with open(file, "rb+") as f:
                os.fsync(f.fileno())
        tmp.chmod(0o755)  # mkdtemp creates 0700
        _fsync_directory(tmp)
        replacing = path.exists()
        if replacing:  # two renames: POSIX cannot swap a folder for a non-empty one in one
            os.replace(path, old)
        try:
            os.replace(tmp, path)
        except OSError:
            if replacing:
                os.replace(old, path)
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    _fsync_directory(path.parent)


def remove_stale_temporaries(dirname: str | Path) -> None:
    """Delete temporary files left by a save that was killed half-way."""
    for p in Path(dirname).glob(TEMP_PREFIX + "*"):
        p.unlink(missing_ok=True)
