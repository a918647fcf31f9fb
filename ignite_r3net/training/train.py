"""``train``: check everything in the launching process, then start the workers, which save the
config once they agree."""

from __future__ import annotations

import os

from ..config import TrainConfig
from ..distributed.agreement import refuse_unless_ranks_agree
from ..distributed.launch import launch
from ..distributed.process_setup import freeze_long_lived_objects
from ..distributed.ranks import rank_zero_only
from ..distributed.topology import LaunchSpec
from .agreement import options_every_rank_shares
from .output_dir import claimed_output_dir
from .preflight import check_environment, preflight


def train(config: TrainConfig) -> None:
    """Validate ``config``, claim its output folder, resolve its data and weights, and train on
    every worker."""
    config.validate()
    check_environment(config)
    with claimed_output_dir(config):
        config, start = preflight(config)
        if start >= config.iters:
            print(
                f"run already complete: {config.resume} is at iteration {start} of {config.iters}; nothing to do",
                flush=True,
            )
            return
        launch(train_worker, config, LaunchSpec.of(config))


def train_worker(local_rank: int, config: TrainConfig) -> None:
    """What every worker runs: refuse ranks started differently, save ``config.json`` (rank 0),
    then ``trainer.training``."""
    refuse_unless_ranks_agree(options_every_rank_shares(config))  # before anything is built or written
    _save_config(config)
    # imported in the workers only: the launching process checks and spawns, and the Engine's
    # imports (torchvision, TensorBoard, scipy) would cost it seconds before any worker starts
    from .trainer import training

    freeze_long_lived_objects()
    training(local_rank, config)


@rank_zero_only
def _save_config(config: TrainConfig) -> None:
    config.save(os.path.join(config.output_dir, "config.json"))
