"""Output files: their paths checked writable before any work, then written whole or not at all (under a
temporary name beside the target, renamed onto it): no reader, nor a run after a crash, sees half a file."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from .errors import OptionError

TEMP_PREFIX = ".tmp-"  # hidden, so no listing of maps or images picks them up


@contextmanager
def atomic_output(path: str | Path, durable: bool = True) -> Iterator[Path]:
    """A temporary path for the block to write, renamed onto ``path`` (mode 0644) if the block succeeds;
    ``durable`` also fsyncs, against a power loss (too slow for thousands of small files)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=path.suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        if durable:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; what we write is read by others too
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if durable:
        _fsync_directory(path.parent)


def _fsync_directory(folder: Path) -> None:
    with suppress(OSError):  # not every filesystem can sync a folder
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_text(text: str, path: str | Path) -> None:
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(data: Any, path: str | Path) -> None:
    """Write ``data`` as JSON atomically (floats as Python's shortest round-trip repr)."""
    write_text(json.dumps(data, indent=2) + "\n", path)


def read_json_object(path: str | Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when it is missing, unreadable or not an object."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


@contextmanager
def atomic_folder(path: str | Path) -> Iterator[Path]:
    """``atomic_output`` for a folder: a reader sees the old folder or the new one, never a mix."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=path.parent))
    old = tmp.with_name(tmp.name + ".old")
    try:
        yield tmp
        for file in tmp.iterdir():
            file.chmod(0o644)  # some writers create 0600 (safetensors); the folder is shared
            with open(file, "rb+") as f:
                os.fsync(f.fileno())
        tmp.chmod(0o755)  # mkdtemp creates 0700
        _fsync_directory(tmp)
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
    _fsync_directory(path.parent)


def remove_stale_temporaries(dirname: str | Path) -> None:
    """Delete temporary files left by a save that was killed half-way."""
    for p in Path(dirname).glob(TEMP_PREFIX + "*"):
        p.unlink(missing_ok=True)


# The checks below write a probe file where the output goes (or in its nearest existing ancestor):
# permission bits alone do not tell (root, a read-only mount, /proc). Nothing is left behind.


def check_writable_file(path: str | Path | None, option: str) -> None:
    """``OptionError`` unless ``path`` (when given) can be written as a file."""
    if not path:
        return
    path = Path(path)
    if path.is_dir():
        raise OptionError(f"{option} {path} is a folder; give a file name")
    _check_folder(path.parent, option, path)


def check_writable_folder(path: str | Path | None, option: str) -> None:
    """``OptionError`` unless ``path`` (when given) is a folder that takes new files, or can be made."""
    if not path:
        return
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OptionError(f"{option} {path} exists and is not a folder")
    _check_folder(path, option, path)


def _check_folder(folder: Path, option: str, given: Path) -> None:
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
