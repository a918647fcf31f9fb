"""Results on screen and on disk: the metrics table and the JSON file of ``evaluate``, and atomic
file writes."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import OptionError
from ..metrics import METRIC_KEYS


def format_table(rows: Mapping[str, Mapping[str, float]]) -> str:
    """A plain-text table: one row per data set, the image count and the nine metrics."""
    header = ["dataset", "images", *METRIC_KEYS]
    body = [[name, str(int(r["images"]))] + [f"{r[c]:.4f}" for c in METRIC_KEYS] for name, r in rows.items()]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
        for line in [header, *body]
    ]
    return "\n".join(lines)


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


def report(rows: Mapping[str, Mapping[str, float]], json_path: str | None, print_table: bool = True) -> None:
    """Print the table (unless ``print_table`` is False) and, with ``json_path``, write the rows as
    JSON keyed by data set."""
    if print_table:
        print(format_table(rows), flush=True)
    if json_path:
        write_json(dict(rows), json_path)


def check_writable_file(path: str | None, option: str) -> None:
    """Fail before the work whose result would be lost when the file cannot be written."""
    if not path:
        return
    if Path(path).is_dir():
        raise OptionError(f"{option} {path} is a folder; give a file name")
    parent = Path(path).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OptionError(f"{option} {path}: cannot create {parent}: {e.strerror or e}") from None
    if not os.access(parent, os.W_OK):
        raise OptionError(f"{option} {path}: {parent} is not writable")
