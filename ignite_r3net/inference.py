"""Full-resolution inference as an ignite Engine, shared by validation during training, ``evaluate``
and ``predict``. Each step yields 8-bit saliency maps at the input's own size, exactly what a saved
PNG would hold, so metrics on the fly equal metrics on saved maps."""

from __future__ import annotations

import logging
from typing import Any, cast

import torch
from ignite.engine import Engine, Events
from ignite.metrics import Metric
from torch import nn

from .data import normalize_image

AMP_DTYPES: dict[str, torch.dtype | None] = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}
"""The autocast dtype of each ``--amp`` choice (``config.AMP_MODES``), in training and inference."""


@torch.no_grad()
def predict_maps(model: nn.Module, images: torch.Tensor, amp: str = "off") -> torch.Tensor:
    """Saliency maps (N,H,W) uint8 for a uint8 batch (N,3,H,W) already on the model's device."""
    model.eval()
    dtype = AMP_DTYPES[amp]
    with torch.autocast(images.device.type, dtype=dtype, enabled=dtype is not None):
        prob = model(normalize_image(images))
    return to_8bit_maps(prob)


def to_8bit_maps(saliency: torch.Tensor) -> torch.Tensor:
    """Saliency probabilities (N,1,H,W) in 0..1 as the 8-bit maps (N,H,W) that are scored and saved:
    ``round(p * 255)``. Also applied to the output of an exported model (``predict --model``)."""
    return (saliency.float().squeeze(1).clamp(0, 1) * 255).round().to(torch.uint8)


MapsAndMasks = tuple[list[torch.Tensor], list[torch.Tensor]]
"""An evaluator step's output: the 8-bit (H, W) maps and masks of its images."""


def create_evaluator(model: nn.Module, device: torch.device, amp: str = "off") -> Engine:
    """An Engine whose output is ``(maps, gts)``: lists of (H,W) uint8 tensors, one per image (the
    batch, with the images' ``name``, stays in ``engine.state.batch`` for whoever saves the maps)."""

    def eval_step(engine: Engine, batch: dict[str, Any]) -> MapsAndMasks:
        images = batch["image"].to(device, non_blocking=True)
        maps = predict_maps(model, images, amp)
        gts = batch["mask"].to(device, non_blocking=True).squeeze(1)
        return list(maps), list(gts)

    engine = Engine(eval_step)
    # the launcher reports a failure in one line; ignite's own error log would repeat it at length
    engine.logger.setLevel(logging.CRITICAL)
    return engine


def evaluator_step(engine: Engine) -> tuple[dict[str, Any], MapsAndMasks]:
    """The batch and the output of the evaluator's current step (ignite annotates ``State.batch``
    and ``State.output`` as ``int``)."""
    return cast(dict[str, Any], engine.state.batch), cast(MapsAndMasks, engine.state.output)


def attach_scoring(evaluator: Engine, metric: Metric) -> None:
    """Feed every step's ``(maps, gts)`` to ``metric`` (after the handlers added before this one,
    e.g. a CRF refinement)."""
    evaluator.add_event_handler(Events.ITERATION_COMPLETED, lambda engine: metric.update(engine.state.output))


def score_shard(evaluator: Engine, loader: Any, metric: Metric) -> dict[str, Any]:
    """Run ``evaluator`` over this rank's shard of ``loader`` and return ``metric`` over the images
    of every rank (a collective: call it on all ranks).

    A rank whose shard is empty (fewer images than ranks) skips the run but still joins the
    all-reduce inside ``compute()``; per-image sums are exact, so N processes equal one."""
    metric.reset()
    if len(loader.sampler) > 0:
        evaluator.run(loader)
    return metric.compute()
