"""One training iteration: batched device augmentation, forward, 7 BCE losses, backward, SGD step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from ignite.engine import Engine
from torch import nn

from ..data.transforms import DeviceAugment
from ..inference import AMP_DTYPES


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
) -> Callable[[Engine, dict[str, Any]], torch.Tensor]:
    """The Engine's process function: the detached losses (total, loss0..loss6) stay on ``device``."""
    amp_dtype = AMP_DTYPES[amp]
    augment = DeviceAugment()

    def train_step(engine: Engine, batch: dict[str, Any]) -> torch.Tensor:
        model.train()
        images, masks = prepare_batch(batch, device, augment, channels_last)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            outputs = model(images)
        losses = side_output_losses(outputs, masks)
        total = losses.sum()
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(total).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            total.backward()
            optimizer.step()
        return torch.cat([total.detach().unsqueeze(0), losses.detach()])

    return train_step
