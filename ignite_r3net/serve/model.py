"""The model ``serve`` answers with: a checkpoint or an exported file, loaded by the code ``predict`` uses, whose
maps are ``predict``'s for the same image and options."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..inference.model import load_model
from ..options.serve import ServeOptions

# a uint8 batch (N, 3, H, W) on the CPU and ``?max_side=`` to the 8-bit maps (N, H, W) on the CPU
BatchMaps = Callable[[torch.Tensor, int | None], torch.Tensor]


@dataclass(frozen=True)
class ServedModel:
    """What answers the requests, and what ``/healthz`` and the start-up line say about it."""

    source: str  # the checkpoint or file as given
    backbone: str | None  # None: an exported file (it holds its backbone)
    device: torch.device
    provider: str  # "torch", or onnxruntime's execution provider
    maps: BatchMaps

    def describe(self) -> str:
        kind = f"R3Net {self.backbone}" if self.backbone else "exported R3Net"
        return f"{self.source} ({kind}, {self.provider} on {self.device})"


def load_served_model(options: ServeOptions, device: torch.device) -> ServedModel:
    """The model of ``options`` on ``device``; one-line ``OptionError``/``CheckpointError`` for a bad file."""
    inference = options.inference
    model = load_model(options.checkpoint, options.model, device, inference.backbone, inference.amp)

    def maps(images: torch.Tensor, max_side: int | None) -> torch.Tensor:
        return model.maps(images.to(device), None, max_side).cpu()

    return ServedModel(options.source, model.backbone, device, model.provider, maps)
