"""Decoding image and mask files to uint8 tensors: torchvision for the common case, PIL for the rest."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from threading import Lock

import numpy as np
import torch
from PIL import Image, ImageOps

from ..errors import DataError, warn

_capture_pipe: dict[int, tuple[int, int]] = {}  # pid -> (read end, write end)
_capture_lock = Lock()


@contextmanager
def _stderr_lines(into: list[str] | None) -> Iterator[None]:
    """Collect what is written to fd 2 while the block decodes a JPEG: libjpeg's warnings on damaged data, which
    torchvision leaves to libjpeg's default output_message, which prints to fd 2 (PIL drops them)."""
    if into is None:
        yield
        return
    with _capture_lock:  # fd 2 is one per process: one capture at a time
        read_end, write_end = _pipe_of_this_process()
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(write_end, 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            text = b""
            with suppress(BlockingIOError):  # raised once the pipe is empty
                while chunk := os.read(read_end, 1 << 16):
                    text += chunk
            into.extend(line.strip() for line in text.decode(errors="replace").splitlines() if line.strip())


def _pipe_of_this_process() -> tuple[int, int]:
    # non-blocking (a full pipe loses libjpeg's message rather than blocking the decode), and one per
    # process: forked DataLoader workers must not read each other's messages
    pid = os.getpid()
    if pid not in _capture_pipe:
        for inherited in _capture_pipe.values():
            for fd in inherited:
                os.close(fd)
        _capture_pipe.clear()
        ends = os.pipe()
        for fd in ends:
            os.set_blocking(fd, False)
        _capture_pipe[pid] = ends
    return _capture_pipe[pid]


def _tv_load(path: Path, mode: str, what: str, strict: bool, warn_damaged: bool) -> torch.Tensor | None:
    """torchvision's decode (libjpeg-turbo), or None when it cannot; a JPEG that libjpeg decodes with warnings is
    refused (``strict``) or named (``warn_damaged``)."""
    from torchvision.io import ImageReadMode, decode_image

    try:
        raw = path.read_bytes()  # in Python, so that any file name the OS accepts works
    except OSError as exc:
        raise DataError(f"cannot read image {path}: {exc}") from exc
    if not raw:
        return None

    def decode(into: list[str] | None) -> torch.Tensor | None:
        data = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        try:
            with warnings.catch_warnings(), _stderr_lines(into):
                warnings.simplefilter("ignore")
                return decode_image(data, mode=getattr(ImageReadMode, mode), apply_exif_orientation=True)
        except Exception:
            return None

    if not (strict or warn_damaged) or not raw.startswith(b"\xff\xd8"):
        return decode(None)
    first: list[str] = []
    out = decode(first)
    if first:
        # fd 2 is the whole process's: another thread may have written to it during the decode.
        # libjpeg says the same again for the same bytes; the other lines go back to stderr.
        again: list[str] = []
        decode(again)
        if others := [line for line in first if line not in again]:
            sys.stderr.flush()
            os.write(2, "".join(line + "\n" for line in others).encode())
        if messages := [line for line in first if line in again]:
            said = f"damaged {what} {path}: libjpeg: {'; '.join(messages)}"
            if strict:
                raise DataError(f"{said} (part of the picture is missing or garbled)")
            warn(f"{said}; used as decoded (part of the picture may be missing or grey)")
    return out


def _pil_open(path: Path) -> Image.Image:
    img = Image.open(path)
    img.load()
    return ImageOps.exif_transpose(img) or img


def load_image(path: str | Path, strict: bool = False, warn_damaged: bool = False) -> torch.Tensor:
    """Decode an image to uint8 ``(3, H, W)`` RGB in display (EXIF) orientation, channels-last in memory.
    Raises DataError naming the file when it cannot be read (``strict``: or when a JPEG decodes with libjpeg
    warnings, i.e. corrupt or truncated data; ``warn_damaged``: it is used, and a warning names it)."""
    # torchvision decodes 8-bit RGB; the rest (CMYK JPEGs, whose inverted ink only PIL handles, grayscale,
    # alpha, 16-bit, TIFF, ...) goes to PIL: UNCHANGED rather than RGB, the channel count is the test
    path = Path(path)
    out = _tv_load(path, "UNCHANGED", "image", strict, warn_damaged)
    if out is not None and out.dtype == torch.uint8 and out.ndim == 3 and out.shape[0] == 3:
        return out
    try:
        with _pil_open(path) as img:
            arr = np.array(img.convert("RGB"))  # a writable copy
    except Exception as exc:
        raise DataError(f"cannot read image {path}: {exc}") from exc
    return torch.from_numpy(arr).permute(2, 0, 1)


def _mask_to_uint8(arr: np.ndarray) -> np.ndarray:
    # any mask bit depth onto 0..255; a 0/1 (or boolean) mask becomes 0/255
    arr = np.asarray(arr)
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


def load_mask(path: str | Path, strict: bool = False, warn_damaged: bool = False) -> torch.Tensor:
    """Decode a mask to uint8 ``(1, H, W)`` 0..255 (16-bit rescaled, 0/1 to 0/255); raises as ``load_image``."""
    path = Path(path)
    out = _tv_load(path, "GRAY", "mask", strict, warn_damaged)
    if out is not None and out.ndim == 3 and out.shape[0] == 1 and out.dtype in (torch.uint8, torch.uint16):
        # the decoded tensor is ours alone: no copy needed
        arr = out[0].numpy() if out.dtype == torch.uint8 else out[0].to(torch.int32).numpy()
        return torch.from_numpy(_mask_to_uint8(arr)).unsqueeze(0)
    try:
        with _pil_open(path) as img:
            # 16-bit, float and 1-bit (boolean) masks as they are, for _mask_to_uint8 to scale
            arr = np.asarray(img if img.mode in ("I", "I;16", "I;16B", "I;16L", "F", "1") else img.convert("L"))
    except Exception as exc:
        raise DataError(f"cannot read mask {path}: {exc}") from exc
    if arr.dtype.kind == "f":
        arr = np.clip(arr, 0, None).astype(np.int64)
    return torch.from_numpy(_mask_to_uint8(arr).copy()).unsqueeze(0)


def decode_problems(pairs: list[tuple[Path, Path]]) -> list[str]:
    """Decode every file of ``pairs`` in full, as strict training does: a line per file that fails."""
    problems = []
    for image, mask in pairs:
        for load, path in ((load_image, image), (load_mask, mask)):
            try:
                load(path, strict=True)
            except DataError as e:
                problems.append(str(e))
    return problems
