"""Output paths checked before any work, so that no command computes for minutes and then fails
to write its result."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import OptionError


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
