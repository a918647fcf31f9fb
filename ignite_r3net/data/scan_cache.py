"""What a data set scan learnt about each file, kept between launches so that a relaunch, a resume or a
restart rereads only the files that changed.

One JSON file per data set folder and kind of check (``headers``: the scan of ``checks``) under
``$XDG_CACHE_HOME/ignite_r3net/scan/``, named by a digest of the folder's absolute path (so a read-only
data set folder does not matter, and every command on that folder shares it). Entries are keyed by
relative path, size and mtime in ns; ``code`` (a digest of the checking code and Pillow's version)
retires another version's entries. The file carries its format, version, kind, folder, code and a
SHA-256 of its entries; one that fails any of these is ignored with a note and replaced. No pickle.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..atomic_files import write_text
from ..content_key import ContentKey
from ..errors import note

FORMAT = "ignite_r3net scan cache"
VERSION = 1

# what a check found about one file, as JSON values (e.g. [width, height, problem])
Finding = list[Any]


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection in the block: a scan of 10,000 pairs allocates some 100k objects, none
    in a cycle, whose full collections in a process that imported torch cost 0.9 s of a 1.8 s cached scan."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def cache_folder() -> Path:
    """``$XDG_CACHE_HOME/ignite_r3net/scan`` (``~/.cache`` when the variable is unset or empty)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ignite_r3net" / "scan"


class ScanCache:
    """The findings of one kind of check on the files of one folder: ``with ScanCache(root, "headers",
    code) as cache: cache.get(path, lambda: probe(path))`` probes only new or changed files."""

    def __init__(self, folder: str | Path, kind: str, code: str) -> None:
        self.folder = Path(os.path.abspath(folder))
        self._prefix = os.path.join(os.fspath(folder), "")  # the folder as the scan's paths begin
        self.kind, self.code = kind, code
        digest = hashlib.sha256(os.fsencode(self.folder)).hexdigest()[:32]
        self.path = cache_folder() / f"{digest}-{kind}.json"
        self._old: dict[str, list[Any]] = {}
        self._new: dict[str, list[Any]] = {}

    def __enter__(self) -> ScanCache:
        self._old = self._load()
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None and self._new != self._old:
            self._save()

    def get(self, path: Path, check: Callable[[], Finding]) -> Finding:
        """The finding of ``path``: cached while its size and mtime are those recorded, else ``check()``
        (an unreadable ``stat`` is checked, never cached)."""
        where = os.fspath(path)
        try:
            st = os.stat(where)
        except OSError:
            return check()
        name = self._name(where)
        stamp = [st.st_size, st.st_mtime_ns]
        entry = self._old.get(name)
        finding = entry[2:] if entry is not None and entry[:2] == stamp else check()
        self._new[name] = stamp + finding
        return finding

    def _name(self, path: str) -> str:
        # relative to the folder: string work for the paths a scan of it lists
        if path.startswith(self._prefix):
            return path[len(self._prefix) :]
        return os.path.relpath(os.path.abspath(path), self.folder)

    def _load(self) -> dict[str, list[Any]]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            why = self._foreign(data)
        except (OSError, ValueError, UnicodeDecodeError) as e:
            why = f"unreadable ({e.__class__.__name__})"
        if why == "code":  # written by another version of the checks: retired silently
            return {}
        if why:
            note(f"ignoring the data scan cache {self.path} ({why}); rescanning {self.folder}")
            return {}
        return data["entries"]

    def _foreign(self, data: Any) -> str | None:
        """Why ``data`` is no cache of this folder and kind (``code``: of another version), or None."""
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
            return "not a scan cache of this version"
        if data.get("kind") != self.kind or data.get("folder") != os.fsdecode(self.folder):
            return "made for another folder or check"
        entries = data.get("entries")
        if not isinstance(entries, dict) or data.get("checksum") != _checksum(entries):
            return "its checksum does not match: damaged or edited"
        if not all(isinstance(v, list) and len(v) >= 2 for v in entries.values()):
            return "malformed entries"
        return "code" if data.get("code") != self.code else None

    def _save(self) -> None:
        data = dict(format=FORMAT, version=VERSION, kind=self.kind, folder=os.fsdecode(self.folder), code=self.code)
        data.update(checksum=_checksum(self._new), entries=self._new)
        try:
            write_text(json.dumps(data, separators=(",", ":")), self.path)
        except OSError as e:  # a read-only home: every launch rescans, which is slower, not wrong
            note(f"cannot write the data scan cache {self.path}: {e.strerror or e}")


def _checksum(entries: dict[str, Any]) -> str:
    return ContentKey("scan entries", VERSION).add_values(entries).hexdigest()
