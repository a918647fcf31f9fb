"""``ContentKey``: the one way to key a cached or recorded result by what decides it.

A key is a SHA-256 over a kind and a format number, then, in the order fed: JSON values, source
files (name and bytes), library versions, and data files (path, size and modification time, or
"missing"). The scan cache, the data checks, the scoring and inference caches, predict's journal,
the figure cache and the software every rank must share all build theirs here.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def library_version(name: str) -> str:
    """The installed version of the distribution ``name``, or "absent"."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


class ContentKey:
    """A SHA-256 fed step by step; each ``add_*`` returns the key, so that calls chain:
    ``ContentKey("scores", 2).add_values({"protocol": "r3net"}).hexdigest(12)``."""

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
        """The installed version of each distribution."""
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
        """The key as hex, its first ``length`` digits when given."""
        return self._digest.hexdigest()[:length]
