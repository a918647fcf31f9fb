"""``train``: check everything in the launching process, then start the workers, which save the
config once they agree."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from ..config import TrainConfig
from ..console import echo, quiet_library_logs
from ..distributed.agreement import refuse_unless_ranks_agree
from ..distributed.devices import use_device
from ..distributed.launch import launch
from ..distributed.process_setup import freeze_long_lived_objects
from ..distributed.ranks import rank_zero_only
from ..distributed.topology import LaunchSpec
from ..errors import ending_line
from ..numerics import set_deterministic_environment
from ..run_lock import claimed_folder
from .preflight import check_environment, preflight
from .shared_options import options_every_rank_shares
from .trackers import prepare_trackers
from .train_log import record_ending


def train(config: TrainConfig) -> None:
    """Validate ``config``, claim its output folder, resolve its data and weights, and train on
    every worker; everything a user can get wrong is checked first, in the launching process.

    Args:
        config: the recipe and the run's options (``--data``, ``--output-dir``, ``--resume``, the
            distribution options, ...), as the command line or a saved ``config.json`` gives them.

    Raises:
        OptionError: a wrong option, a folder another run holds or an earlier run's folder without
            ``--resume``, a ``--resume`` checkpoint that does not continue this recipe, weights that
            cannot be fetched or do not fit ``--backbone``.
        DataError: a data set with problems (all of them listed, by file).
        WorkerFailed: a rank failed during training (one line naming it; its traceback in
            ``OUTPUT_DIR/error-rankN.log``).
        RendezvousFailed: the processes of a multi-node job did not all meet within ``--dist-timeout``.
        RanksDisagree: the ranks were started with different options or software.
        KeyboardInterrupt: Ctrl-C, or ``Terminated`` for SIGTERM, after every rank has stopped.
    """
    config.validate()
    if config.deterministic:  # before any CUDA work here; spawned workers inherit it
        set_deterministic_environment()
    check_environment(config)
    # before anything else asks torch about CUDA: --device cpu hides it
    config = dataclasses.replace(config, device=use_device(LaunchSpec.of(config)))
    with claimed_folder(Path(config.output_dir), "--output-dir", LaunchSpec.of(config).is_leader()):
        config, start = preflight(config)
        if start >= config.iters:
            echo(f"run already complete: {config.resume} is at iteration {start} of {config.iters}; nothing to do")
            return
        spec = LaunchSpec.of(config)  # launch() sets ignite's launcher logs from spec.verbose
        if spec.is_leader():  # rank 0 logs to the trackers: the job's leading process opens their runs
            config = prepare_trackers(config)
        try:
            launch(train_worker, config, spec)
        except BaseException as e:
            if spec.is_leader():  # the workers are gone: train.log gets the console's last line
                record_ending(config.output_dir, ending_line(e))
            raise


def train_worker(local_rank: int, config: TrainConfig) -> None:
    """What every worker runs: refuse ranks started differently, save ``config.json`` (rank 0),
    then ``worker.training``."""
    if config.deterministic:  # a worker torchrun or srun started: before its first CUDA work
        set_deterministic_environment()
    refuse_unless_ranks_agree(options_every_rank_shares(config))  # before anything is built or written
    _save_config(config)
    # imported in the workers only: the launching process checks and spawns, and the Engine's
    # imports (torchvision, TensorBoard, scipy) would cost it seconds before any worker starts
    from .worker import training

    freeze_long_lived_objects()
    quiet_library_logs(config.verbose)
    training(local_rank, config)


@rank_zero_only
def _save_config(config: TrainConfig) -> None:
    config.save(os.path.join(config.output_dir, "config.json"))
