"""Framework overhead: the ignite trainer with every handler versus a bare PyTorch loop.

Both run the same iterations on the same pre-loaded uint8 batches (so data loading does not count),
with the same model (R3Net, resnet18 backbone, same initial weights), the same ``DeviceAugment``,
the same 7 BCE losses, SGD with the reference DDP script's two parameter groups and the poly LR.

* ignite: the Engine ``trainer.create_trainer`` builds for ``trainer.training``, in
  the same order: sampler epoch, poly LR (ignite ``LRScheduler``), loss meter (updated every
  iteration, synced at every log line), unreadable-pair count (synced with it), the log line every
  iteration (``train.log``; its console echo goes to ``os.devnull`` so the terminal's speed does
  not count), TensorBoard (losses, LR, images/s every iteration) and checkpointing at its default
  cadence (every 400 iterations) - the run is shorter than that, so no periodic save happens inside
  the timed window; the final save at ``COMPLETED`` happens after it. Validation and the progress
  bar (off without a terminal) are not attached.
* bare: ``for batch in batches``: set both groups' LR by the poly formula, ``DeviceAugment``,
  forward, losses, ``zero_grad``, ``backward``, ``step``. Nothing else: no meter, no log, no sync,
  i.e. the fastest loop that trains the same way.

The first ``warmup`` iterations of each run are not timed. Runs alternate (bare, ignite, bare,
ignite, ...) and each side keeps its fastest run, which cancels most machine noise.
"""

from __future__ import annotations

import contextlib
import copy
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from ignite.engine import Engine, Events

from ignite_r3net.config import TrainConfig
from ignite_r3net.data.loader import SaliencyTrainSet, collate_train
from ignite_r3net.data.sampler import ResumableDistributedSampler, sample_seed
from ignite_r3net.data.step_stream import StepStream
from ignite_r3net.data.transforms import DeviceAugment
from ignite_r3net.model.r3net import R3Net
from ignite_r3net.training.engine import create_trainer
from ignite_r3net.training.optim import build_optimizer, build_poly_lr
from ignite_r3net.training.start import plan_in_process
from ignite_r3net.training.step import prepare_batch, side_output_losses
from ignite_r3net.training.train_log import TrainLog

__all__ = ["bench_engine", "preload_batches"]


def preload_batches(
    data_dir: str | Path, n_batches: int, batch_size: int, crop: int, rotate: float, seed: int = 0
) -> list[dict[str, Any]]:
    """``n_batches`` collated uint8 batches exactly as the training DataLoader yields them."""
    dataset = SaliencyTrainSet(data_dir, crop=crop, rotate=rotate)
    batches = []
    for b in range(n_batches):
        keys = [
            ((b * batch_size + k) % len(dataset), sample_seed(seed, 0, b * batch_size + k)) for k in range(batch_size)
        ]
        batches.append(collate_train([dataset[key] for key in keys]))
    return batches


def _ignite_run(
    model: torch.nn.Module, batches: list[dict[str, Any]], config: TrainConfig, warmup: int
) -> tuple[float, float]:
    """Seconds for iterations ``warmup+1 .. iters`` of the fully equipped ignite trainer, and the
    seconds of those spent in the training step itself (the rest is the Engine and its handlers)."""
    device = torch.device("cpu")
    optimizer = build_optimizer(model, config)
    lr_scheduler = build_poly_lr(optimizer, config)
    sampler = ResumableDistributedSampler(
        len(batches) * config.batch_size, seed=config.seed, batch_size=config.batch_size
    )
    log = TrainLog(Path(config.output_dir) / "train.log")
    log.open(["configuration: benchmark"], [])
    # exactly the handlers trainer.training attaches per iteration, checkpointing included
    # the batches are made already: the stream hands them out one step (one micro-batch) at a time
    stream = StepStream(batches, sampler, accumulate=1, global_batch=config.batch_size)  # type: ignore[arg-type]
    trainer, *_ = create_trainer(model, optimizer, lr_scheduler, stream, log, plan_in_process(config), device)

    marks: dict[int, float] = {}
    in_step = [0.0]
    step = trainer._process_function  # the Engine calls this attribute once per iteration

    def timed_step(engine: Engine, batch: Any) -> Any:
        start = time.perf_counter()
        try:
            return step(engine, batch)
        finally:
            if engine.state.iteration > warmup:
                in_step[0] += time.perf_counter() - start

    trainer._process_function = timed_step

    @trainer.on(Events.ITERATION_COMPLETED)  # attached last: runs after every other handler
    def stamp(engine: Engine) -> None:
        it = engine.state.iteration
        if it == warmup or it == config.iters:
            marks[it] = time.perf_counter()

    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        trainer.run(stream, max_iters=config.iters, epoch_length=len(stream))
    return marks[config.iters] - marks[warmup], in_step[0]


def _poly_lr(base_lr: float, iteration: int, iters: int, power: float) -> float:
    """The LR the bare loop sets before 1-based ``iteration``, as the reference DDP script does."""
    return base_lr * (1 - (iteration - 1) / iters) ** power


def _bare_run(model: torch.nn.Module, batches: list[dict[str, Any]], config: TrainConfig, warmup: int) -> float:
    """Seconds for iterations ``warmup+1 .. iters`` of a plain PyTorch loop training the same way."""
    device = torch.device("cpu")
    augment = DeviceAugment()
    optimizer = build_optimizer(model, config)
    start = 0.0
    for i in range(1, config.iters + 1):
        batch = batches[(i - 1) % len(batches)]
        optimizer.param_groups[0]["lr"] = _poly_lr(2 * config.lr, i, config.iters, config.lr_power)
        optimizer.param_groups[1]["lr"] = _poly_lr(config.lr, i, config.iters, config.lr_power)
        model.train()
        images, masks = prepare_batch(batch, device, augment)
        losses = side_output_losses(model(images), masks)
        total = losses.sum()
        optimizer.zero_grad(set_to_none=True)
        total.backward()
        optimizer.step()
        if i == warmup:
            start = time.perf_counter()
    return time.perf_counter() - start


def bench_engine(
    data_dir: str | Path,
    iters: int = 40,
    warmup: int = 5,
    repeats: int = 2,
    batch_size: int = 4,
    crop: int = 64,
    backbone: str = "resnet18",
    threads: int = 1,
    seed: int = 0,
) -> dict[str, Any]:
    """Iterations/s of the bare loop and of the ignite trainer (fastest of ``repeats`` alternated runs)."""
    if iters <= warmup:
        raise ValueError(f"iters ({iters}) must exceed warmup ({warmup})")
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        n_batches = min(iters, 8)
        batches = preload_batches(data_dir, n_batches, batch_size, crop, rotate=10.0, seed=seed)
        torch.manual_seed(seed)
        initial = R3Net(backbone=backbone).state_dict()
        times: dict[str, list[float]] = {"bare": [], "ignite": []}
        outside_step: list[float] = []  # per ignite run: seconds in the Engine and handlers
        with tempfile.TemporaryDirectory(prefix="bench_engine_") as tmp:
            for r in range(repeats):
                for name in ("bare", "ignite"):
                    model = R3Net(backbone=backbone)
                    model.load_state_dict(copy.deepcopy(initial))
                    config = TrainConfig(
                        output_dir=str(Path(tmp) / f"{name}{r}"),
                        iters=iters,
                        batch_size=batch_size,
                        crop=crop,
                        backbone=backbone,
                        seed=seed,
                        workers=0,
                    )  # checkpoint_every stays at its default, 400
                    Path(config.output_dir).mkdir(parents=True)
                    if name == "bare":
                        times[name].append(_bare_run(model, batches, config, warmup))
                    else:
                        total, in_step = _ignite_run(model, batches, config, warmup)
                        times[name].append(total)
                        outside_step.append(total - in_step)
    finally:
        torch.set_num_threads(previous)
    timed = iters - warmup
    bare, ign = timed / min(times["bare"]), timed / min(times["ignite"])
    # measured inside the fastest ignite run (the one ``ignite_it_per_s`` reports), so free of the
    # run-to-run noise the ratio carries
    fastest = times["ignite"].index(min(times["ignite"]))
    return {
        "bare_it_per_s": bare,
        "ignite_it_per_s": ign,
        "ratio": ign / bare,
        "framework_ms_per_iter": 1000 * outside_step[fastest] / timed,
        "framework_share": outside_step[fastest] / times["ignite"][fastest],
        "settings": {
            "iters": iters,
            "warmup": warmup,
            "repeats": repeats,
            "batch_size": batch_size,
            "crop": crop,
            "backbone": backbone,
            "threads": threads,
            "checkpoint_every": TrainConfig.checkpoint_every,
            "note": "no periodic checkpoint inside the timed window (run shorter than checkpoint_every)",
        },
    }
