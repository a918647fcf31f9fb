"""Decoding image and mask files to uint8 tensors: torchvision for the common case, PIL for the rest."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps

from ..errors import DataError

__all__ = ["load_image", "load_mask"]


def _read_bytes(path: Path) -> bytes:
    # Bytes are read in Python so that any file name the OS accepts works.
    try:
        return path.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read image {path}: {exc}") from exc


def _tv_decode(raw: bytes, mode: str) -> torch.Tensor | None:
    """Decode with torchvision (fast, libjpeg-turbo); None when it cannot handle the file."""
    from torchvision.io import ImageReadMode, decode_image

    if not raw:
        return None
    try:
        data = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = decode_image(data, mode=getattr(ImageReadMode, mode), apply_exif_orientation=True)
    except Exception:
        return None
    return out


def _pil_open(path: Path) -> Image.Image:
    img = Image.open(path)
    img.load()
    return ImageOps.exif_transpose(img) or img


def load_image(path: str | Path) -> torch.Tensor:
    """Decode an image to uint8 ``(3, H, W)`` RGB in display (EXIF) orientation, channels-last in
    memory (a crop copies whole rows; the device makes it planar).

    torchvision decodes 8-bit RGB; everything else (CMYK JPEGs, whose inverted ink only PIL
    handles, grayscale, alpha, 16-bit, TIFF, ...) goes to PIL. Raises :class:`DataError` naming
    the file when neither can read it.
    """
    path = Path(path)
    # UNCHANGED rather than RGB: the channel count libjpeg/libpng report is the test that sends
    # CMYK and the other odd files to PIL, at no cost to the common case.
    out = _tv_decode(_read_bytes(path), "UNCHANGED")
    if out is not None and out.dtype == torch.uint8 and out.ndim == 3 and out.shape[0] == 3:
        return out
    try:
        with _pil_open(path) as img:
            arr = np.array(img.convert("RGB"))  # a writable copy
    except Exception as exc:
        raise DataError(f"cannot read image {path}: {exc}") from exc
    return torch.from_numpy(arr).permute(2, 0, 1)


def _mask_to_uint8(arr: np.ndarray) -> np.ndarray:
    """Map any mask bit depth onto 0..255; a 0/1 mask becomes 0/255."""
    arr = np.asarray(arr)
    if arr.dtype == np.bool_:
        return arr.astype(np.uint8) * 255
    peak = int(arr.max()) if arr.size else 0
    if peak <= 1:
        return (arr.astype(np.uint8) * 255).astype(np.uint8)
    if arr.dtype == np.uint8:
        return arr
    if peak <= 255:
        # A 16-bit container holding 8-bit values (common for tools that always write I;16).
        return arr.astype(np.uint8)
    scale = 65535.0 if peak <= 65535 else float(peak)
    return np.clip(np.rint(arr.astype(np.float64) * (255.0 / scale)), 0, 255).astype(np.uint8)


def load_mask(path: str | Path) -> torch.Tensor:
    """Decode a mask to uint8 ``(1, H, W)`` with values 0..255 (soft masks stay soft).

    16-bit masks are rescaled to 8 bits and 0/1 masks are scaled to 0/255. Raises
    :class:`DataError` naming the file when it cannot be read.
    """
    path = Path(path)
    out = _tv_decode(_read_bytes(path), "GRAY")
    if out is not None and out.ndim == 3 and out.shape[0] == 1:
        if out.dtype == torch.uint8:
            arr = out[0].numpy()
        elif out.dtype == torch.uint16:
            arr = out[0].to(torch.int32).numpy()
        else:
            arr = None
        if arr is not None:
            # the decoded tensor is ours alone: no copy needed
            return torch.from_numpy(_mask_to_uint8(arr)).unsqueeze(0)
    try:
        with _pil_open(path) as img:
            if img.mode in ("I", "I;16", "I;16B", "I;16L", "F"):
                arr = np.asarray(img)
            elif img.mode == "1":
                arr = np.asarray(img).astype(np.uint8)
            else:
                arr = np.asarray(img.convert("L"))
    except Exception as exc:
        raise DataError(f"cannot read mask {path}: {exc}") from exc
    if arr.dtype.kind == "f":
        arr = np.clip(arr, 0, None).astype(np.int64)
    return torch.from_numpy(_mask_to_uint8(arr).copy()).unsqueeze(0)
