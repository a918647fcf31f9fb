"""The worker entry ``training(local_rank, config)``: the same function under spawn, torchrun and
multi-node launches. It builds the data flow, the model and optimiser, the Engine and its handlers,
restores a checkpoint when resuming, and runs to ``config.iters``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ignite.distributed as idist
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

from ..config import TrainConfig
from ..data import build_eval_loader, build_train_loader
from ..model import R3Net
from .checkpoint import find_resume_checkpoint, load_checkpoint
from .handlers import (
    TrainLog,
    attach_checkpointing,
    attach_loss_meter,
    attach_poly_lr,
    attach_progress_bar,
    attach_sampler_epoch,
    attach_tensorboard,
    attach_train_log,
)
from .meters import LossMeter
from .optim import build_optimizer, build_poly_lr
from .step import create_train_step
from .validation import attach_validation


def training(local_rank: int, config: TrainConfig) -> None:
    """Train R3Net on this worker (one of ``idist.get_world_size()``)."""
    device = idist.device()
    _configure_backend(device)
    rank, world_size = idist.get_rank(), idist.get_world_size()

    torch.manual_seed(config.seed)  # identical initial weights on every rank
    loader, sampler = build_train_loader(
        config.data, crop=config.crop, rotate=config.rotate, batch_size=config.batch_size,
        num_replicas=world_size, rank=rank, seed=config.seed, workers=config.workers,
        pin_memory=device.type == "cuda", persistent_workers=config.workers > 0,
    )
    model = _build_model(config, device)
    optimizer = build_optimizer(model, config)
    lr_scheduler = build_poly_lr(optimizer, config)
    scaler = torch.amp.GradScaler(device.type) if config.amp == "fp16" else None

    trainer = Engine(create_train_step(_maybe_compile(model, config), optimizer, device, config.amp,
                                       scaler, config.channels_last))
    meter = LossMeter(device)
    to_save: dict[str, Any] = {"trainer": trainer, "model": model, "optimizer": optimizer,
                               "lr_scheduler": lr_scheduler, "loss_meter": meter}
    if scaler is not None:
        to_save["scaler"] = scaler

    resumed_from = _restore(to_save, config)
    log = TrainLog(Path(config.output_dir) / "train.log")
    log.open(_header(config, world_size, resumed_from, trainer.state.iteration))

    attach_sampler_epoch(trainer, sampler)
    attach_poly_lr(trainer, lr_scheduler)
    attach_loss_meter(trainer, meter, config.batch_size, config)
    attach_train_log(trainer, log, optimizer, config)
    tb = attach_tensorboard(trainer, optimizer, config)
    attach_checkpointing(trainer, to_save, config)
    if config.val_data:
        val_loader = build_eval_loader(config.val_data, num_replicas=world_size, rank=rank,
                                       workers=min(config.workers, 2))
        attach_validation(trainer, model, val_loader, config, log, tb, device)
    attach_progress_bar(trainer)

    start = trainer.state.iteration
    if start >= config.iters:
        log.write(f"run already complete at iteration {start}; nothing to do")
        log.close()
        return
    if resumed_from is None:
        trainer.run(loader, max_iters=config.iters, epoch_length=len(loader))
    else:
        trainer.run(loader)


def _configure_backend(device: torch.device) -> None:
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    else:
        # processes on one host share its cores: one pool per process, not one each of full size
        local = max(idist.get_nproc_per_node(), 1)
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))


def _build_model(config: TrainConfig, device: torch.device) -> torch.nn.Module:
    model = R3Net(backbone=config.backbone, pretrained=config.pretrained).to(device)
    if config.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return idist.auto_model(model, sync_bn=False)


def _maybe_compile(model: torch.nn.Module, config: TrainConfig) -> torch.nn.Module:
    # the compiled wrapper trains; the plain module is what checkpoints hold (no _orig_mod prefix)
    return torch.compile(model) if config.compile else model


def _restore(to_load: dict[str, Any], config: TrainConfig) -> Path | None:
    """Load the checkpoint named by ``--resume`` (every rank reads it; CPU first, then moved)."""
    if not config.resume:
        return None
    if config.resume == "auto":
        found = find_resume_checkpoint(config.output_dir)
        if found is None:
            return None
        path, state = found
    else:
        path = Path(config.resume)
        state = load_checkpoint(path)
    Checkpoint.load_objects(to_load=to_load, checkpoint=state)
    return path


def _header(config: TrainConfig, world_size: int, resumed_from: Path | None, iteration: int) -> str:
    lines = [
        f"configuration: {config.to_json()}",
        f"world size {world_size}, {config.batch_size} images per process, "
        f"global batch {config.batch_size * world_size}",
    ]
    if resumed_from is not None:
        lines.append(f"resumed from {resumed_from} at iteration {iteration}")
    return "\n".join(lines) + "\n"
