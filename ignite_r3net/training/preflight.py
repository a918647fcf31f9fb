"""Checks that run in the launching process before any worker starts: every error a user can cause
with options, paths or data is reported here as one line, before any work can be lost."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from ..config import TrainConfig
from ..data import DataError, ResumableDistributedSampler, assert_dataset_ok, ensure_synthetic, list_pairs
from ..errors import error_line
from ..launch import LaunchSpec
from ..model import BACKBONES, R3Net, build_backbone
from .checkpoint import (
    TRAINING_STATE_KEYS,
    CheckpointError,
    RunRecipe,
    find_resume_checkpoint,
    list_checkpoints,
    load_checkpoint,
    remove_stale_temporaries,
)


class ConfigError(ValueError):
    """A bad option or path, reported before anything is spawned."""


EPOCH_LENGTH = "iterations per epoch (data, batch size or world size)"
POSITIVE = ("iters", "batch_size", "crop", "checkpoint_every", "keep", "log_every", "nproc", "nnodes")


def check_options(config: TrainConfig) -> None:
    """Option values that are wrong whatever the data."""
    for name in POSITIVE:
        if getattr(config, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(config, name)}")
    if config.batch_size < 2:
        raise ConfigError(
            "--batch-size must be at least 2: the BatchNorm after R3Net's global-pooling "
            "branch needs two images per process"
        )
    if not config.lr > 0:
        raise ConfigError(f"--lr must be positive, got {config.lr}")
    if not config.lr_power > 0:
        raise ConfigError(f"--lr-power must be positive, got {config.lr_power}")
    if not 0 <= config.momentum < 1:
        raise ConfigError(f"--momentum must be in [0, 1), got {config.momentum}")
    if not config.weight_decay >= 0:
        raise ConfigError(f"--weight-decay must not be negative, got {config.weight_decay}")
    if config.dist_timeout < 1:
        raise ConfigError(f"--dist-timeout must be at least 1 second, got {config.dist_timeout}")
    if not 1 <= config.master_port <= 65535:
        raise ConfigError(f"--master-port must be a TCP port (1-65535), got {config.master_port}")
    if config.rotate < 0 or config.rotate > 180:
        raise ConfigError(f"--rotate must be between 0 and 180 degrees, got {config.rotate}")
    if config.workers < 0 or config.val_every < 0:
        raise ConfigError("--workers and --val-every must not be negative")
    if config.backbone not in BACKBONES:
        raise ConfigError(f"--backbone {config.backbone!r} is unknown; choose one of {', '.join(BACKBONES)}")
    if not 0 <= config.node_rank < config.nnodes:
        raise ConfigError(f"--node-rank must be in [0, {config.nnodes - 1}], got {config.node_rank}")
    backend = config.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        gpus = torch.cuda.device_count()
        if gpus == 0:
            raise ConfigError("--backend nccl needs CUDA GPUs, and none is visible; use --backend gloo")
        if config.nproc > gpus:
            raise ConfigError(f"--nproc {config.nproc} is more than the {gpus} GPU(s) visible on this node")
    if config.resume and config.resume != "auto":
        if not Path(config.resume).is_file():
            raise ConfigError(f"--resume file {config.resume} does not exist")


def prepare_output_dir(config: TrainConfig) -> None:
    """Create the output directory, prove it is writable, and estimate that checkpoints fit."""
    out = Path(config.output_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        # a private probe: under torchrun every local process runs this at the same time
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as e:
        raise ConfigError(f"--output-dir {out} is not writable: {e.strerror or e}") from None
    if is_launch_leader(config):
        remove_stale_temporaries(out)


def is_launch_leader(config: TrainConfig) -> bool:
    """The one launching process that writes shared files (config.json, clean-up): node 0's, or
    rank 0's under torchrun."""
    return config.node_rank == 0 and os.environ.get("RANK", "0") == "0"


def check_disk_space(config: TrainConfig, num_parameters: int) -> None:
    """Refuse to start when the checkpoints kept (weights + momentum, fp32) cannot fit."""
    per_checkpoint = num_parameters * 4 * 2 + (1 << 20)
    needed = per_checkpoint * (config.keep + 2)  # kept + best + the one being written
    free = shutil.disk_usage(config.output_dir).free
    if free < needed:
        raise ConfigError(
            f"--output-dir {config.output_dir} has {free / 2**20:.0f} MiB free; "
            f"{config.keep} checkpoints need about {needed / 2**20:.0f} MiB"
        )


def resolve_data(config: TrainConfig) -> tuple[TrainConfig, int]:
    """Replace 'synthetic' by the generated folders and check every data folder's pairs; returns
    the config and the number of training pairs."""
    min_size: int | None = config.crop
    if config.data == "synthetic":
        with _locked(Path(config.output_dir) / ".synthetic.lock"):
            train_dir, val_dir = ensure_synthetic(config.output_dir, seed=config.seed)
        config = dataclasses.replace(config, data=str(train_dir), val_data=config.val_data or str(val_dir))
        min_size = None  # its small images are meant to be resized up to any crop, as the seed does
    for option, folder, smallest in (("--data", config.data, min_size), ("--val-data", config.val_data, None)):
        if folder:
            try:
                assert_dataset_ok(folder, min_size=smallest)
            except DataError as e:
                raise ConfigError(f"{option}: {e}") from None
    pairs = len(list_pairs(config.data))
    world = LaunchSpec.of(config).world_size
    if -(-pairs // world) < config.batch_size:  # each rank's shard must fill one batch
        raise ConfigError(
            f"--data {config.data} holds {pairs} pairs: too few for --batch-size "
            f"{config.batch_size} on {world} process(es)"
        )
    return config, pairs


def check_fresh_output_dir(config: TrainConfig) -> None:
    """A fresh run must not mix its checkpoints (periodic or best) with an earlier run's."""
    if config.resume:
        return
    if list_checkpoints(config.output_dir) or any(Path(config.output_dir).glob("best_model_*.pt")):
        raise ConfigError(
            f"--output-dir {config.output_dir} already holds checkpoints of a run: continue it "
            "with --resume auto, or choose another --output-dir"
        )


def resolve_resume(config: TrainConfig) -> tuple[TrainConfig, dict[str, Any] | None]:
    """Turn ``--resume auto`` into the newest checkpoint that loads (corrupt newer ones are reported
    and skipped) and prove that a named checkpoint loads safely, before any worker starts.

    Returns the config and the checkpoint's content (None for a fresh run)."""
    if not config.resume:
        return config, None
    if config.resume == "auto":
        found = find_resume_checkpoint(config.output_dir, report=_warn)
        if found is None:
            _warn(f"--resume auto: no checkpoint in {config.output_dir}; starting a fresh run")
            return dataclasses.replace(config, resume=None), None
        config, checkpoint = dataclasses.replace(config, resume=str(found[0])), found[1]
    else:
        try:
            checkpoint = load_checkpoint(config.resume)
        except CheckpointError as e:
            raise ConfigError(f"--resume: {e}") from None
        _refuse_newer_checkpoints(config)
    _check_training_state(config, checkpoint)
    return config, checkpoint


def _refuse_newer_checkpoints(config: TrainConfig) -> None:
    """Resuming an older checkpoint into a folder holding newer ones would let the next
    ``--resume auto`` (or the ``--keep`` rotation) pick up files of the abandoned future."""
    resume = Path(config.resume).resolve()
    here = {p.resolve(): it for it, p in list_checkpoints(config.output_dir)}
    if resume not in here:
        return
    newer = sorted(p.name for p, it in here.items() if it > here[resume])
    if newer:
        raise ConfigError(
            f"--resume {config.resume}: --output-dir {config.output_dir} also holds newer "
            f"checkpoints ({', '.join(newer)}) of the run; move them away first, or "
            "resume into another --output-dir"
        )


def _check_training_state(config: TrainConfig, checkpoint: dict[str, Any]) -> None:
    """A resume needs every state the trainer restores, not just weights."""
    needed = TRAINING_STATE_KEYS + (("scaler",) if config.amp == "fp16" else ())
    missing = [k for k in needed if k not in checkpoint]
    if missing:
        hint = (
            " (best_model_* files hold weights only: evaluate them, or resume from a checkpoint_N.pt)"
            if "trainer" in missing
            else ""
        )
        raise ConfigError(
            f"--resume {config.resume} is not a training checkpoint for this run: it lacks {', '.join(missing)}{hint}"
        )


def check_resume_compatible(config: TrainConfig, checkpoint: dict[str, Any], pairs: int) -> None:
    """This run's options continue the checkpoint's run exactly.

    ignite restores the schedule length and epoch length from the checkpoint, and the optimiser
    its hyper-parameters, so changed options would be silently ignored (or, for a finished run
    resumed with more iterations, restart it with the learning rate at zero)."""
    world = LaunchSpec.of(config).world_size
    changed = {
        name: (old, new)
        for name, old, new in RunRecipe.of(config, world, pairs).differences(checkpoint.get("recipe", {}))
    }
    # what ignite itself keeps, so also checked for checkpoints without a recipe
    state = checkpoint["trainer"]
    sampler = ResumableDistributedSampler(pairs, num_replicas=world, batch_size=config.batch_size)
    for name, old, new in (
        ("iters", state.get("max_iters"), config.iters),
        (EPOCH_LENGTH, state.get("epoch_length"), sampler.num_batches),
    ):
        if old is not None and old != new:
            changed.setdefault(name, (old, new))
    if changed:
        listing = "; ".join(f"{_option_name(name)} {new} (checkpoint: {old})" for name, (old, new) in changed.items())
        extend = " The poly schedule ends at --iters: a longer run must start afresh." if "iters" in changed else ""
        raise ConfigError(
            f"--resume {config.resume}: this run differs from the one the checkpoint continues: "
            f"{listing}. An exact resume needs the same recipe: repeat the original options, or "
            f"start a new run in another --output-dir.{extend}"
        )


def _option_name(name: str) -> str:
    if name == "world_size":
        return "world size (--nproc x --nnodes)"
    if name == "pairs":
        return "training pairs in --data"
    return "--" + name.replace("_", "-") if name.isidentifier() else name


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    # several launch processes (torchrun) may try to generate the same data at once
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def count_parameters(backbone: str) -> int:
    """R3Net's parameter count without allocating weights (built on the meta device)."""
    with torch.device("meta"):
        model = R3Net(backbone=backbone)
    return sum(p.numel() for p in model.parameters())


def check_pretrained(config: TrainConfig) -> None:
    """Load ``--pretrained`` once here: a bad file or name is one line, and torchvision's download
    happens once (into its cache) instead of in every worker at the same time."""
    if not config.pretrained:
        return
    try:
        # torchrun starts every local process's preflight at once: one downloads, the others wait
        with _locked(Path(config.output_dir) / ".pretrained.lock"):
            build_backbone(config.backbone, config.pretrained)
    except Exception as e:  # noqa: BLE001 - a file or name the user gave: whatever fails, one line
        reason = error_line(e)
        raise ConfigError(f"--pretrained {config.pretrained}: {reason}") from None


def preflight(config: TrainConfig) -> tuple[TrainConfig, int]:
    """All start-up checks in order; returns the config with data paths resolved and the iteration
    the run starts from (that of the checkpoint it resumes, else 0)."""
    check_options(config)
    out = Path(config.output_dir)
    created = not out.exists()
    try:
        prepare_output_dir(config)
        check_pretrained(config)
        check_disk_space(config, count_parameters(config.backbone))
        check_fresh_output_dir(config)
        config, checkpoint = resolve_resume(config)
        config, pairs = resolve_data(config)
        if checkpoint is None:
            return config, 0
        check_resume_compatible(config, checkpoint, pairs)
        return config, int(checkpoint["trainer"].get("iteration", 0))
    except ConfigError:
        if created:
            _remove_if_unused(out)
        raise


def _remove_if_unused(out: Path) -> None:
    """A run refused at start-up leaves no empty output directory behind."""
    try:
        for lock in (".pretrained.lock", ".synthetic.lock"):
            (out / lock).unlink(missing_ok=True)
        out.rmdir()  # only if empty: e.g. a generated synthetic set stays for the next attempt
    except OSError:
        pass
