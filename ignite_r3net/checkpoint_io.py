"""Checkpoint files: atomic writes, old files removed only after a new one is complete, safe reading.

ignite's ``Checkpoint`` decides *when* and *what* to save; ``SafeDiskSaver`` decides *how* it lands
on disk. ``load_checkpoint`` is the one reader of checkpoints and weights files (no pickled code
runs), and ``find_resume_checkpoint`` picks the newest complete one of a run.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import warnings
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from ignite.handlers import DiskSaver

from .distributed.ranks import rank_zero_only
from .errors import CheckpointError, error_line, load_error_reason

logger = logging.getLogger(__name__)

CHECKPOINT_PATTERN = re.compile(r"^checkpoint_(\d+)\.pt$")
TEMP_PREFIX = ".tmp-"


class SafeDiskSaver(DiskSaver):
    """A ``DiskSaver`` that never leaves the run without a complete checkpoint.

    * The file is written to a hidden temporary name, flushed and fsynced, then renamed, so a kill
      during a save leaves no partial file under a checkpoint name.
    * ``Checkpoint`` asks to remove the oldest file *before* it writes the new one; this saver defers
      that removal until the next write has completed.
    * A failed write (full disk, permissions) raises ``CheckpointError`` naming the file; the
      earlier checkpoints are untouched.
    """

    def __init__(self, dirname: str | Path) -> None:
        super().__init__(str(dirname), atomic=True, create_dir=True, require_empty=False, save_on_rank=0)
        self._pending_removal: list[str] = []

    @rank_zero_only
    def __call__(self, checkpoint: Mapping, filename: str, metadata: Mapping | None = None) -> None:
        path = Path(self.dirname) / filename
        self._write_atomically(checkpoint, path)
        stale, self._pending_removal = self._pending_removal, []
        for name in stale:
            if name != filename:
                (Path(self.dirname) / name).unlink(missing_ok=True)

    @rank_zero_only  # other ranks never write, so never remove
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


def load_checkpoint(path: str | Path, what: str = "checkpoint") -> dict[str, Any]:
    """Read a checkpoint or weights file on the CPU without executing pickled code: the one reader
    of every ``.pt``/``.pth`` (``torch.load(weights_only=True)``) and ``.safetensors`` file.

    Raises ``CheckpointError`` naming ``what`` and the file when it is missing, truncated, corrupt,
    or carries anything but tensors and plain containers (e.g. a pickled callable).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{what} {path} does not exist")
    exported = exported_model_format(path)
    if exported is not None:
        raise CheckpointError(
            f"{what} {path} is a model written by 'export' ({exported}), not a checkpoint: "
            f"it goes with predict --model {path}"
        )
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            obj: Any = load_file(path, device="cpu")
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # e.g. about the pickle protocol of a file it then refuses
                obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch and safetensors raise several types for truncated and unsafe files
        raise CheckpointError(f"cannot load {what} {path}: {load_error_reason(e)}") from e
    if not isinstance(obj, dict):
        raise CheckpointError(f"{what} {path} does not hold a dict of states")
    return obj


def exported_model_format(path: str | Path) -> str | None:
    """``"ONNX"`` or ``"TorchScript"`` when ``path`` is a model file ``export`` writes, else None: an
    ``.onnx`` name, or a zip archive holding TorchScript's code (``torch.save`` archives have none)."""
    path = Path(path)
    if path.suffix.lower() == ".onnx":
        return "ONNX"
    if not zipfile.is_zipfile(path):
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return None
    return "TorchScript" if any(name.split("/")[1:2] == ["code"] for name in names) else None


def model_state_dict(checkpoint: Mapping[str, Any], path: str | Path) -> dict[str, torch.Tensor]:
    """The model weights inside any file we accept: a training checkpoint (its ``"model"`` entry),
    a ``best_model_*`` file or an original R3Net release (the state_dict itself)."""
    if isinstance(checkpoint.get("model"), Mapping):
        checkpoint = checkpoint["model"]
    state = {k: v for k, v in checkpoint.items() if isinstance(v, torch.Tensor)}
    if not state or len(state) != len(checkpoint):
        keys = ", ".join(list(checkpoint)[:5])
        raise CheckpointError(f"checkpoint {path} holds no model state_dict (keys: {keys})")
    return state


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
