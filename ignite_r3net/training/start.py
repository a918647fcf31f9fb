"""``train``: resolve the run once in the launching process (``run_plan``), then start the workers,
which save the config once they agree."""

from __future__ import annotations

import os

from ..config import TrainConfig
from ..console import echo, quiet_library_logs
from ..distributed.launch import launch
from ..distributed.process_setup import freeze_long_lived_objects
from ..distributed.ranks import rank_zero_only, refuse_unless_ranks_agree
from ..errors import ending_line
from ..numerics import set_deterministic_environment
from ..options.fields import flag_named, values_by_flag
from .resume import RESUME_FIXED
from .run_plan import RunPlan, planned_run
from .train_log import record_ending

# a rank that syncs its loss meters, or validates, at other iterations than its peers hangs them
COLLECTIVE_SCHEDULE = ("log_every", "checkpoint_every", "val_every")


def train(config: TrainConfig) -> None:
    """Train as ``config`` says on every worker, after ``run_plan.planned_run`` (whose errors this raises).

    Raises:
        WorkerFailed: a rank failed (its traceback in ``OUTPUT_DIR/error-rankN.log``).
        RendezvousFailed: the processes of a multi-node job did not all meet within ``--dist-timeout``.
        RanksDisagree: the ranks were started with different options or software.
        KeyboardInterrupt: Ctrl-C, or ``Terminated`` for SIGTERM, after every rank has stopped.
    """
    with planned_run(config) as plan:
        if plan.complete:
            done = plan.config
            echo(f"run already complete: {done.resume} is at iteration {plan.start} of {done.iters}; nothing to do")
            return
        try:
            launch(train_worker, plan, plan.spec)  # launch() sets ignite's launcher logs from spec.verbose
        except BaseException as e:
            if plan.spec.is_leader():  # the workers are gone: train.log gets the console's last line
                record_ending(plan.config.output_dir, ending_line(e))
            raise


def train_worker(local_rank: int, plan: RunPlan) -> None:
    """What every worker runs: the ranks' agreement, ``config.json`` (rank 0), ``worker.training``."""
    config = plan.config
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


def options_every_rank_shares(config: TrainConfig) -> dict[str, str]:
    """``{"--lr": "0.001", ..., "--data": "12 pairs (sha256 ...)"}``: the recipe ``--resume`` keeps, the
    options that schedule collectives, and the pairs ``--data`` and ``--val-data`` list. Options that
    may differ between nodes are left out (``--workers``, ``--output-dir``, ``--node-rank``, the
    rendezvous and speed options, ``--keep``), and the starting weights: DDP copies rank 0's."""
    listings = {flag_named(TrainConfig, name): listing for name, listing in (config.listings or {}).items()}
    return values_by_flag(config, RESUME_FIXED + COLLECTIVE_SCHEDULE) | listings


@rank_zero_only
def _save_config(config: TrainConfig) -> None:
    config.save(os.path.join(config.output_dir, "config.json"))
