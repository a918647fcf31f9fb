"""``training(local_rank, plan)``, what every worker runs under spawn, torchrun or srun (docs/design.md, step 5)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, cast

import ignite.distributed as idist
import torch
from ignite.handlers import Checkpoint
from ignite.utils import manual_seed

from ..checkpoint_io import load_checkpoint, model_state_dict
from ..data.loader import SaliencyEvalSet, TrainData, build_eval_loader, build_train_stream, stop_workers
from ..data.split import held_out_pairs
from ..data.step_stream import StepStream
from ..distributed.process_setup import set_worker_threads
from ..model.backbone_weights import load_backbone_weights
from ..model.key_layouts import load_model_state
from ..model.r3net import R3Net
from ..numerics import configure_training
from .engine import create_trainer
from .optim import build_optimizer, build_poly_lr
from .plan import RunPlan
from .train_log import LOG_NAME, TrainLog, header_lines


def training(local_rank: int, plan: RunPlan) -> None:
    """Train R3Net on this worker (one of ``idist.get_world_size()``) as start-up planned the run."""
    config = plan.options
    device = idist.device()
    configure_training(device, config.deterministic, config.tf32 == "on")
    set_worker_threads(device)
    rank = idist.get_rank()

    torch.manual_seed(config.seed)  # identical initial weights on every rank
    stream = build_train_stream(train_data(plan), plan.layout, rank, pin_memory=device.type == "cuda")
    model = _build_model(plan, device)
    # from here on each rank has its own, reproducible random stream (augmentation does not use
    # it: its draws come from (seed, epoch, position) so that resume is exact)
    manual_seed(config.seed + rank)
    optimizer = build_optimizer(model, config)
    lr_scheduler = build_poly_lr(optimizer, config)
    scaler = torch.amp.GradScaler(device.type) if config.amp == "fp16" else None
    log = TrainLog(Path(config.output_dir) / LOG_NAME)
    val_loader = _build_val_loader(plan) if plan.data.val_data or config.val_split else None
    trainer, to_save = create_trainer(model, optimizer, lr_scheduler, stream, log, plan, device, scaler, val_loader)

    resumed_from = _restore(to_save, plan.resume, stream)
    # every rank must resume from the same iteration (a shared --output-dir on every node)
    starts = torch.as_tensor(idist.all_gather(trainer.state.iteration)).flatten().tolist()  # a list, or a tensor
    if len(set(starts)) > 1:
        raise RuntimeError(
            f"ranks would start from different iterations {starts}: --resume needs "
            "--output-dir on a filesystem shared by all nodes"
        )
    log.open(*header_lines(plan, resumed_from, trainer.state.iteration, device))
    val_set = None if val_loader is None else cast(SaliencyEvalSet, val_loader.dataset)
    if val_set is not None and len(val_set) < val_set.listed:
        source = plan.data.val_data if config.val_split is None else f"--val-split {config.val_split}"
        log.write(
            f"validation: {len(val_set)} of the {val_set.listed} pairs of {source} (--val-max "
            f"{config.val_max}), evenly spaced, the same ones at every validation"
        )
    try:
        if resumed_from is None:
            trainer.run(stream, max_iters=config.iters, epoch_length=len(stream))
        else:
            trainer.run(stream)
    finally:
        for loader in [stream.loader] if val_loader is None else [stream.loader, val_loader]:
            stop_workers(loader)


def train_data(plan: RunPlan) -> TrainData:
    """What the training loader reads, and how: the plan's folders, the options' augmentation and loading."""
    same = [f.name for f in dataclasses.fields(TrainData) if f.name != "folders"]
    return TrainData(plan.data.folders, **{name: getattr(plan.options, name) for name in same})


def _build_val_loader(plan: RunPlan) -> Any:
    """The validation pairs: ``--val-data``'s, or those ``--val-split`` holds out of ``--data``."""
    config = plan.options
    pairs = plan.data.val_data if config.val_split is None else held_out_pairs(plan.data.folders, config.val_split)
    assert pairs is not None  # training() builds no validation without --val-data or --val-split
    # persistent: a validation does not fork its workers again, and they are stopped at the end of
    # the run rather than by the garbage collector (see ``stop_workers``)
    return build_eval_loader(
        pairs,
        num_replicas=idist.get_world_size(),
        rank=idist.get_rank(),
        workers=min(config.workers, 2),
        persistent_workers=True,
        max_pairs=config.val_max or None,
        # a damaged validation file is left out and reported, not fatal; read as training reads
        skip_unreadable=True,
        strict=not config.allow_decode_warnings,
    )


def _build_model(plan: RunPlan, device: torch.device) -> torch.nn.Module:
    """R3Net with the starting weights start-up checked (a resumed run's come from its checkpoint)."""
    config, weights = plan.options, plan.weights
    model = R3Net(config.backbone, config.head_width)
    if not plan.resume and weights:
        if config.init_from:
            load_model_state(model, model_state_dict(load_checkpoint(weights["file"]), config.init_from))
        else:
            load_backbone_weights(model.backbone, weights["file"])
    model = model.to(device)
    if config.channels_last:
        model = model.to(memory_format=torch.channels_last)
    # one process computes on one device: auto_model alone would wrap a lone process on a host with
    # several GPUs in nn.DataParallel (ignite 0.5.5, auto.py), splitting each batch over them
    return idist.auto_model(model, sync_bn=False) if idist.get_world_size() > 1 else model


def _restore(to_load: dict[str, Any], resume: str | None, stream: StepStream) -> Path | None:
    """Load ``--resume``'s checkpoint (resolved and checked at start-up) on the CPU; ``load_state_dict`` moves it
    to the device. On another batch layout the stream continues at the next global batch."""
    if not resume:
        return None
    path = Path(resume)
    checkpoint = load_checkpoint(path)
    # the recipe is only compared (start.planned_run), never loaded; older checkpoints record no position
    skipped = {"recipe"} | ({"sampler"} - checkpoint.keys())
    Checkpoint.load_objects(to_load={k: v for k, v in to_load.items() if k not in skipped}, checkpoint=checkpoint)
    state = to_load["trainer"].state
    if "sampler" not in checkpoint:
        stream.start_at(state.iteration)
    # ignite's epochs are counted with this layout's length; the stream keeps the data's own epochs
    state.epoch_length = len(stream)
    state.epoch = state.iteration // len(stream)
    return path
