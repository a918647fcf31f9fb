"""Listing image/mask pairs on disk and decoding them to uint8 tensors.

Two layouts are recognised:

* MSRA10K style: ``name.jpg`` and ``name.png`` side by side in one folder (the ``.png`` is the mask).
* DUTS style: an images folder and a masks folder (``images``/``masks``, ``Imgs``/``GT``,
  ``DUTS-TR-Image``/``DUTS-TR-Mask``, ...) whose files share stems.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps

from ..errors import DataError

__all__ = [
    "IMAGE_EXTS",
    "MASK_EXTS",
    "list_pairs",
    "split_dirs",
    "load_image",
    "load_mask",
]

IMAGE_EXTS: tuple[str, ...] = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")
MASK_EXTS: tuple[str, ...] = (".png", ".bmp", ".tif", ".tiff", ".jpg", ".jpeg")

# In the side-by-side layout a .png is the mask, so images are every other image extension.
_FLAT_MASK_EXTS = (".png",)
_FLAT_IMAGE_EXTS = tuple(e for e in IMAGE_EXTS if e not in _FLAT_MASK_EXTS)

# Folder-name tokens (split on non-alphanumerics, lower case) that mark each side of a DUTS layout.
_IMAGE_DIR_TOKENS = {"image", "images", "img", "imgs", "im", "jpeg", "jpegimages", "rgb", "input", "inputs"}
_MASK_DIR_TOKENS = {
    "mask",
    "masks",
    "gt",
    "gts",
    "groundtruth",
    "label",
    "labels",
    "annotation",
    "annotations",
    "sal",
    "saliency",
    "target",
    "targets",
}


def _tokens(name: str) -> set[str]:
    return {t for t in re.split(r"[^a-z0-9]+", name.lower()) if t}


def _files(folder: Path, exts: tuple[str, ...]) -> list[Path]:
    # Hidden files (.DS_Store, ._name resource forks) are never data.
    return sorted(
        p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in exts
    )


def _find_split_dirs(root: Path) -> tuple[Path, Path] | None:
    """Return (images_dir, masks_dir) when root holds a DUTS-style pair of folders."""
    subdirs = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    image_dirs = [d for d in subdirs if _tokens(d.name) & _IMAGE_DIR_TOKENS and not _tokens(d.name) & _MASK_DIR_TOKENS]
    mask_dirs = [d for d in subdirs if _tokens(d.name) & _MASK_DIR_TOKENS]
    if not image_dirs and not mask_dirs:
        return None
    if len(image_dirs) == 1 and len(mask_dirs) == 1:
        return image_dirs[0], mask_dirs[0]
    if _files(root, IMAGE_EXTS):
        # Loose images beside oddly named folders: treat the root as the side-by-side layout.
        return None
    raise DataError(
        f"cannot tell the images folder from the masks folder in {root}: "
        f"image folders {[d.name for d in image_dirs]}, mask folders {[d.name for d in mask_dirs]}"
    )


def split_dirs(root: str | Path) -> tuple[Path, Path] | None:
    """``(images_dir, masks_dir)`` when ``root`` is a DUTS-layout data set folder, else None (a flat
    folder). Raises :class:`DataError` when it holds several candidate folders for one side."""
    root = Path(root)
    return _find_split_dirs(root) if root.is_dir() else None


def _by_stem(files: list[Path], kind: str, problems: list[str]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for f in files:
        if f.stem in out:
            problems.append(f"two {kind}s share the name {f.stem!r}: {out[f.stem]} and {f}")
            continue
        out[f.stem] = f
    return out


def _scan(root: str | Path) -> tuple[list[tuple[Path, Path]], list[str]]:
    """List pairs and collect (not raise) every listing problem."""
    root = Path(root)
    problems: list[str] = []
    if not root.exists():
        return [], [f"data folder {root} does not exist"]
    if not root.is_dir():
        return [], [f"data folder {root} is not a folder"]
    split = _find_split_dirs(root)
    if split is None:
        image_dir = mask_dir = root
        images = _by_stem(_files(root, _FLAT_IMAGE_EXTS), "image", problems)
        masks = _by_stem(_files(root, _FLAT_MASK_EXTS), "mask", problems)
    else:
        image_dir, mask_dir = split
        images = _by_stem(_files(image_dir, IMAGE_EXTS), "image", problems)
        masks = _by_stem(_files(mask_dir, MASK_EXTS), "mask", problems)
    if not images and not masks:
        where = root if split is None else f"{image_dir} / {mask_dir}"
        return [], [f"no images or masks found in {where} (empty folder?)"]
    for stem in sorted(set(images) - set(masks)):
        problems.append(f"image without mask: {images[stem]} (expected {mask_dir / stem}.png)")
    for stem in sorted(set(masks) - set(images)):
        problems.append(f"mask without image: {masks[stem]}")
    pairs = [(images[s], masks[s]) for s in sorted(set(images) & set(masks))]
    return pairs, problems


def list_pairs(root: str | Path) -> list[tuple[Path, Path]]:
    """List ``(image, mask)`` pairs under ``root``, sorted by stem so every rank sees the same order.

    Raises :class:`DataError` listing every problem (missing or empty folder, unmatched files).
    """
    pairs, problems = _scan(root)
    if problems:
        raise DataError(problems)
    return pairs


# ---------------------------------------------------------------------------------------------
# Decoding


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
    """Decode an image to uint8 ``(3, H, W)`` RGB in display (EXIF) orientation.

    The result is channels-last in memory (a ``permute`` view of the decoder's ``(H, W, 3)``
    pixels): a crop of it copies whole rows, and the layout change to planar is left to the device
    (:func:`~ignite_r3net.data.transforms.normalize_image` and the training augmentation accept
    either layout and give the same numbers).

    torchvision decodes the common case, 8-bit RGB (any JPEG in YCbCr, RGB PNGs). Everything else
    goes to PIL, whose header read decides the conversion: CMYK JPEGs (torchvision returns their
    4 channels as they are; PIL applies the Adobe inverted-ink convention), grayscale, alpha,
    16-bit, and files torchvision cannot read (TIFF, odd PNGs, ...). Raises :class:`DataError`
    naming the file when neither can read it.
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
