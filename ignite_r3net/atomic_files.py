"""Files that appear whole or not at all: written under a temporary name beside the target, then
renamed onto it, so a reader, or a later run after an interruption, never sees half a file."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; renamed onto ``path`` when the block ends without
    an error (removed otherwise), so a reader, or a later run after an interruption, never sees half
    a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(text: str, path: str | Path) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(data: Any, path: str | Path) -> None:
    """Write ``data`` as JSON atomically (floats as Python's shortest round-trip repr)."""
    write_text(json.dumps(data, indent=2) + "\n", path)


@contextmanager
def atomic_folder(path: str | Path) -> Iterator[Path]:
    """A new temporary folder beside ``path`` to fill; when the block ends without an error it
    replaces ``path`` (a folder already there is removed after the swap), otherwise it is removed.
    A reader sees the old folder or the complete new one, never a mix of files."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp, old = (path.with_name(f".{path.name}.{os.getpid()}.{end}") for end in ("tmp", "old"))
    for stale in (tmp, old):  # left by a killed process that had this pid
        shutil.rmtree(stale, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
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
