"""Validation during training, with a best checkpoint kept by max F-measure beside the periodic ones."""

from __future__ import annotations

from typing import Any, cast

import ignite.distributed as idist
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint
from torch import nn
from torchvision.utils import make_grid

from ..checkpoint_io import BEST_PATTERN, SafeDiskSaver, continue_rotation
from ..config import TrainConfig
from ..data.transforms import normalize_image
from ..distributed.ranks import all_gather_items, broadcast_tensor, is_rank_zero
from ..inference.engine import attach_scoring, create_evaluator, score_shard
from ..metrics.keys import METRIC_KEYS
from ..metrics.saliency import SaliencyMetrics
from ..model.r3net import R3Net
from ..numerics import no_autotuning
from ..progress import Progress
from .events import ValidationEvents, every_or_last
from .train_log import TrainLog

GRID_IMAGES, GRID_TILE = 4, 96


def attach_validation(
    trainer: Engine,
    model: nn.Module,
    val_loader: Any,
    config: TrainConfig,
    log: TrainLog,
    tb: Any,
    device: torch.device,
) -> Engine | None:
    """Validate before training (unless ``--no-val-at-start``), every ``--val-every`` (default: at the
    checkpoints) and at the end: every rank scores its shard, rank 0 logs. The evaluator, or None
    without ``val_loader`` (``--val-data``)."""
    if val_loader is None:  # not falsy: a rank's shard of a small set may hold no image
        return None
    # the plain module: DDP's forward would add collectives, and shards may differ in length
    plain = cast(R3Net, getattr(model, "module", model))
    evaluator = create_evaluator(plain, device, config.amp)
    # with a state attribute: ignite's loggers attach only to events that have one
    evaluator.register_events(*ValidationEvents, event_to_attr={ValidationEvents.SCORED: "validations"})
    metric = SaliencyMetrics(device=device)
    attach_scoring(evaluator, metric)
    left_out = _LeftOut(evaluator, log)
    best = _best_checkpointer(plain, trainer, config)
    period = config.val_every or config.checkpoint_every
    untrained: dict[str, float] = {}

    @no_autotuning()  # validation images keep their own sizes: autotuning would tune again for each
    def validate(engine: Engine) -> None:
        use_rank0_buffers(plain)
        iteration = engine.state.iteration
        shown = config.progress and is_rank_zero()
        with Progress(len(val_loader.dataset), f"validate {iteration}", "image", enabled=shown, transient=True) as bar:
            values = score_shard(evaluator, val_loader, metric, bar)
        left_out.report()  # a collective: every rank
        evaluator.state.metrics.update(values)  # what the best-model checkpointer and the trackers read
        evaluator.fire_event(ValidationEvents.SCORED)
        precision, recall = metric.pr_curve()  # a collective: every rank
        log.write(f"[val iter {iteration}] " + " ".join(f"{k} {values[k]:.4f}" for k in METRIC_KEYS if k in values))
        if tb is not None:  # the scalars go through tracker_loggers, as for every tracker
            write_pr_curve(tb, precision, recall, iteration)
            tb.writer.add_image("val/side_outputs", side_output_grid(plain, val_loader.dataset), iteration)
        if iteration == 0:
            untrained.update(values)
            return
        best(evaluator)
        if iteration == config.iters:
            reference = (
                f" (before training: MAE {untrained['mae']:.4f}, max F {untrained['maxF']:.4f})" if untrained else ""
            )
            log.write(f"final validation: MAE {values['mae']:.4f}, max F {values['maxF']:.4f}{reference}")

    if trainer.state.iteration == 0 and config.val_at_start:
        trainer.add_event_handler(Events.STARTED, validate)
    trainer.add_event_handler(Events.ITERATION_COMPLETED(event_filter=every_or_last(period, config.iters)), validate)
    return evaluator


class _LeftOut:
    """The validation pairs that could not be read (``SaliencyEvalSet``'s ``skip_unreadable``):
    noted on the rank that met them, reported once each by rank 0 after a validation."""

    def __init__(self, evaluator: Engine, log: TrainLog) -> None:
        self.log = log
        self.mine: list[str] = []
        self.reported: set[str] = set()
        evaluator.add_event_handler(Events.ITERATION_COMPLETED, self.note)

    def note(self, engine: Engine) -> None:
        self.mine += [p for p in cast(dict[str, Any], engine.state.batch).get("problem", ()) if p]

    def report(self) -> None:
        for problem in sorted(set(all_gather_items(self.mine)) - self.reported):
            self.reported.add(problem)
            self.log.write(f"warning: {problem}; left out of the validation scores")
        self.mine = []


def use_rank0_buffers(model: nn.Module) -> None:
    """Give every rank rank 0's BatchNorm statistics, which the checkpoints hold: DDP broadcasts them
    before each training forward, but each rank then updates them with its own batch."""
    if idist.get_world_size() < 2:
        return
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for buffer in model.buffers():
        by_dtype.setdefault(buffer.dtype, []).append(buffer)
    for buffers in by_dtype.values():  # one broadcast per dtype, not one per buffer
        flat = broadcast_tensor(torch.cat([b.reshape(-1) for b in buffers]), src=0)
        for b, part in zip(buffers, flat.split([b.numel() for b in buffers])):
            b.copy_(part.view_as(b))


def write_pr_curve(tb: Any, precision: torch.Tensor, recall: torch.Tensor, iteration: int) -> None:
    """The mean precision-recall curve (ascending thresholds, as TensorBoard expects) as ``val/pr_curve``;
    per-image mean curves have no counts to show."""
    # add_pr_curve_raw hands every tensor to np.stack, which refuses CUDA tensors: all on the CPU
    precision, recall = precision.cpu(), recall.cpu()
    zeros = torch.zeros_like(precision)
    curve = (zeros, zeros, zeros, zeros, precision, recall, iteration)
    tb.writer.add_pr_curve_raw("val/pr_curve", *curve, num_thresholds=precision.numel())


@torch.no_grad()
def side_output_grid(model: R3Net, dataset: Any, count: int = GRID_IMAGES, tile: int = GRID_TILE) -> torch.Tensor:
    """One row per validation image: image, ground truth and the 7 side outputs (sigmoid), ``tile`` square."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    tiles = []
    for i in range(min(count, len(dataset))):
        sample = dataset[i]
        if sample.get("problem"):  # a pair left out of the scores (``skip_unreadable``)
            continue
        image = sample["image"].to(device)
        logits = model.side_outputs(normalize_image(image.unsqueeze(0)))
        row = [image.float() / 255, sample["mask"].to(device).float().expand(3, -1, -1) / 255]
        row += [torch.sigmoid(o[0].float()).expand(3, -1, -1) for o in logits]
        tiles += [
            nn.functional.interpolate(t.unsqueeze(0), size=(tile, tile), mode="bilinear", align_corners=False)[0]
            for t in row
        ]
    model.train(was_training)
    if not tiles:  # the first images could not be read
        return torch.zeros(3, tile, tile)
    return make_grid(torch.stack(tiles).clamp(0, 1).cpu(), nrow=2 + 7, padding=2)


def _best_checkpointer(model: nn.Module, trainer: Engine, config: TrainConfig) -> Checkpoint:
    saver = SafeDiskSaver(config.output_dir)
    best = Checkpoint(
        {"model": model},
        saver,
        filename_prefix="best",
        score_function=lambda e: e.state.metrics["maxF"],
        score_name="maxF",
        n_saved=1,
        global_step_transform=lambda *_: trainer.state.iteration,
    )
    continue_rotation(best, saver, BEST_PATTERN)
    return best
