"""The training and validation data of a run, resolved at start-up: the synthetic set generated, every
folder checked (headers read) and each training folder recorded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from ..config import TrainConfig
from ..data.checks import assert_dataset_ok
from ..data.folder import listing_digest
from ..data.registry import resolve_names
from ..data.synthetic import ensure_synthetic
from ..errors import OptionError

SYNTHETIC = "synthetic"


@dataclass(frozen=True)
class TrainingData:
    """What start-up found of ``--data`` and ``--val-data``: the folders (names resolved), each training
    folder's record (``config.data_sets``), what every rank must list alike (``config.listings``)."""

    folders: list[str]
    val_data: str | None
    data_sets: list[dict[str, Any]]
    listings: dict[str, str]
    pairs: int


def resolve_data(config: TrainConfig, world_size: int) -> TrainingData:
    """Resolve and check ``--data`` and ``--val-data``; each of the ``world_size`` ranks must get a full batch."""
    data, val = config.data, config.val_data
    if config.data_root is not None:
        data = resolve_names(data, config.data_root, "--data")
        val = resolve_names([val], config.data_root, "--val-data")[0] if val else None
    folders, val_data, generated = _training_folders(config, data, val)
    # the generated set's small images are resized up to any crop, as the reference DDP script does
    checked = {
        folder: assert_dataset_ok(folder, min_size=None if folder in generated else config.crop, option="--data")
        for folder in folders
    }
    val_pairs = assert_dataset_ok(val_data, option="--val-data") if val_data else None
    data_sets = [describe_data_set(folder, checked[folder]) for folder in folders]
    pairs = sum(d["pairs"] for d in data_sets)
    if -(-pairs // world_size) < config.batch_size:  # each rank's shard must fill one batch
        raise OptionError(
            f"--data {' '.join(folders)} holds {pairs} pairs: too few for --batch-size "
            f"{config.batch_size} on {world_size} process(es)"
        )
    listings = {
        "data": "; ".join(d["listing"] for d in data_sets),
        "val_data": listing_digest(val_data, val_pairs) if val_data else "none",
    }
    return TrainingData(folders, val_data, data_sets, listings, pairs)


def _training_folders(
    config: TrainConfig, data: list[str], val_data: str | None
) -> tuple[list[str], str | None, set[str]]:
    """The ``data`` folders with 'synthetic' generated, the validation folder (by default the synthetic
    set's held-out split) and the generated folders."""
    folders: list[str] = []
    generated = set()
    for entry in data:
        if entry == SYNTHETIC:
            # several launching processes (torchrun) may try to generate the same data at once
            with FileLock(Path(config.output_dir) / ".synthetic.lock"):
                train_dir, val_dir = ensure_synthetic(config.output_dir, seed=config.seed)
            entry, val_data = str(train_dir), val_data or str(val_dir)
            generated.add(entry)
        if entry in folders:
            raise OptionError(f"--data {entry} is given twice: each folder's pairs would be trained on twice as often")
        folders.append(entry)
    return folders, val_data, generated


def describe_data_set(folder: str, pairs: list[tuple[Path, Path]]) -> dict[str, Any]:
    """``{folder, pairs, listing}``: what ``config.json`` records of a training folder, ``listing`` being
    ``listing_digest``'s "6 pairs (sha256 ...)", so that a resume can tell the same pairs from others."""
    return {"folder": folder, "pairs": len(pairs), "listing": listing_digest(folder, pairs)}
