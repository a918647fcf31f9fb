"""The maps of a model: run at the input size asked (``inference_shape``) and rounded to the 8-bit maps a saved PNG
would hold, and inference as an ignite Engine, shared by validation and ``evaluate``, so metrics on the fly equal
those on saved maps."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, cast

import ignite.distributed as idist
import torch
import torch.nn.functional as F
from ignite.engine import Engine, Events
from ignite.metrics import Metric
from torch import nn

from ..data.transforms import normalize_image
from ..progress import Progress

# the autocast dtype of each --amp choice (config.AMP_MODES), in training and inference
AMP_DTYPES: dict[str, torch.dtype | None] = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}

# a uint8 image batch (N, 3, h, w) to saliency probabilities (N, 1, h, w): a model or an exported file
SaliencyFunction = Callable[[torch.Tensor], torch.Tensor]


def inference_shape(height: int, width: int, size: int | None = None, max_side: int | None = None) -> tuple[int, int]:
    """The (H, W) the model sees: ``size`` x ``size``, scaled down to ``max_side``, else full resolution."""
    if size is not None:
        return size, size
    longer = max(height, width)
    if max_side is not None and longer > max_side:
        return max(1, round(height * max_side / longer)), max(1, round(width * max_side / longer))
    return height, width


def saliency_at_input_size(
    run: SaliencyFunction, images: torch.Tensor, size: int | None = None, max_side: int | None = None
) -> torch.Tensor:
    """``run`` on the uint8 batch resized to ``inference_shape``, its saliency resized back."""
    height, width = images.shape[-2:]
    shape = inference_shape(height, width, size, max_side)
    if shape == (height, width):
        return run(images)
    resized = F.interpolate(images.float(), size=shape, mode="bilinear", align_corners=False, antialias=True)
    saliency = run(resized.round().clamp(0, 255).to(torch.uint8))
    return F.interpolate(saliency.float(), size=(height, width), mode="bilinear", align_corners=False)


@torch.no_grad()
def predict_maps(
    model: nn.Module, images: torch.Tensor, amp: str = "off", size: int | None = None, max_side: int | None = None
) -> torch.Tensor:
    """Saliency maps (N,H,W) uint8 of a uint8 batch (N,3,H,W) on the model's device, run at ``inference_shape``."""
    model.eval()
    dtype = AMP_DTYPES[amp]

    def run(batch: torch.Tensor) -> torch.Tensor:
        with torch.autocast(batch.device.type, dtype=dtype, enabled=dtype is not None):
            return model(normalize_image(batch))

    return to_8bit_maps(saliency_at_input_size(run, images, size, max_side))


def to_8bit_maps(saliency: torch.Tensor) -> torch.Tensor:
    """Saliency (N,1,H,W) in 0..1 as the 8-bit maps (N,H,W) that are scored and saved: ``round(p * 255)``."""
    return (saliency.float().squeeze(1).clamp(0, 1) * 255).round().to(torch.uint8)


# an evaluator step's output: the 8-bit (H, W) maps and masks of its images
MapsAndMasks = tuple[list[torch.Tensor], list[torch.Tensor]]


def create_evaluator(
    model: nn.Module, device: torch.device, amp: str = "off", size: int | None = None, max_side: int | None = None
) -> Engine:
    """An Engine whose output is ``(maps, gts)``, (H,W) uint8 tensors at each image's size."""

    def eval_step(engine: Engine, batch: dict[str, Any]) -> MapsAndMasks:
        if any(batch.get("problem", ())):  # a pair the loader could not read, left out (validation)
            return [], []
        images = batch["image"].to(device, non_blocking=True)
        maps = predict_maps(model, images, amp, size, max_side)
        gts = batch["mask"].to(device, non_blocking=True).squeeze(1)
        return list(maps), list(gts)

    engine = Engine(eval_step)
    # the launcher reports a failure in one line; ignite's own error log would repeat it at length
    engine.logger.setLevel(logging.CRITICAL)
    return engine


def evaluator_step(engine: Engine) -> tuple[dict[str, Any], MapsAndMasks]:
    """The batch and output of the evaluator's step (ignite annotates ``State.batch``/``output`` as int)."""
    return cast(dict[str, Any], engine.state.batch), cast(MapsAndMasks, engine.state.output)


def attach_scoring(evaluator: Engine, metric: Metric) -> None:
    """Feed every step's ``(maps, gts, names)`` to ``metric``, after the handlers added before (a CRF)."""

    def update(engine: Engine) -> None:
        batch, (maps, gts) = evaluator_step(engine)
        metric.update((maps, gts, list(batch["name"]) if maps else []))

    evaluator.add_event_handler(Events.ITERATION_COMPLETED, update)


def score_shard(evaluator: Engine, loader: Any, metric: Metric, progress: Progress | None = None) -> dict[str, Any]:
    """``metric`` over every rank's images, ``evaluator`` run on this rank's shard (a collective, also when empty)."""
    metric.reset()
    if len(loader.sampler) > 0:
        world = idist.get_world_size()
        counting: AbstractContextManager[Any] = nullcontext()
        if progress is not None:
            count = progress.update
            counting = evaluator.add_event_handler(
                Events.ITERATION_COMPLETED, lambda engine: count(len(engine.state.batch["name"]) * world)
            )
        with counting:  # the handle removes its handler on exit
            evaluator.run(loader)
    return metric.compute()
