"""Start-up, resolved once in the launching process: ``planned_run`` checks the options, the machine,
the output folder, the resume checkpoint, the starting weights and the data, and yields the frozen
``RunPlan`` that the launch and every worker receive. Every user error is one line here, before any
work can be lost.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..checkpoint_io import list_checkpoints
from ..config import TrainConfig
from ..distributed.process_setup import use_device
from ..distributed.topology import LaunchSpec, started_by_torchrun
from ..errors import OptionError
from ..model.backbones import BACKBONES
from ..model.r3net import num_parameters
from ..numerics import set_deterministic_environment
from ..run_lock import claimed_folder
from .resume import check_resume_compatible, resolve_resume
from .starting_weights import resolve_initial_weights
from .trackers import prepare_trackers
from .train_data import resolve_data


@dataclass(frozen=True)
class RunPlan:
    """The run as start-up resolved it: ``config`` with the device, resume file, starting weights, data
    and trackers' runs filled in; ``spec`` the launch layout; ``start`` the iterations already trained."""

    config: TrainConfig
    spec: LaunchSpec
    start: int

    @property
    def complete(self) -> bool:
        return self.start >= self.config.iters


@contextmanager
def planned_run(config: TrainConfig) -> Iterator[RunPlan]:
    """Check and resolve everything a run needs, holding its output folder (``run_lock``) meanwhile.

    Raises:
        OptionError: a wrong option, folder, ``--resume`` checkpoint or starting weights, a tracker
            that does not answer.
        DataError: a data set with problems (all of them listed, by file).
    """
    config.validate()
    if config.deterministic:  # before any CUDA work here; spawned workers inherit it
        set_deterministic_environment()
    spec = LaunchSpec.of(config)
    check_environment(config, spec)
    device = use_device(spec)  # before anything else asks torch about CUDA: --device cpu hides it
    with claimed_folder(Path(config.output_dir), "--output-dir", spec.is_leader()):
        check_disk_space(config, num_parameters(config.backbone))
        check_fresh_output_dir(config)
        resume_file, checkpoint = resolve_resume(config) or (None, None)
        weights = resolve_initial_weights(config, resumed=resume_file is not None)
        data = resolve_data(config, spec.world_size)
        resolved = dataclasses.replace(
            config,
            device=device,
            resume=resume_file,
            weights=weights,
            data=data.folders,
            val_data=data.val_data,
            data_sets=data.data_sets,
            listings=data.listings,
        )
        start = 0
        if checkpoint is not None:
            check_resume_compatible(resolved, checkpoint, spec.world_size, data.pairs)
            start = int(checkpoint["trainer"].get("iteration", 0))
        # rank 0 logs to the trackers: the job's leading process opens their runs
        if spec.is_leader() and start < config.iters:
            resolved = dataclasses.replace(resolved, tracking=prepare_trackers(resolved))
        yield RunPlan(resolved, spec, start)


def check_environment(config: TrainConfig, spec: LaunchSpec) -> None:
    """Options that depend on this machine or its launcher (the GPUs: ``process_setup.use_device``, next)."""
    check_slurm(spec)
    check_torchrun(config)
    if config.backbone not in BACKBONES:
        raise OptionError(f"--backbone {config.backbone!r} is unknown; choose one of {', '.join(BACKBONES)}")


def check_slurm(spec: LaunchSpec) -> None:
    """Under srun the nodes and ranks come from SLURM; spawning workers needs one task per node."""
    task = spec.slurm
    if task is None:
        return
    if spec.nnodes != 1 or spec.node_rank != 0:
        raise OptionError("--nnodes and --node-rank come from SLURM under srun: leave them out")
    if spec.nproc > 1 and not task.one_task_per_node:
        raise OptionError(
            f"--nproc {spec.nproc} under srun spawns that many workers per task, so it needs one task per node "
            f"(this step has {task.ntasks} tasks on {task.nnodes} node(s)): use srun --ntasks-per-node 1, or "
            "one task per GPU without --nproc"
        )


def check_torchrun(config: TrainConfig) -> None:
    """Under torchrun the ranks meet where torchrun says: another address or port cannot be honoured."""
    env = os.environ
    if not started_by_torchrun():
        return
    for flag, given, variable in (
        ("--master-addr", config.master_addr, "MASTER_ADDR"),
        ("--master-port", config.master_port, "MASTER_PORT"),
    ):
        if given is not None and str(given) != env.get(variable):
            raise OptionError(
                f"{flag} {given}: under torchrun the ranks meet where torchrun says ({variable}="
                f"{env.get(variable)}); leave {flag} out, or give the address to torchrun (--rdzv-endpoint, "
                "--master-addr, --master-port)"
            )


def check_disk_space(config: TrainConfig, num_parameters: int) -> None:
    """Refuse to start when the checkpoints kept (weights + momentum, fp32) cannot fit."""
    per_checkpoint = num_parameters * 4 * 2 + (1 << 20)
    needed = per_checkpoint * (config.keep + 2)  # kept + best + the one being written
    free = shutil.disk_usage(config.output_dir).free
    if free < needed:
        raise OptionError(
            f"--output-dir {config.output_dir} has {free / 2**20:.0f} MiB free; "
            f"{config.keep} checkpoints need about {needed / 2**20:.0f} MiB"
        )


def check_fresh_output_dir(config: TrainConfig) -> None:
    """A fresh run must not mix its checkpoints (periodic or best) with an earlier run's."""
    if config.resume:
        return
    if list_checkpoints(config.output_dir) or any(Path(config.output_dir).glob("best_model_*.pt")):
        raise OptionError(
            f"--output-dir {config.output_dir} already holds checkpoints of a run: continue it "
            "with --resume auto, or choose another --output-dir"
        )
