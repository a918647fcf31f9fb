"""``predict --cutout`` and ``--threshold``: what a background remover writes.

A cutout is the input image (decoded as the model saw it: RGB, EXIF orientation applied) with the
saliency map as its alpha channel, one RGBA PNG per image. Without ``--threshold`` the alpha is the
8-bit map itself, so the map can be read back from the cutout (``Image.open(p).getchannel("A")``);
with it, the alpha (or the map) is hard: 255 where the saliency is at least the threshold, else 0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from ..atomic_files import atomic_output

__all__ = ["hard_map", "save_cutout"]


def hard_map(saliency: torch.Tensor, threshold: float) -> torch.Tensor:
    """A uint8 ``(H, W)`` map made binary: 255 where ``saliency / 255 >= threshold``, else 0.

    Compared in float64, so a threshold given as ``k / 255`` keeps exactly the values from ``k`` up."""
    return torch.where(saliency.to(torch.float64) / 255.0 >= threshold, 255, 0).to(torch.uint8)


def save_cutout(path: str | Path, image: torch.Tensor, alpha: torch.Tensor) -> None:
    """Write ``image`` (uint8 ``(3, H, W)`` RGB) with ``alpha`` (uint8 ``(H, W)``) as an RGBA PNG,
    atomically."""
    if image.shape[1:] != alpha.shape:
        raise ValueError(f"image {tuple(image.shape)} and map {tuple(alpha.shape)} differ in size")
    rgb = image.detach().to("cpu", torch.uint8).permute(1, 2, 0).numpy()
    rgba = np.dstack([rgb, alpha.detach().to("cpu", torch.uint8).numpy()])
    with atomic_output(path, durable=False) as tmp:  # as save_map: a rerun of predict trusts whole files
        Image.fromarray(rgba, mode="RGBA").save(tmp, format="PNG")
