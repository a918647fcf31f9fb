"""Output paths checked before any work, so that no command computes for minutes and then fails
to write its result. Each check writes a probe file in the output's folder, or in its nearest
existing ancestor when the folder is still to be made: permission bits alone do not tell (root, a
read-only mount, ``/proc``). Nothing is left behind, so a command refused later leaves no empty
folder. A failure is one ``OptionError`` naming the option, the path and the cause.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import OptionError


def check_writable_file(path: str | Path | None, option: str) -> None:
    """Fail unless ``path`` (when given) can be written as a file: not a folder, in a folder that
    takes new files or can be made."""
    if not path:
        return
    path = Path(path)
    if path.is_dir():
        raise OptionError(f"{option} {path} is a folder; give a file name")
    _check_folder(path.parent, option, path)


def check_writable_folder(path: str | Path | None, option: str) -> None:
    """Fail unless ``path`` (when given) is a folder that takes new files, or can be made."""
    if not path:
        return
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OptionError(f"{option} {path} exists and is not a folder")
    _check_folder(path, option, path)


def _check_folder(folder: Path, option: str, given: Path) -> None:
    """Prove that a file can be written in ``folder``, or in the ancestor it would be made in."""
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise OptionError(f"{option} {given}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OptionError(f"{option} {given}: the folder {existing} is not writable")
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".write-test-"):
            pass
    except OSError as e:
        raise OptionError(f"{option} {given}: cannot write in {existing}: {e.strerror or e}") from None
