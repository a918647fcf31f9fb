"""``train``: check everything in the launching process, save the config, then start the workers."""

from __future__ import annotations

import os

from ..config import TrainConfig
from ..launch import LaunchSpec, launch
from .preflight import is_launch_leader, preflight
from .trainer import training


def train(config: TrainConfig) -> None:
    """Validate ``config``, resolve its data, write ``config.json`` and train on every worker."""
    config, start = preflight(config)
    if start >= config.iters:
        print(
            f"run already complete: {config.resume} is at iteration {start} of {config.iters}; nothing to do",
            flush=True,
        )
        return
    if is_launch_leader(config):
        config.save(os.path.join(config.output_dir, "config.json"))
    launch(training, config, LaunchSpec.of(config))
