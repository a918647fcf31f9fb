"""The training and validation data of a run: the synthetic set generated when asked for, every
folder checked (headers read) and the training set large enough for the batch on every rank."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from filelock import FileLock

from ..config import TrainConfig
from ..data import assert_dataset_ok, ensure_synthetic, list_pairs, listing_digest
from ..distributed.topology import LaunchSpec
from ..errors import DataError, OptionError


def resolve_data(config: TrainConfig) -> tuple[TrainConfig, int]:
    """Replace 'synthetic' by the generated folders, check every data folder's pairs and record
    their listings; returns the config and the number of training pairs."""
    min_size: int | None = config.crop
    if config.data == "synthetic":
        # several launching processes (torchrun) may try to generate the same data at once
        with FileLock(Path(config.output_dir) / ".synthetic.lock"):
            train_dir, val_dir = ensure_synthetic(config.output_dir, seed=config.seed)
        config = dataclasses.replace(config, data=str(train_dir), val_data=config.val_data or str(val_dir))
        # its small images are meant to be resized up to any crop, as the reference DDP script does
        min_size = None
    for option, folder, smallest in (("--data", config.data, min_size), ("--val-data", config.val_data, None)):
        if folder:
            try:
                assert_dataset_ok(folder, min_size=smallest)
            except DataError as e:
                raise DataError(f"{option}: {e}") from None
    listed = list_pairs(config.data)
    pairs = len(listed)
    world = LaunchSpec.of(config).world_size
    if -(-pairs // world) < config.batch_size:  # each rank's shard must fill one batch
        raise OptionError(
            f"--data {config.data} holds {pairs} pairs: too few for --batch-size "
            f"{config.batch_size} on {world} process(es)"
        )
    listings = {
        "data": listing_digest(config.data, listed),
        "val_data": listing_digest(config.val_data) if config.val_data else "none",
    }
    return dataclasses.replace(config, listings=listings), pairs
