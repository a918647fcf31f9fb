"""Checks that run in the launching process before any worker starts: every error a user can cause
with options, paths or data is reported here as one line, before any work can be lost.

``check_environment`` needs nothing on disk; ``preflight`` runs the checks that need the claimed
output folder (``output_dir``), the resume checkpoint (``resume``), the starting weights
(``starting_weights``) and the data (``train_data``), in that order.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..checkpoint_io import list_checkpoints
from ..config import TrainConfig
from ..distributed.topology import LaunchSpec
from ..distributed.torchrun import started_by_torchrun
from ..errors import OptionError
from ..model.backbones import BACKBONES
from ..model.r3net import num_parameters
from .resume import check_resume_compatible, resolve_resume
from .starting_weights import resolve_initial_weights
from .train_data import resolve_data


def check_environment(config: TrainConfig) -> None:
    """Options that depend on this machine or its launcher: the backbone name, SLURM, torchrun (the
    device and the GPUs: ``distributed.devices.use_device``, called next)."""
    check_slurm(LaunchSpec.of(config))
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
    """Under torchrun the ranks meet where torchrun says (MASTER_ADDR / MASTER_PORT, its agent's
    store): another address or port given to this program could not be honoured."""
    env = os.environ
    if not started_by_torchrun(env):
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


def preflight(config: TrainConfig) -> tuple[TrainConfig, int]:
    """The start-up checks that need the (claimed) output folder, in order; returns the config with
    data paths and weights resolved and the iteration the run starts from (that of the checkpoint
    it resumes, else 0)."""
    check_disk_space(config, num_parameters(config.backbone))
    check_fresh_output_dir(config)
    config, checkpoint = resolve_resume(config)
    config = resolve_initial_weights(config)
    config, pairs = resolve_data(config)
    if checkpoint is None:
        return config, 0
    check_resume_compatible(config, checkpoint, LaunchSpec.of(config).world_size, pairs)
    return config, int(checkpoint["trainer"].get("iteration", 0))


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
