"""Checkpoint files: atomic writes, old files removed only after a new one is complete, and
``load_checkpoint``, the one reader of checkpoints and weights files (no pickled code runs)."""

from __future__ import annotations

import logging
import re
import warnings
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from ignite.handlers import Checkpoint
from ignite.handlers.checkpoint import BaseSaveHandler

from .atomic_files import atomic_output
from .distributed.ranks import rank_zero_only
from .errors import CheckpointError, error_line, load_error_reason

logger = logging.getLogger(__name__)

CHECKPOINT_PATTERN = re.compile(r"^checkpoint_(?P<priority>\d+)\.pt$")
BEST_PATTERN = re.compile(r"^best_model_\d+_maxF=(?P<priority>[0-9.]+)\.pt$")


class SafeDiskSaver(BaseSaveHandler):
    """ignite's ``Checkpoint`` save handler that writes atomically and removes the oldest file only after
    the next write (``Checkpoint`` asks *before* it), so the run always has a complete checkpoint."""

    def __init__(self, dirname: str | Path) -> None:
        self.dirname = Path(dirname)
        self._pending_removal: list[str] = []

    @rank_zero_only
    def __call__(self, checkpoint: Mapping, filename: str, metadata: Mapping | None = None) -> None:
        path = self.dirname / filename
        try:
            with atomic_output(path) as tmp, open(tmp, "wb") as f:
                torch.save(checkpoint, f)
        except OSError as e:
            raise CheckpointError(f"cannot write checkpoint {path}: {e.strerror or e}") from e
        except RuntimeError as e:  # torch's zip writer reports a failed write this way
            raise CheckpointError(
                f"cannot write checkpoint {path}: the write failed (disk full or file size limit?): {error_line(e)}"
            ) from e
        stale, self._pending_removal = self._pending_removal, []
        for name in stale:
            if name != filename:
                (self.dirname / name).unlink(missing_ok=True)

    @rank_zero_only  # other ranks never write, so never remove
    def remove(self, filename: str) -> None:
        self._pending_removal.append(filename)


def saved_files(dirname: str | Path, pattern: re.Pattern[str]) -> list[tuple[float, Path]]:
    """(priority, path) of the files in ``dirname`` matching ``pattern`` (its ``priority`` group), lowest first."""
    folder = Path(dirname)
    paths = folder.iterdir() if folder.is_dir() else ()
    return sorted((float(m["priority"]), p) for p in paths if (m := pattern.match(p.name)))


def list_checkpoints(dirname: str | Path) -> list[tuple[int, Path]]:
    """Periodic checkpoints in ``dirname`` as (iteration, path), oldest first."""
    return [(int(it), p) for it, p in saved_files(dirname, CHECKPOINT_PATTERN)]


def continue_rotation(checkpointer: Checkpoint, saver: SafeDiskSaver, pattern: re.Pattern[str]) -> None:
    """Make ``checkpointer`` go on replacing the files a resumed run has in ``saver``'s folder; those
    beyond its ``n_saved`` (a smaller ``--keep``) are removed now, as ignite removes one per save."""
    saved = saved_files(saver.dirname, pattern)
    keep = checkpointer.n_saved or len(saved)
    _remove([p for _, p in saved[:-keep]])
    saved = saved[-keep:]
    if saved:
        # the documented format of ignite's Checkpoint.state_dict(), not an attribute reached into
        checkpointer.load_state_dict({"_saved": [(priority, p.name) for priority, p in saved]})


@rank_zero_only
def _remove(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def load_checkpoint(path: str | Path, what: str = "checkpoint") -> dict[str, Any]:
    """A ``.pt``/``.pth`` (``weights_only``) or ``.safetensors`` file on the CPU; else ``CheckpointError``."""
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
    """``"ONNX"`` or ``"TorchScript"`` when ``path`` is a model file ``export`` writes, else None."""
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
    # TorchScript's archives hold its code; torch.save's have none
    return "TorchScript" if any(name.split("/")[1:2] == ["code"] for name in names) else None


def model_state_dict(checkpoint: Mapping[str, Any], path: str | Path) -> dict[str, torch.Tensor]:
    """The weights in a training checkpoint (its ``"model"``), a ``best_model_*`` or an R3Net release file."""
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
    """The newest checkpoint in ``dirname`` that loads, with its content; newer broken ones go to ``report``."""
    for _, path in reversed(list_checkpoints(dirname)):
        try:
            return path, load_checkpoint(path)
        except CheckpointError as e:
            report(f"{e}; passed over")
    return None
