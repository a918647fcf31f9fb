"""Checks that run in the launching process before any worker starts: every error a user can cause
with options, paths or data is reported here as one line, before any work can be lost."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from filelock import FileLock

from ..checkpoint_io import list_checkpoints, load_checkpoint, model_state_dict, remove_stale_temporaries
from ..config import TrainConfig
from ..data import assert_dataset_ok, ensure_synthetic, list_pairs
from ..distributed import LaunchSpec, default_backend
from ..errors import CheckpointError, DataError, OptionError, UserError, error_line
from ..model.backbones import BACKBONES
from ..model.pretrained import IMAGENET, NONE, Weights, load_backbone_weights, resolve_weights, sha256_of
from ..model.r3net import build_backbone, num_parameters
from ..model.trained import check_fits, find_backbone
from ..run_lock import LOCK_NAME, RunLock
from .resume import check_resume_compatible, resolve_resume


def check_environment(config: TrainConfig) -> None:
    """Options that depend on this machine or its launcher: the backbone name, GPUs for NCCL, SLURM."""
    check_slurm(LaunchSpec.of(config))
    if config.backbone not in BACKBONES:
        raise OptionError(f"--backbone {config.backbone!r} is unknown; choose one of {', '.join(BACKBONES)}")
    if (config.backend or default_backend()) == "nccl":
        gpus = torch.cuda.device_count()
        if gpus == 0:
            raise OptionError("--backend nccl needs CUDA GPUs, and none is visible; use --backend gloo")
        if config.nproc > gpus:
            raise OptionError(f"--nproc {config.nproc} is more than the {gpus} GPU(s) visible on this node")


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


@contextmanager
def claimed_output_dir(config: TrainConfig) -> Iterator[None]:
    """The output folder, created and proven writable, held by this run's job (its leading process
    holds the run lock) while the block runs. A run refused inside the block leaves no empty
    folder behind; another run's lock is one ``OptionError`` naming its holder."""
    out = Path(config.output_dir)
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        # a private probe: under torchrun every local process runs this at the same time
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as e:
        raise OptionError(f"--output-dir {out} is not writable: {e.strerror or e}") from None
    lock = RunLock(out) if LaunchSpec.of(config).is_leader() else None
    try:
        if lock is not None:
            lock.acquire()
            remove_stale_temporaries(out)  # only now: a running job could be writing them
        yield
    except UserError:
        if lock is not None:
            lock.release()
            lock = None
        if created:
            _remove_if_unused(out)
        raise
    finally:
        if lock is not None:
            lock.release()


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


def resolve_data(config: TrainConfig) -> tuple[TrainConfig, int]:
    """Replace 'synthetic' by the generated folders and check every data folder's pairs; returns
    the config and the number of training pairs."""
    min_size: int | None = config.crop
    if config.data == "synthetic":
        # several launching processes (torchrun) may try to generate the same data at once
        with FileLock(Path(config.output_dir) / ".synthetic.lock"):
            train_dir, val_dir = ensure_synthetic(config.output_dir, seed=config.seed)
        config = dataclasses.replace(config, data=str(train_dir), val_data=config.val_data or str(val_dir))
        min_size = None  # its small images are meant to be resized up to any crop, as the seed does
    for option, folder, smallest in (("--data", config.data, min_size), ("--val-data", config.val_data, None)):
        if folder:
            try:
                assert_dataset_ok(folder, min_size=smallest)
            except DataError as e:
                raise DataError(f"{option}: {e}") from None
    pairs = len(list_pairs(config.data))
    world = LaunchSpec.of(config).world_size
    if -(-pairs // world) < config.batch_size:  # each rank's shard must fill one batch
        raise OptionError(
            f"--data {config.data} holds {pairs} pairs: too few for --batch-size "
            f"{config.batch_size} on {world} process(es)"
        )
    return config, pairs


def check_fresh_output_dir(config: TrainConfig) -> None:
    """A fresh run must not mix its checkpoints (periodic or best) with an earlier run's."""
    if config.resume:
        return
    if list_checkpoints(config.output_dir) or any(Path(config.output_dir).glob("best_model_*.pt")):
        raise OptionError(
            f"--output-dir {config.output_dir} already holds checkpoints of a run: continue it "
            "with --resume auto, or choose another --output-dir"
        )


def resolve_initial_weights(config: TrainConfig) -> TrainConfig:
    """Fetch (once per node, before any worker starts) and check the weights a fresh run starts
    from: ``--init-from``'s whole model, else ``--pretrained``'s backbone; record them in
    ``config.weights``. A resumed run keeps the record of its first start (its checkpoint holds
    the weights)."""
    if config.resume:
        return dataclasses.replace(config, weights=_recorded_weights(config.output_dir))
    if config.init_from:
        weights = _init_from_weights(config)
    else:
        weights = resolve_weights(config.pretrained, config.backbone)
        if weights is not None:
            try:  # a file of another architecture is one line listing the keys, before any worker
                load_backbone_weights(build_backbone(config.backbone), weights.file)
            except ValueError as e:
                raise OptionError(f"--pretrained {config.pretrained}: {error_line(e)}") from None
    return dataclasses.replace(config, weights=weights.as_dict() if weights else None)


def _init_from_weights(config: TrainConfig) -> Weights:
    if config.pretrained not in (IMAGENET, NONE):  # the default, or an explicit "no backbone weights"
        raise OptionError("--init-from and --pretrained both give the starting weights: choose one")
    path = Path(config.init_from)
    if not path.is_file():
        raise OptionError(f"--init-from {path}: no such file")
    try:
        state = model_state_dict(load_checkpoint(path), path)
    except CheckpointError as e:
        raise OptionError(f"--init-from: {e}") from None
    found = find_backbone(path, state)
    if found is not None and found != config.backbone:
        raise OptionError(
            f"--init-from {path} holds an R3Net with backbone {found}, not {config.backbone}: add --backbone {found}"
        )
    check_fits(config.backbone, state, path)  # or one line saying why not
    return Weights(source="init-from", file=str(path.resolve()), sha256=sha256_of(path))


def _recorded_weights(output_dir: str) -> dict[str, str] | None:
    """The ``weights`` record of the run's config.json, if it has one."""
    try:
        return TrainConfig.load(Path(output_dir) / "config.json").weights
    except (OSError, ValueError, TypeError):
        return None


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


def _remove_if_unused(out: Path) -> None:
    """A run refused at start-up leaves no empty output directory behind."""
    try:
        for leftover in (".synthetic.lock", LOCK_NAME):
            (out / leftover).unlink(missing_ok=True)
        out.rmdir()  # only if empty: e.g. a generated synthetic set stays for the next attempt
    except OSError:
        pass
