"""What a client posts, checked before it costs memory: the body's size while it is read, the image's pixel count
from its header before it is decoded (a decompression bomb is refused unread), then a full decode with PIL, whose
errors are exceptions (torchvision's PNG decoder crashed the process on a truncated file)."""

from __future__ import annotations

import io
import warnings
from collections.abc import AsyncIterator

import numpy as np
import torch
from PIL import Image, ImageOps, UnidentifiedImageError

from ..errors import error_line


class Refused(Exception):
    """A request answered with ``status`` and the one-line ``message`` (``{"error": message}``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def too_large(size: int, limit: int) -> Refused:
    return Refused(413, f"the upload is {size / 1e6:.3g} MB, more than the server's --max-upload-mb {limit / 1e6:g}")


async def read_limited(chunks: AsyncIterator[bytes], limit: int, declared: int | None) -> bytes:
    """The whole body from ``chunks``, refused (413) as soon as it, or its declared length, passes ``limit``."""
    if declared is not None and declared > limit:
        raise too_large(declared, limit)
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise too_large(len(body), limit)
    return bytes(body)


def decode_upload(data: bytes, max_pixels: int) -> torch.Tensor:
    """The posted image as uint8 ``(3, H, W)`` RGB in display (EXIF) orientation, as ``predict`` reads a file that
    is not 8-bit RGB (``data.decode.load_image``'s PIL path); ``Refused`` (4xx) for anything else."""
    if not data:
        raise Refused(400, "the field 'image' is empty")
    try:
        image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise Refused(415, "the upload is not an image (JPEG, PNG, WebP, BMP, TIFF, GIF ...)") from None
    except Image.DecompressionBombError as e:  # PIL's own limit, from its header
        raise Refused(413, f"the image has too many pixels: {error_line(e)}") from None
    with image:
        width, height = image.size
        if width * height > max_pixels:
            raise Refused(
                413,
                f"the image is {width}x{height} = {width * height} pixels, more than the server's --max-pixels "
                f"{max_pixels} (a decompression bomb?)",
            )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # DecompressionBombWarning: the pixels were counted above
                image.load()
                rgb = (ImageOps.exif_transpose(image) or image).convert("RGB")
        except Exception as e:  # PIL raises OSError, SyntaxError, ValueError ... for damaged data
            raise Refused(400, f"the image cannot be decoded (damaged or truncated?): {error_line(e)}") from None
    return torch.from_numpy(np.array(rgb)).permute(2, 0, 1)
