"""The trainer's event handlers, each attached by one small function (``train.log`` itself is
``train_log.TrainLog``; damaged images are ``bad_images``).

Every ``attach_*`` is called on every rank (collectives inside handlers need all ranks); work that
only rank 0 does (files, TensorBoard, the progress bar) is marked with ``rank_zero_only``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import ignite.distributed as idist
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint, LRScheduler

from ..checkpoint_io import CHECKPOINT_PATTERN, SafeDiskSaver, continue_rotation
from ..config import TrainConfig
from ..distributed.ranks import rank_zero_only
from ..distributed.signals import raise_if_terminated
from ..progress import Clock, Progress, format_duration
from .meters import LOSS_NAMES, LossMeter
from .optim import GROUP_NAMES
from .train_log import TrainLog


class NonFiniteLossError(RuntimeError):
    """A loss went NaN/inf on some rank; raised on every rank at the same iteration."""


def every_or_last(every: int, last: int, *extra_every: int) -> Callable[[Engine, int], bool]:
    """Event filter: iterations divisible by ``every`` (or any of ``extra_every``), and the last one."""
    periods = [p for p in (every, *extra_every) if p > 0]

    def event_filter(_: Engine, iteration: int) -> bool:
        return iteration == last or any(iteration % p == 0 for p in periods)

    return event_filter


def attach_sampler_epoch(trainer: Engine, sampler: Any) -> None:
    """Engine never calls ``set_epoch``; do it so that every epoch has its own order. ignite creates
    the epoch's data iterator after this event, so an epoch resumed half-way skips the batches the
    checkpoint already trained on."""

    @trainer.on(Events.EPOCH_STARTED)
    def set_sampler_epoch(engine: Engine) -> None:
        sampler.set_epoch(engine.state.epoch - 1, skip_batches=_done_in_epoch(engine))


def _done_in_epoch(engine: Engine) -> int:
    """Iterations of the current epoch already trained (non-zero when a resume starts mid-epoch)."""
    return engine.state.iteration % cast(int, engine.state.epoch_length)  # set by Engine.run


def attach_poly_lr(trainer: Engine, scheduler: LRScheduler) -> None:
    """Apply the poly LR before each iteration (ignite's LRScheduler sets, then advances)."""
    trainer.add_event_handler(Events.ITERATION_STARTED, scheduler)


def attach_loss_meter(trainer: Engine, meter: LossMeter, batch_size: int, config: TrainConfig) -> None:
    """Accumulate losses every iteration; at log/checkpoint iterations sync them across ranks into
    ``state.metrics`` and stop every rank together if any loss went non-finite."""

    @trainer.on(Events.EPOCH_STARTED)
    def reset_meter(engine: Engine) -> None:
        # a run resumed mid-epoch keeps the sums restored from the checkpoint
        if _done_in_epoch(engine) == 0:
            meter.reset()

    @trainer.on(Events.ITERATION_COMPLETED)
    def update_meter(engine: Engine) -> None:
        meter.update(cast(torch.Tensor, engine.state.output), batch_size, engine.state.iteration)

    last_sync: dict[str, float] = {}  # time and iteration of the last sync

    @trainer.on(Events.ITERATION_STARTED)
    def start_clock(engine: Engine) -> None:
        # from the first iteration this run trains (a resumed run starts at its checkpoint);
        # state.iteration already counts the iteration that is starting
        if not last_sync:
            last_sync.update(time=time.perf_counter(), iteration=engine.state.iteration - 1)

    @trainer.on(
        Events.ITERATION_COMPLETED(event_filter=every_or_last(config.log_every, config.iters, config.checkpoint_every))
    )
    def sync_meter(engine: Engine) -> None:
        reading = meter.sync()
        if reading.first_nonfinite_iteration is not None:
            raise NonFiniteLossError(
                f"loss became non-finite at iteration {reading.first_nonfinite_iteration} in "
                f"{', '.join(reading.nonfinite_outputs)}; stopping all ranks (the checkpoints written so far are kept)"
            )
        now = time.perf_counter()
        iterations = engine.state.iteration - last_sync["iteration"]
        images = iterations * batch_size * idist.get_world_size()
        engine.state.metrics.update(reading.averages)
        engine.state.metrics["images_per_s"] = images / max(now - last_sync["time"], 1e-9)
        last_sync.update(time=now, iteration=engine.state.iteration)


def format_log_line(iteration: int, metrics: dict[str, float], lr: float, eta: float | None = None) -> str:
    """The reference DDP script's log line: iteration, total and per-output running losses, lr;
    then this run's speed and the time left to ``--iters`` (``eta``, seconds), which differ between
    a resumed run and an uninterrupted one, unlike the rest."""
    parts = [f"[iter {iteration}]", f"[total loss {metrics['total']:.5f}]"]
    parts += [f"[{name} {metrics[name]:.5f}]" for name in LOSS_NAMES[1:]]
    parts.append(f"[lr {lr:.13f}]")
    if "images_per_s" in metrics:
        parts.append(f"[images/s {metrics['images_per_s']:.1f}]")
    if eta is not None:
        parts.append(f"[eta {format_duration(eta)}]")
    return ", ".join(parts)


def attach_train_log(trainer: Engine, log: TrainLog, optimizer: torch.optim.Optimizer, config: TrainConfig) -> None:
    """One line per ``log_every`` iterations: the synced meter values (equal in a resumed and an
    uninterrupted run), then images/s and the ETA to ``--iters``, as the progress bar shows them."""
    clock: list[Clock] = []

    @trainer.on(Events.ITERATION_STARTED)
    def start_clock(engine: Engine) -> None:
        if not clock:  # this process's first iteration: the resumed one, after the first validation
            clock.append(Clock(engine.state.iteration - 1))

    @trainer.on(Events.ITERATION_COMPLETED(event_filter=every_or_last(config.log_every, config.iters)))
    def write_log_line(engine: Engine) -> None:
        iteration = engine.state.iteration
        eta = clock[0].eta(iteration, config.iters) if iteration < config.iters else None
        log.write(format_log_line(iteration, engine.state.metrics, optimizer.param_groups[1]["lr"], eta))

    trainer.add_event_handler(Events.COMPLETED, lambda _: log.close())


def attach_close_on_failure(trainer: Engine, closables: list[Any]) -> None:
    """On a failure, flush and close ``closables`` (the log, TensorBoard, trackers; None entries are
    skipped) so that the last lines before it are on disk, then let the failure go on.

    One handler for all, over a list that may grow after this call: ignite stops calling
    EXCEPTION_RAISED handlers at the first that raises, and swallows the exception if none does."""

    def on_exception(engine: Engine, e: BaseException) -> None:
        for closable in closables:
            if closable is not None:
                try:
                    closable.close()
                except Exception:  # noqa: BLE001 - the original failure is the one to report
                    pass
        raise e

    trainer.add_event_handler(Events.EXCEPTION_RAISED, on_exception)


def attach_stop_on_sigterm(trainer: Engine) -> None:
    """End the run at the next iteration when SIGTERM's ``Terminated`` was swallowed where it arrived
    (a ``__del__``); else a scheduler's stop would go unheard until its SIGKILL."""
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda _: raise_if_terminated())


def attach_checkpointing(trainer: Engine, to_save: dict[str, Any], config: TrainConfig) -> Checkpoint:
    """Periodic and final checkpoints (rank 0 writes; every rank gathers state), the last ``keep`` kept.

    Files already in the output directory from before a resume count towards ``keep``.
    """
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

    return checkpointer


@rank_zero_only
def attach_tensorboard(trainer: Engine, optimizer: torch.optim.Optimizer, config: TrainConfig) -> Any:
    """Losses, LR of each parameter group and images/s to ``OUTPUT_DIR/tb``; returns the logger
    (rank 0; None elsewhere)."""
    from ignite.handlers.tensorboard_logger import OutputHandler, TensorboardLogger

    tb = TensorboardLogger(log_dir=str(Path(config.output_dir) / "tb"))
    when = Events.ITERATION_COMPLETED(event_filter=every_or_last(config.log_every, config.iters))
    tb.attach(trainer, OutputHandler(tag="train", metric_names=list(LOSS_NAMES) + ["images_per_s"]), event_name=when)

    @trainer.on(when)
    def log_learning_rates(engine: Engine) -> None:
        # lr/biases and lr/weights: ignite's OptimizerParamsHandler would number them lr/group_0, lr/group_1
        for name, group in zip(GROUP_NAMES, optimizer.param_groups):
            tb.writer.add_scalar(f"lr/{name}", group["lr"], engine.state.iteration)

    trainer.add_event_handler(Events.COMPLETED, lambda _: tb.close())
    return tb


class RunProgress:
    """The bar over the whole run (``--iters``), from the iteration this process starts at, with
    images/s, elapsed time and ETA; opened at the first iteration, so that the first validation
    is not part of the rate."""

    def __init__(self, config: TrainConfig, images_per_iteration: int) -> None:
        self.config, self.images_per_iteration = config, images_per_iteration
        self.bar: Progress | None = None

    def open(self, engine: Engine) -> None:
        if self.bar is None:
            start, config = engine.state.iteration - 1, self.config
            self.bar = Progress(
                config.iters, "train", "iteration", start, "image", self.images_per_iteration, enabled=config.progress
            )

    def update(self, _: Engine) -> None:
        if self.bar is not None:
            self.bar.update()

    def close(self, *_: Any) -> None:
        if self.bar is not None:
            self.bar.close()


@rank_zero_only
def attach_progress_bar(trainer: Engine, config: TrainConfig, images_per_iteration: int) -> RunProgress:
    """The run's progress on rank 0 (``progress.Progress`` decides: bar, plain lines or nothing);
    returns it, for ``attach_close_on_failure`` (None on other ranks)."""
    progress = RunProgress(config, images_per_iteration)
    trainer.add_event_handler(Events.ITERATION_STARTED, progress.open)
    trainer.add_event_handler(Events.ITERATION_COMPLETED, progress.update)
    trainer.add_event_handler(Events.COMPLETED, progress.close)
    return progress
