"""One training iteration (one optimiser step; docs/design.md, step 6)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from ignite.engine import Engine
from torch import nn

from ..data.transforms import DeviceAugment
from ..inference.engine import AMP_DTYPES

LOSS_NAMES = ("total",) + tuple(f"loss{i}" for i in range(7))  # what a step returns, in order


def prepare_batch(
    batch: dict[str, Any], device: torch.device, augment: DeviceAugment, channels_last: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Move a uint8 batch to ``device`` and finish its augmentation there (rotation, normalisation).
    No host sync: the copies are non-blocking (pinned batches) and the angles stay on the CPU."""
    images = batch["image"].to(device, non_blocking=True)
    masks = batch["mask"].to(device, non_blocking=True)
    images, masks = augment(images, masks, batch["angle"])
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    return images, masks


def side_output_losses(outputs: tuple[torch.Tensor, ...], masks: torch.Tensor) -> torch.Tensor:
    """BCE-with-logits of each side output against the mask, as a vector (loss0..loss6)."""
    bce = nn.functional.binary_cross_entropy_with_logits
    return torch.stack([bce(o.float(), masks) for o in outputs])


def create_train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    amp: str = "off",
    scaler: torch.amp.GradScaler | None = None,
    channels_last: bool = False,
    no_sync: Callable[[], AbstractContextManager[Any]] | None = None,
) -> Callable[[Engine, list[dict[str, Any]]], torch.Tensor]:
    """The Engine's process function: one optimiser step over a list of micro-batches (``StepStream``), their
    gradients summed with the loss scaled by 1 / their number, so that the gradient is that of one batch as
    large as them all (BatchNorm aside: its statistics are per micro-batch). ``no_sync`` (DDP's): entered for
    all but the last micro-batch, so that gradients are all-reduced once. Returns the mean detached losses
    (total, loss0..loss6) on ``device``."""
    amp_dtype = AMP_DTYPES[amp]
    augment = DeviceAugment()

    def micro_step(batch: dict[str, Any], scale: float | None) -> torch.Tensor:
        images, masks = prepare_batch(batch, device, augment, channels_last)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            outputs = model(images)
        losses = side_output_losses(outputs, masks)
        total = losses.sum()
        scaled = total if scale is None else total * scale  # None: one micro-batch, bitwise as before
        (scaler.scale(scaled) if scaler is not None else scaled).backward()
        return torch.cat([total.detach().unsqueeze(0), losses.detach()])

    def train_step(engine: Engine, micro_batches: list[dict[str, Any]]) -> torch.Tensor:
        model.train()
        optimizer.zero_grad(set_to_none=True)
        count = len(micro_batches)
        scale = None if count == 1 else 1.0 / count
        outputs = []
        for i, batch in enumerate(micro_batches):
            last = i == count - 1
            with nullcontext() if last or no_sync is None else no_sync():
                outputs.append(micro_step(batch, scale))
        if scaler is not None:  # its inf checks and unscaling see the summed gradients
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        return outputs[0] if count == 1 else torch.stack(outputs).mean(dim=0)

    return train_step
