"""Which maps in a ``predict`` output folder are done, and by which model, so that a stopped run
continues where it stopped.

The key of a run is a SHA-256 over the model file's bytes (a retrained file at the same path is
another model, a copy elsewhere the same), every option that changes a map's pixels, and the
versions of this package and torch. In ``OUTPUT/.predict/`` (hidden: never read as a map or input),
``<key>.json`` says what the key stands for, for people, and ``<key>.rank<N>.done`` lists every
map rank N wrote, one JSON string a line appended after the map was renamed into place (a line cut
short by a crash is skipped: that map is redone).

A map is done when its file exists and a journal of this key lists it. Nothing is fsynced
(milliseconds per map): against a killed process the rename is enough, and a map a power loss took
back is missing, so it is made again. A run of another key first removes the other keys' journals,
so a journal never vouches for a file another model wrote. Failed images are never listed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import torch

from .. import __version__
from ..atomic_files import write_json
from ..content_key import ContentKey
from ..model.backbone_weights import sha256_of

RECORD_DIR = ".predict"


def run_description(model_file: str | Path, settings: Mapping[str, Any]) -> dict[str, Any]:
    """What decides the maps: the model file (path, SHA-256), ``settings`` (the options that change
    pixels) and the versions of this package and torch."""
    return {
        "model": os.fspath(Path(model_file).resolve()),
        "sha256": sha256_of(model_file),
        "options": dict(settings),
        "versions": {"ignite_r3net": __version__, "torch": torch.__version__},
    }


def run_key(description: Mapping[str, Any]) -> str:
    """The key of a run: everything in ``description`` but where the model file lies."""
    decisive = {k: v for k, v in description.items() if k != "model"}
    return ContentKey("predict run", 1).add_values(decisive).hexdigest(32)


class MapRecord:
    """The record of the maps of one key in one output folder."""

    def __init__(self, out_dir: str | Path, key: str) -> None:
        self.out, self.key = Path(out_dir), key
        self.folder = self.out / RECORD_DIR

    def done(self, names: Iterable[str]) -> set[str]:
        """Those of ``names`` (map file names) whose map exists and is listed for this key."""
        listed: set[str] = set()
        for journal in self.folder.glob(f"{self.key}.rank*.done"):
            listed.update(_names(journal))
        if not listed:
            return set()
        with os.scandir(self.out) as entries:
            present = {e.name for e in entries if e.is_file()}
        return {name for name in names if name in listed and name in present}

    def begin(self, description: Mapping[str, Any]) -> None:
        """Before any map is written (the leading process): forget other keys' journals and describe
        this key (``run_lock.claimed_folder`` removed the temporaries an interrupted run left)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for path in self.folder.iterdir():
            if not path.name.startswith(self.key + "."):
                path.unlink(missing_ok=True)
        write_json(dict(description), self.folder / f"{self.key}.json")

    def journal(self, rank: int) -> Journal:
        self.folder.mkdir(parents=True, exist_ok=True)
        return Journal(self.folder / f"{self.key}.rank{rank}.done")


class Journal:
    """One rank's list of the maps it wrote, open for appending (a context manager)."""

    def __init__(self, path: Path) -> None:
        self._file: IO[str] = open(path, "a", encoding="utf-8", buffering=1)  # a line reaches the file at once

    def add(self, name: str) -> None:  # after the map has its final name
        self._file.write(json.dumps(name) + "\n")

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *_: Any) -> None:
        self._file.close()


def _names(journal: Path) -> list[str]:
    names = []
    for line in journal.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            names.append(json.loads(line))
        except ValueError:
            continue
    return names
