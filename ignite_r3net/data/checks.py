"""Fast data set checks that read headers only, so a bad file is reported before training starts."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import NamedTuple

from PIL import Image

from ..content_key import ContentKey
from ..errors import DataError
from .folder import scan
from .scan_cache import Finding, ScanCache, collector_paused

__all__ = ["check_dataset", "assert_dataset_ok", "image_size"]

_EXIF_ORIENTATION = 0x0112
_TRANSPOSED = {5, 6, 7, 8}  # orientations that swap width and height
_PATH = "\x00"  # stands for the file's path in a problem kept in the scan cache


def _tail_is_jpeg_eoi(path: Path) -> bool:
    # Some writers pad after the EOI marker with zeros or a newline; allow that, nothing else.
    with open(path, "rb") as f:
        f.seek(max(0, f.seek(0, os.SEEK_END) - 64))
        tail = f.read().rstrip(b"\x00\r\n ")
    return tail.endswith(b"\xff\xd9")


def _header(path: Path) -> tuple[str, tuple[int, int]]:
    """The format and the (width, height) in display (EXIF) orientation, from the header alone."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Image.open(path) as img:
            fmt = img.format
            w, h = img.size
            try:
                # PIL's PNG getexif() decodes the whole image to look for an eXIf chunk after
                # the pixels; one before them is in the header (info) already
                has_exif = fmt != "PNG" or "exif" in img.info
                orientation = img.getexif().get(_EXIF_ORIENTATION, 1) if has_exif else 1
            except Exception:
                orientation = 1
    return fmt, ((h, w) if orientation in _TRANSPOSED else (w, h))


def image_size(path: str | Path) -> tuple[int, int] | None:
    """(height, width) of the image in ``path`` as decoded (EXIF orientation applied), from its header;
    None when the header cannot be read."""
    try:
        w, h = _header(Path(path))[1]
    except Exception:  # PIL raises OSError, SyntaxError, struct.error... on damaged headers
        return None
    return h, w


def _probe(path: Path) -> tuple[tuple[int, int] | None, str | None]:
    """((width, height) in display orientation, problem) without decoding pixels."""
    try:
        if path.stat().st_size == 0:
            return None, f"empty file: {path}"
        fmt, size = _header(path)
        if fmt == "PNG":
            # verify() walks the chunks and checks CRCs without inflating the pixels; it must
            # come straight after open, hence the second (header-only) open.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with Image.open(path) as again:
                    again.verify()
    except Image.UnidentifiedImageError:
        return None, f"not an image (unrecognised format): {path}"
    except Exception as exc:  # PIL raises OSError, SyntaxError, struct.error... on damaged headers
        return None, f"unreadable or truncated file: {path} ({exc})"
    if fmt in ("JPEG", "MPO") and not _tail_is_jpeg_eoi(path):
        return None, f"truncated JPEG (no end-of-image marker): {path}"
    return size, None


def _code_version() -> str:
    # what decides a header check's finding: this module's code and Pillow's version
    return ContentKey("header checks", 1).add_sources([Path(__file__)]).add_libraries(["pillow"]).hexdigest()


def _cached_probe(cache: ScanCache, path: Path) -> tuple[tuple[int, int] | None, str | None]:
    """``_probe`` of ``path``, from the scan cache when the file is unchanged (a cached problem names the
    path as given this time)."""

    def probe() -> Finding:
        size, problem = _probe(path)
        return [*(size or (None, None)), None if problem is None else problem.replace(str(path), _PATH)]

    width, height, problem = cache.get(path, probe)
    return (None if width is None else (width, height)), problem and problem.replace(_PATH, str(path))


class Scan(NamedTuple):
    """What a header scan of a data set folder found."""

    pairs: list[tuple[Path, Path]]
    problems: list[str]
    sizes: list[tuple[int, int]]  # of the pairs whose image and mask agree
    sound: list[tuple[Path, Path]]  # the pairs no problem names


def scan_dataset(root: str | Path) -> Scan:
    """The pairs of the data set under ``root``, every problem of its listing and headers (see
    ``check_dataset``), the sizes of the pairs whose image and mask agree and the pairs without problems."""
    pairs, problems = scan(root)
    sizes: list[tuple[int, int]] = []
    sound: list[tuple[Path, Path]] = []
    with collector_paused(), ScanCache(root, "headers", _code_version()) as cache:
        findings = [(_cached_probe(cache, image), _cached_probe(cache, mask)) for image, mask in pairs]
    for (image, mask), ((image_size, image_problem), (mask_size, mask_problem)) in zip(pairs, findings):
        problems.extend(p for p in (image_problem, mask_problem) if p)
        if image_size and mask_size:
            if image_size != mask_size:
                problems.append(
                    f"size mismatch: image {image} is {image_size[0]}x{image_size[1]} "
                    f"but mask {mask} is {mask_size[0]}x{mask_size[1]}"
                )
            else:
                sizes.append(image_size)
                if not image_problem and not mask_problem:
                    sound.append((image, mask))
    return Scan(pairs, problems, sizes, sound)


def check_dataset(root: str | Path) -> list[str]:
    """Every problem of the data set under ``root``, a line each naming the file: unpaired files, size
    mismatches (after EXIF orientation), unreadable, truncated or non-image files, empty folders. Only
    headers are read (plus PNG chunk CRCs and the JPEG end marker), not the pixels."""
    return scan_dataset(root).problems


def assert_dataset_ok(
    root: str | Path, min_size: int | None = None, option: str | None = None
) -> list[tuple[Path, Path]]:
    """The ``(image, mask)`` pairs under ``root`` (as ``list_pairs``); raise DataError listing every
    problem (after ``option``, the option that named ``root``, when given).

    ``min_size`` (the training crop): also fail when the crop is larger than every image. Small images are
    resized up to the crop, but a data set where *every* image needs that is the wrong folder or crop.
    """
    pairs, problems, sizes, _ = scan_dataset(root)
    if min_size is not None and sizes and not problems:
        if not any(w >= min_size and h >= min_size for w, h in sizes):
            w, h = max(sizes, key=lambda s: (s[0] * s[1], s))
            problems.append(f"crop {min_size} is larger than every image in {root} (largest is {w}x{h})")
    if problems:
        raise DataError(problems) if option is None else DataError(f"{option}: {DataError(problems)}")
    return pairs
