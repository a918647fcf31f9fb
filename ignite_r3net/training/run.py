"""``train``: check everything in the launching process, save the config, then start the workers."""

from __future__ import annotations

import os

from ..config import TrainConfig
from ..launch import launch
from .preflight import preflight
from .trainer import training


def train(config: TrainConfig) -> None:
    """Validate ``config``, resolve its data, write ``config.json`` and train on every worker."""
    config = preflight(config)
    if os.environ.get("RANK", "0") == "0" and config.node_rank == 0:
        config.save(os.path.join(config.output_dir, "config.json"))
    launch(training, config)
