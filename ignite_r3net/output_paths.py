"""Output paths checked before any work, so that no command computes for minutes and then fails
to write its result: ``check_writable_file`` (``--json``, ``--per-image``, ``export --output``)
and ``check_writable_folder`` (``--save-maps``, ``predict --output``, ``compare --out``).

Each creates the folder the output goes into (as the command would) and writes a probe file in it:
permission bits alone do not tell (``os.access`` says yes for root anywhere, and for folders such
as ``/proc`` or a read-only mount where a write then fails). A failure is one ``OptionError``
naming the option, the path and the cause.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import OptionError


def check_writable_file(path: str | Path | None, option: str) -> None:
    """Fail unless ``path`` (when given) can be written as a file: not a folder, in a folder that
    exists or can be created and takes new files (written beside their final name, then renamed)."""
    if not path:
        return
    path = Path(path)
    if path.is_dir():
        raise OptionError(f"{option} {path} is a folder; give a file name")
    _check_folder(path.parent, option, path)


def check_writable_folder(path: str | Path | None, option: str) -> None:
    """Fail unless ``path`` (when given) is a folder that exists or can be created, and takes new
    files."""
    if not path:
        return
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OptionError(f"{option} {path} exists and is not a folder")
    _check_folder(path, option, path)


def _check_folder(folder: Path, option: str, given: Path) -> None:
    """Create ``folder`` and prove that a file can be written in it."""
    if folder.exists() and not folder.is_dir():
        raise OptionError(f"{option} {given}: {folder} is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OptionError(f"{option} {given}: cannot create the folder {folder}: {_reason(e)}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OptionError(f"{option} {given}: the folder {folder} is not writable")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as e:
        raise OptionError(f"{option} {given}: cannot write in {folder}: {_reason(e)}") from None


def _reason(e: OSError) -> str:
    return e.strerror or str(e)
