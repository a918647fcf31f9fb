"""Validation during training: metrics on every rank, a log line and TensorBoard scalars on rank 0,
and a best checkpoint kept by max F-measure beside the periodic ones."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint
from torch import nn

from ..config import TrainConfig
from ..evaluation.evaluator import create_evaluator
from ..evaluation.metrics import SaliencyMetrics
from .checkpoint import SafeDiskSaver
from .handlers import TrainLog, every_or_last

BEST_PATTERN = re.compile(r"^best_model_(\d+)_maxF=([0-9.]+)\.pt$")
REPORTED = ("mae", "maxF", "meanF", "adpF", "Sm", "maxE", "meanE", "adpE", "wF")


def format_metrics(values: dict[str, float], keys: tuple[str, ...] = REPORTED) -> str:
    return " ".join(f"{k} {values[k]:.4f}" for k in keys if k in values)


def attach_validation(trainer: Engine, model: nn.Module, val_loader: Any, config: TrainConfig,
                      log: TrainLog, tb: Any, device: torch.device) -> Engine:
    """Validate before training (the untrained reference), every ``val_every`` (default: at the
    checkpoint iterations) and at the end."""
    evaluator = create_evaluator(model, device, config.amp)
    SaliencyMetrics(device=device).attach(evaluator, "saliency")
    best = _best_checkpointer(model, trainer, config)
    period = config.val_every or config.checkpoint_every

    untrained: dict[str, float] = {}

    def validate(engine: Engine) -> None:
        evaluator.run(val_loader)
        values = evaluator.state.metrics["saliency"]
        evaluator.state.metrics.update(values)
        iteration = engine.state.iteration
        log.write(f"[val iter {iteration}] {format_metrics(values)}")
        if tb is not None:
            for key in REPORTED:
                tb.writer.add_scalar(f"val/{key}", values[key], iteration)
        if iteration == 0:
            untrained.update(values)
            return
        best(evaluator)
        if iteration == config.iters:
            reference = f" (before training: MAE {untrained['mae']:.4f}, max F {untrained['maxF']:.4f})" \
                if untrained else ""
            log.write(f"final validation: MAE {values['mae']:.4f}, max F {values['maxF']:.4f}{reference}")

    if trainer.state.iteration == 0:
        trainer.add_event_handler(Events.STARTED, validate)
    trainer.add_event_handler(Events.ITERATION_COMPLETED(event_filter=every_or_last(period, config.iters)),
                              validate)
    return evaluator


def _best_checkpointer(model: nn.Module, trainer: Engine, config: TrainConfig) -> Checkpoint:
    best = Checkpoint(
        {"model": model},
        SafeDiskSaver(config.output_dir),
        filename_prefix="best",
        score_function=lambda e: e.state.metrics["maxF"],
        score_name="maxF",
        n_saved=1,
        global_step_transform=lambda *_: trainer.state.iteration,
    )
    existing = []
    for p in Path(config.output_dir).glob("best_model_*.pt"):
        m = BEST_PATTERN.match(p.name)
        if m:
            existing.append((float(m.group(2)), p.name))
    if existing:
        best.load_state_dict({"_saved": sorted(existing)})
    return best
