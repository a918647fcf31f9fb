"""Checkpoint policy: atomic writes, old files removed only after a new one is complete, safe loading.

ignite's ``Checkpoint`` decides *when* and *what* to save; ``SafeDiskSaver`` decides *how* it lands
on disk, and ``find_resume_checkpoint`` / ``load_checkpoint`` read it back without trusting it.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from ignite.handlers import DiskSaver

logger = logging.getLogger(__name__)

CHECKPOINT_PATTERN = re.compile(r"^checkpoint_(\d+)\.pt$")
TEMP_PREFIX = ".tmp-"


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read; the message names the file."""


class SafeDiskSaver(DiskSaver):
    """A ``DiskSaver`` that never leaves the run without a complete checkpoint.

    * The file is written to a hidden temporary name, flushed and fsynced, then renamed, so a kill
      during a save leaves no partial file under a checkpoint name.
    * ``Checkpoint`` asks to remove the oldest file *before* it writes the new one; this saver defers
      that removal until the next write has completed.
    * A failed write (full disk, permissions) raises ``CheckpointError`` naming the file; the
      earlier checkpoints are untouched.
    """

    def __init__(self, dirname: str | Path, save_on_rank: int = 0) -> None:
        super().__init__(str(dirname), atomic=True, create_dir=True, require_empty=False,
                         save_on_rank=save_on_rank)
        self._pending_removal: list[str] = []

    def __call__(self, checkpoint: Mapping, filename: str, metadata: Mapping | None = None) -> None:
        import ignite.distributed as idist

        if idist.get_rank() != self.save_on_rank:
            return
        path = Path(self.dirname) / filename
        self._write_atomically(checkpoint, path)
        stale, self._pending_removal = self._pending_removal, []
        for name in stale:
            if name != filename:
                (Path(self.dirname) / name).unlink(missing_ok=True)

    def remove(self, filename: str) -> None:
        self._pending_removal.append(filename)

    @staticmethod
    def _write_atomically(checkpoint: Mapping, path: Path) -> None:
        fd, tmp_name = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp_name, 0o644)  # mkstemp creates 0600; checkpoints are shared artefacts
            os.replace(tmp_name, path)
        except BaseException as e:
            Path(tmp_name).unlink(missing_ok=True)
            if isinstance(e, OSError):
                raise CheckpointError(f"cannot write checkpoint {path}: {e.strerror or e}") from e
            if isinstance(e, RuntimeError):  # torch's zip writer reports a failed write this way
                raise CheckpointError(f"cannot write checkpoint {path}: the write failed (disk full or "
                                      f"file size limit?): {str(e).strip().splitlines()[0]}") from e
            raise


def remove_stale_temporaries(dirname: str | Path) -> None:
    """Delete temporary files left by a save that was killed half-way."""
    for p in Path(dirname).glob(TEMP_PREFIX + "*"):
        p.unlink(missing_ok=True)


def list_checkpoints(dirname: str | Path) -> list[tuple[int, Path]]:
    """Periodic checkpoints in ``dirname`` as (iteration, path), oldest first."""
    found = []
    d = Path(dirname)
    if d.is_dir():
        for p in d.iterdir():
            m = CHECKPOINT_PATTERN.match(p.name)
            if m:
                found.append((int(m.group(1)), p))
    return sorted(found)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint on the CPU without executing pickled code.

    Raises ``CheckpointError`` naming the file when it is missing, truncated, corrupt, or carries
    anything but tensors and plain containers (e.g. a pickled callable).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for truncated and unsafe files
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "weights_only" in str(e) or "Unsupported global" in str(e):
            reason = "it contains pickled objects other than tensors (refused: it could run code)"
        raise CheckpointError(f"cannot load checkpoint {path}: {reason}") from e
    if not isinstance(obj, dict):
        raise CheckpointError(f"checkpoint {path} does not hold a dict of states")
    return obj


def find_resume_checkpoint(dirname: str | Path, report: Callable[[str], None] = logger.warning
                           ) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint in ``dirname`` that loads completely, with its content.

    Corrupt or truncated newer files are reported through ``report`` and skipped.
    """
    for _, path in reversed(list_checkpoints(dirname)):
        try:
            return path, load_checkpoint(path)
        except CheckpointError as e:
            report(f"skipping {e}")
    return None
