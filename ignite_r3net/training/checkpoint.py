"""Checkpoint policy: atomic writes, old files removed only after a new one is complete, safe loading.

ignite's ``Checkpoint`` decides *when* and *what* to save; ``SafeDiskSaver`` decides *how* it lands
on disk, and ``find_resume_checkpoint`` / ``load_checkpoint`` read it back without trusting it.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import ignite.distributed as idist
import torch
from ignite.handlers import DiskSaver

from ..errors import error_line, load_error_reason

logger = logging.getLogger(__name__)

CHECKPOINT_PATTERN = re.compile(r"^checkpoint_(\d+)\.pt$")
TEMP_PREFIX = ".tmp-"


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read; the message names the file."""


# Options an exact resume must keep: the LR schedule, the optimiser's hyper-parameters (its state
# dict restores them), what each iteration samples and how it is computed.
RESUME_FIXED = (
    "iters",
    "lr",
    "lr_power",
    "momentum",
    "weight_decay",
    "batch_size",
    "crop",
    "rotate",
    "backbone",
    "seed",
    "amp",
)
# What ``--resume`` needs in a checkpoint besides the optional ``scaler`` (fp16) and ``recipe``.
TRAINING_STATE_KEYS = ("trainer", "model", "optimizer", "lr_scheduler", "loss_meter")


class RunRecipe:
    """The part of a run that a resume must not change, saved in each checkpoint as ``recipe``:
    the ``RESUME_FIXED`` options, the world size and the number of training pairs.

    Nothing is restored from it; ``preflight`` compares it with the new options before any worker
    starts (ignite would otherwise quietly keep the checkpoint's schedule and epoch length).
    """

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = dict(values)

    @classmethod
    def of(cls, config: Any, world_size: int, pairs: int) -> RunRecipe:
        values = {name: getattr(config, name) for name in RESUME_FIXED}
        return cls({**values, "world_size": world_size, "pairs": pairs})

    def state_dict(self) -> dict[str, Any]:
        return dict(self.values)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:  # checked in preflight, not restored
        pass

    def differences(self, saved: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
        """``(name, saved value, this run's value)`` for each entry that differs from ``saved``."""
        return [
            (name, saved[name], value) for name, value in self.values.items() if name in saved and saved[name] != value
        ]


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
        super().__init__(str(dirname), atomic=True, create_dir=True, require_empty=False, save_on_rank=save_on_rank)
        self._pending_removal: list[str] = []

    def __call__(self, checkpoint: Mapping, filename: str, metadata: Mapping | None = None) -> None:
        if idist.get_rank() != self.save_on_rank:
            return
        path = Path(self.dirname) / filename
        self._write_atomically(checkpoint, path)
        stale, self._pending_removal = self._pending_removal, []
        for name in stale:
            if name != filename:
                (Path(self.dirname) / name).unlink(missing_ok=True)

    def remove(self, filename: str) -> None:
        if idist.get_rank() == self.save_on_rank:  # other ranks never write, so never remove
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
            _fsync_directory(path.parent)  # the rename itself must survive a power loss
        except BaseException as e:
            Path(tmp_name).unlink(missing_ok=True)
            if isinstance(e, OSError):
                raise CheckpointError(f"cannot write checkpoint {path}: {e.strerror or e}") from e
            if isinstance(e, RuntimeError):  # torch's zip writer reports a failed write this way
                raise CheckpointError(
                    f"cannot write checkpoint {path}: the write failed (disk full or file size limit?): {error_line(e)}"
                ) from e
            raise


def _fsync_directory(dirname: Path) -> None:
    try:
        fd = os.open(dirname, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the file itself is already synced
    finally:
        os.close(fd)


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
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. about the pickle protocol of a file it then refuses
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for truncated and unsafe files
        raise CheckpointError(f"cannot load checkpoint {path}: {load_error_reason(e)}") from e
    if not isinstance(obj, dict):
        raise CheckpointError(f"checkpoint {path} does not hold a dict of states")
    return obj


def find_resume_checkpoint(
    dirname: str | Path, report: Callable[[str], None] = logger.warning
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
