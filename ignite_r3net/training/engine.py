"""The training Engine and its handlers (docs/design.md, step 7). Every ``attach_*`` runs on every rank
(handlers with collectives need all ranks); rank 0's own work (files, TensorBoard, the progress bar) is
``rank_zero_only``. ``sync_iterations`` alone decides which iterations make collectives."""

from __future__ import annotations

import logging
import time
from contextlib import suppress
from typing import Any, NamedTuple, cast

import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint, LRScheduler

from ..checkpoint_io import CHECKPOINT_PATTERN, SafeDiskSaver, continue_rotation
from ..config import TrainConfig
from ..data.step_stream import StepStream
from ..distributed.ranks import rank_zero_only
from ..distributed.signals import raise_if_terminated
from ..progress import Clock, Progress, format_duration
from .bad_images import BadImages, attach_bad_images
from .events import log_iterations, sync_iterations
from .meters import LossMeter
from .optim import learning_rates
from .plan import RunPlan
from .resume import RunRecipe
from .step import LOSS_NAMES, create_train_step
from .tracker_loggers import attach_loggers, open_tensorboard
from .train_log import TrainLog
from .validation import attach_validation


class NonFiniteLossError(RuntimeError):
    """A loss went NaN/inf on some rank; raised on every rank at the same iteration."""


class TrainerParts(NamedTuple):
    """The Engine and what a checkpoint holds."""

    trainer: Engine
    to_save: dict[str, Any]


def create_trainer(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    lr_scheduler: LRScheduler,
    stream: StepStream,
    log: TrainLog,
    plan: RunPlan,
    device: torch.device,
    scaler: torch.amp.GradScaler | None = None,
    val_loader: Any = None,
) -> TrainerParts:
    """The training Engine: one optimiser step per iteration (``stream``'s micro-batches), then its handlers."""
    config, layout = plan.options, plan.layout
    # the compiled wrapper trains; the plain module is what checkpoints hold (no _orig_mod prefix)
    trained = cast(torch.nn.Module, torch.compile(model)) if config.compile else model
    no_sync = getattr(model, "no_sync", None)  # DDP's: all-reduce once per step, after the last micro-batch
    step = create_train_step(trained, optimizer, device, config.amp, scaler, config.channels_last, no_sync)
    trainer = Engine(step)
    # the launcher reports a worker's failure in one line; ignite's own error log would repeat it
    trainer.logger.setLevel(logging.CRITICAL)
    meter, clock = LossMeter(device), RunClock(layout.global_batch)
    pairs = stream.sampler.dataset_len
    bad = BadImages(pairs, config.max_bad_images)
    to_save: dict[str, Any] = {
        "trainer": trainer,
        "model": model,
        "optimizer": optimizer,
        "lr_scheduler": lr_scheduler,
        "loss_meter": meter,
        "bad_images": bad,
        "sampler": stream,  # the next global position: a resume on another layout continues there
        "recipe": RunRecipe.of(config, layout, pairs, plan.data.data_sets),
    }
    if scaler is not None:
        to_save["scaler"] = scaler

    # the design card: ITERATION_COMPLETED handlers, in this order
    attach_poly_lr(trainer, lr_scheduler)
    attach_loss_meter(trainer, meter, clock, config, layout.per_process)
    attach_train_log(trainer, log, meter, clock, lr_scheduler, config)
    attach_checkpointing(trainer, to_save, config)

    attach_bad_images(trainer, bad, log, sync_iterations(config), config)
    progress = attach_progress_bar(trainer, clock, config)
    tb = open_tensorboard(config.output_dir)
    evaluator = attach_validation(trainer, model, val_loader, config, log, tb, device)
    trackers = attach_loggers(trainer, evaluator, tb, lr_scheduler, plan)
    attach_stop_on_sigterm(trainer)
    attach_close_on_failure(trainer, [progress, log, *(trackers or [])])
    return TrainerParts(trainer, to_save)


class RunClock:
    """The run's one clock, started at the first iteration this process trains (after the first
    validation): images/s between synchronised iterations, the ETA and the progress bar's rate."""

    def __init__(self, images_per_iteration: int) -> None:
        self.images_per_iteration = images_per_iteration
        self.clock: Clock | None = None
        self._lap: tuple[float, int] = (0.0, 0)
        self._speeds: dict[int, float] = {}

    def start(self, engine: Engine) -> Clock:
        if self.clock is None:
            done = engine.state.iteration - 1  # state.iteration already counts the one starting
            self.clock = Clock(done)
            self._lap = (time.perf_counter(), done)
        return self.clock

    def images_per_s(self, iteration: int) -> float:
        """Images/s (all ranks) since the previous synchronised iteration; the same for every caller."""
        if iteration not in self._speeds:
            now, (then, done) = time.perf_counter(), self._lap
            images = (iteration - done) * self.images_per_iteration
            self._speeds = {iteration: images / max(now - then, 1e-9)}
            self._lap = (now, iteration)
        return self._speeds[iteration]

    def eta(self, iteration: int, iters: int) -> float | None:
        """Seconds left to ``iters`` at the rate so far (None before the clock started)."""
        return None if self.clock is None else self.clock.eta(iteration, iters)


def attach_poly_lr(trainer: Engine, scheduler: LRScheduler) -> None:
    """After each iteration, set the next one's poly LR (``optim.build_poly_lr``), so that a checkpoint
    saved after it resumes with the next rate."""
    trainer.add_event_handler(Events.ITERATION_COMPLETED, scheduler)


def attach_loss_meter(trainer: Engine, meter: LossMeter, clock: RunClock, config: TrainConfig, images: int) -> None:
    """Add up the losses on the device (``images``: this rank's in a step); at ``sync_iterations`` average them
    over the ranks into ``state.metrics`` and stop every rank together if any went non-finite."""

    @trainer.on(Events.EPOCH_STARTED)
    def reset_meter(engine: Engine) -> None:
        # a run resumed mid-epoch keeps the sums restored from the checkpoint
        if engine.state.iteration % cast(int, engine.state.epoch_length) == 0:  # set by Engine.run
            meter.reset()

    trainer.add_event_handler(Events.ITERATION_STARTED, clock.start)

    @trainer.on(Events.ITERATION_COMPLETED)
    def update_meter(engine: Engine) -> None:
        meter.update(cast(torch.Tensor, engine.state.output), images, engine.state.iteration)

    @trainer.on(sync_iterations(config))
    def sync_meter(engine: Engine) -> None:
        iteration = engine.state.iteration
        reading = meter.sync(iteration)
        if reading.first_nonfinite_iteration is not None:
            raise NonFiniteLossError(
                f"loss became non-finite at iteration {reading.first_nonfinite_iteration} in "
                f"{', '.join(reading.nonfinite_outputs)}; stopping all ranks (the checkpoints written so far are kept)"
            )
        engine.state.metrics.update(reading.averages, images_per_s=clock.images_per_s(iteration))


def attach_train_log(
    trainer: Engine, log: TrainLog, meter: LossMeter, clock: RunClock, scheduler: LRScheduler, config: TrainConfig
) -> None:
    """One line per ``--log-every`` iterations (``format_log_line``), and close the log at the end."""

    @trainer.on(log_iterations(config))
    def write_log_line(engine: Engine) -> None:
        iteration = engine.state.iteration
        metrics = {**meter.sync(iteration).averages, "images_per_s": clock.images_per_s(iteration)}
        eta = clock.eta(iteration, config.iters) if iteration < config.iters else None
        log.write(format_log_line(iteration, metrics, learning_rates(scheduler, iteration)["weights"], eta))

    trainer.add_event_handler(Events.COMPLETED, lambda _: log.close())


def format_log_line(iteration: int, metrics: dict[str, float], lr: float, eta: float | None = None) -> str:
    """The reference DDP script's log line (iteration, rank-averaged running losses, lr), then images/s
    and ``eta`` (seconds): only these two differ between a resumed run and an uninterrupted one."""
    parts = [f"[iter {iteration}]", f"[total loss {metrics['total']:.5f}]"]
    parts += [f"[{name} {metrics[name]:.5f}]" for name in LOSS_NAMES[1:]]
    parts.append(f"[lr {lr:.13f}]")
    if "images_per_s" in metrics:
        parts.append(f"[images/s {metrics['images_per_s']:.1f}]")
    if eta is not None:
        parts.append(f"[eta {format_duration(eta)}]")
    return ", ".join(parts)


def attach_checkpointing(trainer: Engine, to_save: dict[str, Any], config: TrainConfig) -> None:
    """Periodic and final checkpoints (rank 0 writes), the last ``--keep`` kept, counting older ones."""
    saver = SafeDiskSaver(config.output_dir)
    checkpointer = Checkpoint(
        to_save, saver, n_saved=config.keep, global_step_transform=lambda engine, _: engine.state.iteration
    )
    continue_rotation(checkpointer, saver, CHECKPOINT_PATTERN)
    trainer.add_event_handler(Events.ITERATION_COMPLETED(every=config.checkpoint_every), checkpointer)

    @trainer.on(Events.COMPLETED)
    def save_final(engine: Engine) -> None:
        if engine.state.iteration % config.checkpoint_every != 0:
            checkpointer(engine)


class RunProgress:
    """The bar over ``--iters``, opened at the first iteration trained (not counting the validation)."""

    def __init__(self, config: TrainConfig, clock: RunClock) -> None:
        self.config, self.clock = config, clock
        self.bar: Progress | None = None

    def open(self, engine: Engine) -> None:
        if self.bar is None:
            start, config, per_iteration = engine.state.iteration - 1, self.config, self.clock.images_per_iteration
            self.bar = Progress(
                config.iters, "train", "iteration", start, "image", per_iteration, enabled=config.progress
            )
            self.bar.clock = self.clock.start(engine)

    def update(self, _: Engine) -> None:
        if self.bar is not None:
            self.bar.update()

    def close(self, *_: Any) -> None:
        if self.bar is not None:
            self.bar.close()


@rank_zero_only
def attach_progress_bar(trainer: Engine, clock: RunClock, config: TrainConfig) -> RunProgress:
    """The run's progress on rank 0 (bar, plain lines or nothing: ``progress.Progress``)."""
    progress = RunProgress(config, clock)
    trainer.add_event_handler(Events.ITERATION_STARTED, progress.open)
    trainer.add_event_handler(Events.ITERATION_COMPLETED, progress.update)
    trainer.add_event_handler(Events.COMPLETED, progress.close)
    return progress


def attach_close_on_failure(trainer: Engine, closables: list[Any]) -> None:
    """On a failure, close ``closables`` (None entries skipped) so that the last lines are on disk,
    then re-raise. One handler for them all: ignite stops calling EXCEPTION_RAISED handlers at the
    first that raises, and swallows the exception if none does."""

    def on_exception(engine: Engine, e: BaseException) -> None:
        for closable in (c for c in closables if c is not None):  # not filter(None): a falsy closable still closes
            with suppress(Exception):  # the original failure is the one to report
                closable.close()
        raise e

    trainer.add_event_handler(Events.EXCEPTION_RAISED, on_exception)


def attach_stop_on_sigterm(trainer: Engine) -> None:
    """Stop at the next iteration when SIGTERM's ``Terminated`` was swallowed where it arrived (a
    ``__del__``); else a scheduler's stop would go unheard until its SIGKILL."""
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda _: raise_if_terminated())
