"""The optional C kernels (``ignite_r3net/_native.c``) behind a small, typed interface.

setup.py builds them when a C compiler is present; without one the install still succeeds and
every caller takes its torch / numpy path, which computes the same values. Set
``IGNITE_R3NET_NATIVE=0`` to force those paths (for comparisons and debugging).

Both kernels run on the CPU only: on a GPU the torch paths are used.
"""

from __future__ import annotations

import os

import numpy as np
import torch

try:
    from . import _native
except ImportError:  # built without a compiler: the pure paths serve
    _native = None

__all__ = ["available", "edt_sq", "rotate_normalize"]


def available() -> bool:
    """True when the C kernels were built and ``IGNITE_R3NET_NATIVE`` is not ``0``."""
    return _native is not None and os.environ.get("IGNITE_R3NET_NATIVE", "1") != "0"


def edt_sq(fg: np.ndarray) -> np.ndarray:
    """Exact squared Euclidean distance of every pixel of a 2-D map to its nearest nonzero pixel,
    int32 (``2**31 - 1`` everywhere when the map has none)."""
    if _native is None:
        raise RuntimeError("ignite_r3net._native is not built")
    fg = np.ascontiguousarray(fg, dtype=np.uint8)
    h, w = fg.shape
    out = np.empty((h, w), dtype=np.int32)
    _native.edt_sq(fg, out, h, w)
    return out


def rotate_normalize(
    images: torch.Tensor, masks: torch.Tensor, angles: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate uint8 CPU images ``(N, C, H, W)`` (bilinear) and masks ``(N, Cm, H, W)`` (nearest)
    counter-clockwise by ``angles`` degrees, zeros outside; return float32 ``image * scale + shift``
    (per channel, on the 0..255 scale) and ``mask / 255``.

    The same sampling as ``grid_sample(align_corners=False)`` on the rotation grid of
    :mod:`ignite_r3net.data.transforms`, in one pass that reads uint8 and writes float once.
    """
    if _native is None:
        raise RuntimeError("ignite_r3net._native is not built")
    n, c, h, w = images.shape
    cm = masks.shape[1]
    out_images = torch.empty((n, c, h, w), dtype=torch.float32)
    out_masks = torch.empty((n, cm, h, w), dtype=torch.float32)
    _native.rotate_normalize(
        images.contiguous().numpy(),
        masks.contiguous().numpy(),
        angles.detach().to("cpu", torch.float64).contiguous().reshape(n).numpy(),
        scale.detach().to("cpu", torch.float32).contiguous().reshape(c).numpy(),
        shift.detach().to("cpu", torch.float32).contiguous().reshape(c).numpy(),
        out_images.numpy(),
        out_masks.numpy(),
        n, c, cm, h, w,
    )
    return out_images, out_masks
