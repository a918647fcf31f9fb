"""Files that appear whole or not at all: written under a temporary name beside the target, then
renamed onto it, so a reader, or a later run after an interruption, never sees half a file."""

from __future__ import annotations

import json
import os
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
