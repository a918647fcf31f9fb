"""``ContentKey``: the one way to key a cached or recorded result by what decides it (the scan cache, data
checks, scores, predict's journal, figures, the software every rank must share)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def library_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


class ContentKey:
    """A SHA-256 over a kind and a format number, then what is fed, in order; the ``add_*`` calls chain."""

    def __init__(self, kind: str, version: int | str) -> None:
        self._digest = hashlib.sha256(f"{kind} {version}\n".encode())

    def add_values(self, values: Any) -> ContentKey:
        """JSON-serialisable ``values``, with sorted keys (dict order does not matter)."""
        self._digest.update(json.dumps(values, sort_keys=True, separators=(",", ":")).encode() + b"\n")
        return self

    def add_sources(self, paths: Iterable[Path], root: Path | None = None) -> ContentKey:
        """Each file's name (relative to ``root`` when given) and bytes: code that decides the result."""
        for path in paths:
            name = path.relative_to(root) if root is not None else path.name
            self._digest.update(f"{name}\0".encode() + path.read_bytes())
        return self

    def add_libraries(self, names: Iterable[str]) -> ContentKey:
        return self.add_values({name: library_version(name) for name in names})

    def add_files(self, paths: Iterable[Path | None]) -> ContentKey:
        """Each data file's absolute path, size and modification time (ns); None: "missing"."""
        for path in paths:
            if path is None:
                self._digest.update(b"missing\n")
                continue
            st = path.stat()
            self._digest.update(f"{os.fspath(path)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return self

    def hexdigest(self, length: int | None = None) -> str:
        return self._digest.hexdigest()[:length]
