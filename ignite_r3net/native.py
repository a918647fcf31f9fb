"""The optional C kernels (``ignite_r3net/_native.c``) behind a small, typed interface.

setup.py builds them when a C compiler is present; without one the install still succeeds and
every caller takes its torch / numpy path, which computes the same values. Set
``IGNITE_R3NET_NATIVE=0`` to force those paths (for comparisons and debugging).

All of them run on the CPU only: on a GPU the torch paths are used.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

try:
    from . import _native
except ImportError:  # built without a compiler: the pure paths serve
    _native = None

__all__ = ["available", "disabled", "crop_planar", "decay_sum", "edt_sq", "rotate_normalize"]


class _ArrayPool:
    """float32 arrays handed out again once nothing but the pool refers to them.

    A tensor made by ``torch.from_numpy`` keeps its array alive for as long as any view of it, or
    autograd's saved copy of the input, holds its storage; so an array whose only reference is the
    pool is free. Reusing it spares the page faults of a fresh multi-megabyte buffer every batch.
    At most ``keep`` arrays per shape are kept; beyond that they are plain allocations.
    """

    def __init__(self, keep: int = 3) -> None:
        self.keep = keep
        self._arrays: dict[tuple[int, ...], list[np.ndarray]] = {}
        self._lock = threading.Lock()
        # Reference counts as seen from Python are an implementation detail (interpreters that
        # borrow references report fewer); pool only where an unshared array reads as the list's
        # reference plus getrefcount's argument, else a buffer in use could be handed out again.
        self.enabled = _unshared_refcount() == 2

    def get(self, shape: tuple[int, ...]) -> np.ndarray:
        if not self.enabled:
            return np.empty(shape, dtype=np.float32)
        with self._lock:
            arrays = self._arrays.setdefault(tuple(shape), [])
            for i in range(len(arrays)):
                if sys.getrefcount(arrays[i]) == 2:  # the list and getrefcount's argument
                    return arrays[i]
            array = np.empty(shape, dtype=np.float32)
            if len(arrays) < self.keep:
                arrays.append(array)
            return array


def _unshared_refcount() -> int:
    """What ``_ArrayPool.get`` reads for an array referred to by its list only."""
    if sys.implementation.name != "cpython":
        return -1
    arrays = [np.empty(1, dtype=np.float32)]
    return sys.getrefcount(arrays[0])


_OUTPUTS = _ArrayPool()


def available() -> bool:
    """True when the C kernels were built and ``IGNITE_R3NET_NATIVE`` is not ``0``."""
    return _native is not None and os.environ.get("IGNITE_R3NET_NATIVE", "1") != "0"


def _kernels() -> Any:
    """The built extension module (callers check :func:`available` first)."""
    if _native is None:
        raise RuntimeError("ignite_r3net._native is not built")
    return _native


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Within this block every caller takes its torch / numpy path (sets ``IGNITE_R3NET_NATIVE=0``),
    e.g. to measure what an install without a C compiler gets."""
    old = os.environ.get("IGNITE_R3NET_NATIVE")
    os.environ["IGNITE_R3NET_NATIVE"] = "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ["IGNITE_R3NET_NATIVE"]
        else:
            os.environ["IGNITE_R3NET_NATIVE"] = old


def edt_sq(fg: np.ndarray) -> np.ndarray:
    """Exact squared Euclidean distance of every pixel of a 2-D map to its nearest nonzero pixel,
    int32 (``2**31 - 1`` everywhere when the map has none)."""
    fg = np.ascontiguousarray(fg, dtype=np.uint8)
    h, w = fg.shape
    check_int32_distances(h, w)
    out = np.empty((h, w), dtype=np.int32)
    _kernels().edt_sq(fg, out, h, w)
    return out


def check_int32_distances(h: int, w: int) -> None:
    """Squared distances of an ``h`` x ``w`` map fit int32 (any map up to 32768 x 32768 does)."""
    if (h - 1) ** 2 + (w - 1) ** 2 >= 2**31 - 1:
        raise ValueError(f"a {h} x {w} map is too large for the weighted F-measure's int32 squared "
                         "distances (at most 32768 x 32768)")


def decay_sum(pred_u8: np.ndarray, d2: np.ndarray, lut: np.ndarray, table: np.ndarray) -> float:
    """``sum(lut[pred_u8] * table[d2])`` over all pixels, float64: uint8 ``pred_u8`` and int32
    ``d2`` of one shape, ``lut`` 256 and ``table`` any number of float64 values."""
    return _kernels().decay_sum(
        np.ascontiguousarray(pred_u8, dtype=np.uint8),
        np.ascontiguousarray(d2, dtype=np.int32),
        np.ascontiguousarray(lut, dtype=np.float64),
        np.ascontiguousarray(table, dtype=np.float64),
    )


def crop_planar(image: torch.Tensor, y: int, x: int, height: int, width: int, flip: bool) -> torch.Tensor:
    """``image[:, y:y+height, x:x+width]`` (columns mirrored when ``flip``) as a contiguous
    ``(C, height, width)`` uint8 tensor, from an image stored channels last (``image.permute(1, 2, 0)``
    contiguous, as torchvision's decoders return it): crop, flip and layout change in one pass."""
    c, h, w = image.shape
    out = torch.empty((c, height, width), dtype=torch.uint8)
    _kernels().crop_planar(image.permute(1, 2, 0).numpy(), out.numpy(), h, w, c, y, x, height, width, flip)
    return out


def rotate_normalize(
    images: torch.Tensor, masks: torch.Tensor, angles: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate uint8 CPU images ``(N, C, H, W)`` (bilinear) and masks ``(N, Cm, H, W)`` (nearest)
    counter-clockwise by ``angles`` degrees, zeros outside; return float32 ``image * scale + shift``
    (per channel, on the 0..255 scale) and ``mask / 255``, both contiguous NCHW.

    The same sampling as ``grid_sample(align_corners=False)`` on the rotation grid of
    :mod:`ignite_r3net.data.transforms`, in one pass that reads uint8 and writes float once.
    Images in another memory layout are made contiguous NCHW first.
    """
    n, c, h, w = images.shape
    cm = masks.shape[1]
    out_images = torch.from_numpy(_OUTPUTS.get((n, c, h, w)))
    out_masks = torch.from_numpy(_OUTPUTS.get((n, cm, h, w)))
    _kernels().rotate_normalize(
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
