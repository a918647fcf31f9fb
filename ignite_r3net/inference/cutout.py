"""What ``predict`` and ``serve`` make of a model's map: the finished map (``--crf``, ``--threshold``) and the
cutout, the image with the map as its alpha channel."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from .crf import crf_refine


def finished_map(image: torch.Tensor, saliency: torch.Tensor, crf: bool, threshold: float | None) -> torch.Tensor:
    """The map ``predict`` writes for ``image``: ``saliency`` (uint8 ``(H, W)``) refined by the CRF (``crf``), then
    made hard (255 where the saliency is at least ``threshold``, else 0) when a threshold is given."""
    if crf:
        saliency = crf_refine(image, saliency)
    if threshold is not None:  # in float64, a threshold of k / 255 keeps exactly the values from k up
        saliency = torch.where(saliency.to(torch.float64) / 255.0 >= threshold, 255, 0).to(torch.uint8)
    return saliency


def cutout_image(image: torch.Tensor, alpha: torch.Tensor) -> Image.Image:
    """``image`` (uint8 ``(3, H, W)`` RGB) with ``alpha`` (uint8 ``(H, W)``) as its alpha channel: an RGBA image."""
    if image.shape[1:] != alpha.shape:
        raise ValueError(f"image {tuple(image.shape)} and map {tuple(alpha.shape)} differ in size")
    rgb = image.detach().to("cpu", torch.uint8).permute(1, 2, 0).numpy()
    return Image.fromarray(np.dstack([rgb, alpha.detach().to("cpu", torch.uint8).numpy()]), mode="RGBA")
