"""The worker entry ``training(local_rank, config)``: the same function under spawn, torchrun and
multi-node launches. It builds the data flow, the model and optimiser, the Engine and its handlers,
restores a checkpoint when resuming, and runs to ``config.iters``."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NamedTuple, cast

import ignite.distributed as idist
import torch
from ignite.engine import Engine
from ignite.handlers import Checkpoint, LRScheduler
from ignite.utils import manual_seed

from ..checkpoint_io import load_checkpoint, model_state_dict
from ..config import TrainConfig
from ..data import SaliencyEvalSet, build_eval_loader, build_train_loader, stop_workers
from ..distributed.process_setup import set_worker_threads
from ..model.backbone_weights import load_backbone_weights
from ..model.key_layouts import load_model_state
from ..model.r3net import R3Net
from ..numerics import configure_training
from .bad_images import BadImages, attach_bad_images
from .handlers import (
    attach_checkpointing,
    attach_close_on_failure,
    attach_loss_meter,
    attach_poly_lr,
    attach_progress_bar,
    attach_sampler_epoch,
    attach_stop_on_sigterm,
    attach_tensorboard,
    attach_train_log,
)
from .meters import LossMeter
from .optim import build_optimizer, build_poly_lr
from .resume import RunRecipe
from .step import create_train_step
from .tracker_loggers import attach_trackers
from .train_log import LOG_NAME, TrainLog, header_lines
from .validation import attach_validation


class TrainerParts(NamedTuple):
    """What ``create_trainer`` builds: the Engine, what a checkpoint holds, the TensorBoard logger,
    and what a failure closes (add to it what is attached later)."""

    trainer: Engine
    to_save: dict[str, Any]
    tb: Any
    closables: list[Any]


def training(local_rank: int, config: TrainConfig) -> None:
    """Train R3Net on this worker (one of ``idist.get_world_size()``)."""
    device = idist.device()
    configure_training(device, config.deterministic, config.tf32 == "on")
    set_worker_threads(device)
    rank, world_size = idist.get_rank(), idist.get_world_size()

    torch.manual_seed(config.seed)  # identical initial weights on every rank
    loader, sampler = build_train_loader(config, world_size, rank, pin_memory=device.type == "cuda")
    model = _build_model(config, device)
    # from here on each rank has its own, reproducible random stream (augmentation does not use
    # it: its draws come from (seed, epoch, position) so that resume is exact)
    manual_seed(config.seed + rank)
    optimizer = build_optimizer(model, config)
    lr_scheduler = build_poly_lr(optimizer, config)
    scaler = torch.amp.GradScaler(device.type) if config.amp == "fp16" else None
    log = TrainLog(Path(config.output_dir) / LOG_NAME)
    trainer, to_save, tb, closables = create_trainer(
        model, optimizer, lr_scheduler, sampler, log, config, device, scaler
    )

    resumed_from = _restore(to_save, config)
    _check_same_start(trainer.state.iteration)
    log.open(*header_lines(config, world_size, resumed_from, trainer.state.iteration, device))
    attach_checkpointing(trainer, to_save, config)
    loaders, evaluator = [loader], None
    if config.val_data:
        # persistent: a validation does not fork its workers again, and they are stopped below
        # rather than by the garbage collector (see ``stop_workers``)
        val_loader = build_eval_loader(
            config.val_data,
            num_replicas=world_size,
            rank=rank,
            workers=min(config.workers, 2),
            persistent_workers=True,
            max_pairs=config.val_max or None,
            # a damaged validation file is left out and reported, not fatal; read as training reads
            skip_unreadable=True,
            strict=not config.allow_decode_warnings,
        )
        _say_validation_subset(cast(SaliencyEvalSet, val_loader.dataset), config, log)
        evaluator = attach_validation(trainer, model, val_loader, config, log, tb, device)
        loaders.append(val_loader)
    closables += attach_trackers(trainer, evaluator, optimizer, config) or []
    attach_stop_on_sigterm(trainer)

    try:
        if resumed_from is None:
            trainer.run(loader, max_iters=config.iters, epoch_length=len(loader))
        else:
            trainer.run(loader)
    finally:
        for each in loaders:
            stop_workers(each)


def _say_validation_subset(dataset: SaliencyEvalSet, config: TrainConfig, log: TrainLog) -> None:
    """One line when ``--val-max`` scores fewer pairs than the validation folder holds."""
    if len(dataset) < dataset.listed:
        log.write(
            f"validation: {len(dataset)} of the {dataset.listed} pairs of {config.val_data} (--val-max "
            f"{config.val_max}), evenly spaced, the same ones at every validation"
        )


def create_trainer(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    lr_scheduler: LRScheduler,
    sampler: Any,
    log: TrainLog,
    config: TrainConfig,
    device: torch.device,
    scaler: torch.amp.GradScaler | None = None,
) -> TrainerParts:
    """The training Engine with its per-iteration handlers (sampler epoch, poly LR, loss meters,
    log line, TensorBoard), the ``to_save`` dict that checkpoints and resume use, and the
    TensorBoard logger (rank 0; None elsewhere)."""
    trainer = Engine(
        create_train_step(_maybe_compile(model, config), optimizer, device, config.amp, scaler, config.channels_last)
    )
    # the launcher reports a worker's failure in one line; ignite's own error log would repeat it
    trainer.logger.setLevel(logging.CRITICAL)
    meter = LossMeter(device)
    bad = BadImages(sampler.dataset_len, config.max_bad_images)
    to_save: dict[str, Any] = {
        "trainer": trainer,
        "model": model,
        "optimizer": optimizer,
        "lr_scheduler": lr_scheduler,
        "loss_meter": meter,
        "bad_images": bad,
        "recipe": RunRecipe.of(config, idist.get_world_size(), sampler.dataset_len),
    }
    if scaler is not None:
        to_save["scaler"] = scaler
    attach_sampler_epoch(trainer, sampler)
    attach_poly_lr(trainer, lr_scheduler)
    attach_loss_meter(trainer, meter, config.batch_size, config)
    attach_train_log(trainer, log, optimizer, config)
    attach_bad_images(trainer, bad, log, config)
    tb = attach_tensorboard(trainer, optimizer, config)
    progress = attach_progress_bar(trainer, config, config.batch_size * idist.get_world_size())
    closables = [progress, log, tb]
    attach_close_on_failure(trainer, closables)
    return TrainerParts(trainer, to_save, tb, closables)


def _build_model(config: TrainConfig, device: torch.device) -> torch.nn.Module:
    """R3Net with the run's starting weights (preflight fetched and checked them; a resumed run's
    come from its checkpoint instead), wrapped for distribution."""
    model = R3Net(config.backbone)
    if not config.resume and config.weights:
        if config.init_from:
            load_model_state(model, model_state_dict(load_checkpoint(config.weights["file"]), config.init_from))
        else:
            load_backbone_weights(model.backbone, config.weights["file"])
    model = model.to(device)
    if config.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return idist.auto_model(model, sync_bn=False)


def _maybe_compile(model: torch.nn.Module, config: TrainConfig) -> torch.nn.Module:
    # the compiled wrapper trains; the plain module is what checkpoints hold (no _orig_mod prefix)
    return cast(torch.nn.Module, torch.compile(model)) if config.compile else model


def _restore(to_load: dict[str, Any], config: TrainConfig) -> Path | None:
    """Load the checkpoint named by ``--resume`` (preflight already resolved 'auto' to a file that
    loads); every rank reads it on the CPU and ``load_state_dict`` moves it to the device."""
    if not config.resume:
        return None
    path = Path(config.resume)
    checkpoint = load_checkpoint(path)
    # the recipe is only compared (preflight), never loaded; checkpoints older than the list of
    # unreadable pairs start it empty
    skipped = {"recipe"} | ({"bad_images"} - checkpoint.keys())
    to_load = {k: v for k, v in to_load.items() if k not in skipped}
    Checkpoint.load_objects(to_load=to_load, checkpoint=checkpoint)
    return path


def _check_same_start(iteration: int) -> None:
    """Every rank must resume from the same iteration (multi-node resume needs the output
    directory on a filesystem all nodes share)."""
    starts = torch.as_tensor(idist.all_gather(iteration)).flatten().tolist()  # a list, or a tensor
    if len(set(starts)) > 1:
        raise RuntimeError(
            f"ranks would start from different iterations {starts}: --resume needs "
            "--output-dir on a filesystem shared by all nodes"
        )
