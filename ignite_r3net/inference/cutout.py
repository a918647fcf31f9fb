"""What ``predict`` and ``serve`` make of a model's map: the finished map (``--crf``, ``--threshold``) and the
cutout, the image with the map as its alpha channel, its soft edges in the foreground's own colours
(``--refine-foreground``) or composited over a background of the user's (``--background``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageColor, ImageOps

from ..errors import OptionError, error_line
from ..options.common import COLOUR_EXAMPLES
from .crf import crf_refine
from .foreground import refine_foreground

# a colour (R, G, B), or an image scaled to cover each photo
Background = tuple[int, int, int] | Image.Image


def finished_map(image: torch.Tensor, saliency: torch.Tensor, crf: bool, threshold: float | None) -> torch.Tensor:
    """The map ``predict`` writes for ``image``: ``saliency`` (uint8 ``(H, W)``) refined by the CRF (``crf``), then
    made hard (255 where the saliency is at least ``threshold``, else 0) when a threshold is given."""
    if crf:
        saliency = crf_refine(image, saliency)
    if threshold is not None:  # in float64, a threshold of k / 255 keeps exactly the values from k up
        saliency = torch.where(saliency.to(torch.float64) / 255.0 >= threshold, 255, 0).to(torch.uint8)
    return saliency


def parse_colour(value: str) -> tuple[int, int, int] | None:
    """``value`` as an RGB colour (white, #00ff00, rgb(0, 255, 0), ...), or None when it names none."""
    try:
        red, green, blue = ImageColor.getrgb(value)[:3]
    except ValueError:
        return None
    return red, green, blue


def read_background(value: str, flag: str = "--background") -> Background:
    """``--background``: a colour, else an image file (EXIF orientation applied); ``OptionError`` naming ``flag``."""
    colour = parse_colour(value)
    if colour is not None:
        return colour
    if not Path(value).is_file():
        raise OptionError(f"{flag} {value}: neither a colour ({COLOUR_EXAMPLES}) nor an image file")
    try:
        with Image.open(value) as image:
            return (ImageOps.exif_transpose(image) or image).convert("RGB")
    except Exception as e:  # PIL raises OSError, SyntaxError, ValueError ... for files that are no image
        raise OptionError(f"{flag} {value}: not a readable image: {error_line(e)}") from None


def cutout_image(
    image: torch.Tensor, alpha: torch.Tensor, refine: bool = False, background: Background | None = None
) -> Image.Image:
    """``image`` (uint8 ``(3, H, W)`` RGB) with ``alpha`` (uint8 ``(H, W)``) as its alpha channel: an RGBA image,
    whose soft pixels hold the estimated foreground colours with ``refine`` (computed on the image's device); over
    ``background``, the RGB composite instead."""
    if image.shape[1:] != alpha.shape:
        raise ValueError(f"image {tuple(image.shape)} and map {tuple(alpha.shape)} differ in size")
    alpha = alpha.to(image.device, torch.uint8)
    rgb = refine_foreground(image, alpha) if refine else image.to(torch.uint8)
    if background is None:
        return Image.fromarray(_pixels(torch.cat([rgb, alpha[None]])), mode="RGBA")
    if isinstance(background, tuple):
        backdrop = torch.tensor(background, dtype=torch.uint8, device=rgb.device).view(3, 1, 1)
    else:  # the image scaled to cover the photo: aspect kept, centred, cropped
        fitted = ImageOps.fit(background, (rgb.shape[2], rgb.shape[1]), Image.Resampling.LANCZOS)
        backdrop = torch.from_numpy(np.array(fitted)).permute(2, 0, 1).to(rgb.device)
    return Image.fromarray(_pixels(composite(rgb, alpha, backdrop)), mode="RGB")


def composite(rgb: torch.Tensor, alpha: torch.Tensor, background: torch.Tensor) -> torch.Tensor:
    """``rgb`` over ``background`` (uint8 ``(3, H, W)``, or ``(3, 1, 1)``) by ``alpha`` (uint8 ``(H, W)``), rounded
    to uint8 in integers: ``(alpha rgb + (255 - alpha) background) / 255``."""
    weight = alpha.to(torch.int32)
    mixed = weight * rgb.to(torch.int32) + (255 - weight) * background.to(torch.int32)
    return torch.div(mixed + 127, 255, rounding_mode="floor").to(torch.uint8)


def _pixels(picture: torch.Tensor) -> np.ndarray:
    """A ``(C, H, W)`` uint8 tensor as the ``(H, W, C)`` array PIL takes, on the host."""
    return np.ascontiguousarray(picture.detach().to("cpu", torch.uint8).permute(1, 2, 0).numpy())
