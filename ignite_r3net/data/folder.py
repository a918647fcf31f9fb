"""Listing image/mask pairs: MSRA10K style, ``name.jpg`` and ``name.png`` (the mask) side by side in one folder,
or DUTS style, an images and a masks folder (``Imgs``/``GT``, ...) whose files share stems."""

from __future__ import annotations

import gc
import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import DataError

IMAGE_EXTS: tuple[str, ...] = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")
MASK_EXTS: tuple[str, ...] = (".png", ".bmp", ".tif", ".tiff", ".jpg", ".jpeg")

# In the side-by-side layout a .png is the mask, so images are every other image extension.
_FLAT_MASK_EXTS = (".png",)
_FLAT_IMAGE_EXTS = tuple(e for e in IMAGE_EXTS if e not in _FLAT_MASK_EXTS)

# Folder-name tokens (split on non-alphanumerics, lower case) that mark each side of a DUTS layout.
_IMAGE_DIR_TOKENS = {"image", "images", "img", "imgs", "im", "jpeg", "jpegimages", "rgb", "input", "inputs"}
_MASK_DIR_TOKENS = set(
    "mask masks gt gts groundtruth label labels annotation annotations segmentation segmentations pixelwisegt "
    "sal saliency target targets".split()
)


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection in the block: a scan of 10,000 pairs allocates some 100k objects, none
    in a cycle, whose full collections in a process that imported torch cost 0.9 s of a 1.8 s cached scan."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _tokens(name: str) -> set[str]:
    return {t for t in re.split(r"[^a-z0-9]+", name.lower()) if t}


def _entries(folder: Path) -> tuple[list[str], list[str]]:
    # sorted names of the files and of the folders, hidden ones (.DS_Store, ._name) left out; scandir knows
    # each entry's kind without a stat (a flat folder may hold 100k files on a network filesystem)
    files, folders = [], []
    with os.scandir(folder) as entries:
        for e in entries:
            if e.name.startswith("."):
                continue
            if e.is_dir():
                folders.append(e.name)
            elif e.is_file():
                files.append(e.name)
    return sorted(files), sorted(folders)


def _files(names: list[str], exts: tuple[str, ...]) -> list[str]:
    return [name for name in names if os.path.splitext(name)[1].lower() in exts]


def split_dirs(root: str | Path, entries: tuple[list[str], list[str]] | None = None) -> tuple[Path, Path] | None:
    """``(images_dir, masks_dir)`` of a DUTS-layout folder, else None (``entries``: its ``_entries``, if listed);
    DataError for several candidates."""
    root = Path(root)
    if entries is None and not root.is_dir():
        return None
    files, folders = entries or _entries(root)
    subdirs = [root / name for name in folders]
    image_dirs = [d for d in subdirs if _tokens(d.name) & _IMAGE_DIR_TOKENS and not _tokens(d.name) & _MASK_DIR_TOKENS]
    mask_dirs = [d for d in subdirs if _tokens(d.name) & _MASK_DIR_TOKENS]
    if not image_dirs and not mask_dirs:
        return None
    if len(image_dirs) == 1 and len(mask_dirs) == 1:
        return image_dirs[0], mask_dirs[0]
    if _files(files, IMAGE_EXTS):
        # Loose images beside oddly named folders: treat the root as the side-by-side layout.
        return None
    raise DataError(
        f"cannot tell the images folder from the masks folder in {root}: "
        f"image folders {[d.name for d in image_dirs]}, mask folders {[d.name for d in mask_dirs]}"
    )


def dataset_of_half(folder: str | Path) -> tuple[Path, str] | None:
    """``(data set folder, "images" or "masks")`` when ``folder`` is half of one (``DUTS-TE/DUTS-TE-Image``)."""
    folder = Path(folder).resolve()
    try:
        split = split_dirs(folder.parent)
    except DataError:  # the parent holds several candidates: no data set folder of ours
        return None
    if split is None or folder not in split:
        return None
    return folder.parent, "images" if folder == split[0] else "masks"


def _by_stem(folder: Path, names: list[str], kind: str, problems: list[str]) -> dict[str, Path]:
    out: dict[str, str] = {}
    for name in names:
        stem = os.path.splitext(name)[0]
        if stem in out:
            problems.append(f"two {kind}s share the name {stem!r}: {folder / out[stem]} and {folder / name}")
            continue
        out[stem] = name
    return {stem: folder / name for stem, name in out.items()}


@collector_paused()
def scan(root: str | Path) -> tuple[list[tuple[Path, Path]], list[str]]:
    """The pairs under ``root`` (as ``list_pairs``) and every listing problem, without raising."""
    root = Path(root)
    problems: list[str] = []
    if not root.exists():
        return [], [f"data folder {root} does not exist"]
    if not root.is_dir():
        return [], [f"data folder {root} is not a folder"]
    entries = _entries(root)
    split = split_dirs(root, entries)
    if split is None:
        image_dir = mask_dir = root
        images = _by_stem(root, _files(entries[0], _FLAT_IMAGE_EXTS), "image", problems)
        masks = _by_stem(root, _files(entries[0], _FLAT_MASK_EXTS), "mask", problems)
    else:
        image_dir, mask_dir = split
        images = _by_stem(image_dir, _files(_entries(image_dir)[0], IMAGE_EXTS), "image", problems)
        masks = _by_stem(mask_dir, _files(_entries(mask_dir)[0], MASK_EXTS), "mask", problems)
    if not images and not masks:
        where = root if split is None else f"{image_dir} / {mask_dir}"
        return [], [f"no images or masks found in {where} (empty folder?)"]
    if split is None and set(images) != set(masks) and (half := dataset_of_half(root)) is not None:
        # one line, not one per file: the folder given is half of a data set folder
        parent, side = half
        return [], [f"{root} is the {side} folder of the data set {parent}: give the data set folder {parent}"]
    for stem in sorted(set(images) - set(masks)):
        problems.append(f"image without mask: {images[stem]} (expected {mask_dir / stem}.png)")
    for stem in sorted(set(masks) - set(images)):
        problems.append(f"mask without image: {masks[stem]}")
    pairs = [(images[s], masks[s]) for s in sorted(set(images) & set(masks))]
    return pairs, problems


def list_pairs(root: str | Path) -> list[tuple[Path, Path]]:
    """The ``(image, mask)`` pairs under ``root``, sorted by stem; raises DataError listing every problem."""
    pairs, problems = scan(root)
    if problems:
        raise DataError(problems)
    return pairs


def relative_name(path: str | Path, prefix: str) -> str:
    """``path`` relative to the folder ``prefix`` (its name and a separator): string work for the paths a listing
    of it gives, as pathlib's relative_to on 20,000 paths was a quarter of a relaunch's cached scan."""
    text = os.fspath(path)
    return text[len(prefix) :] if text.startswith(prefix) else os.path.relpath(text, prefix)


def listing_digest(root: str | Path, pairs: list[tuple[Path, Path]] | None = None) -> str:
    """``list_pairs(root)`` (or ``pairs``, its result) in a few words, ``"12 pairs (sha256 0123456789ab)"``: a
    digest of the names relative to ``root``, the same for the data set mounted elsewhere on other nodes."""
    pairs = list_pairs(root) if pairs is None else pairs
    prefix = os.path.join(os.fspath(Path(root)), "")  # as the paths of list_pairs begin
    names = "\n".join(f"{relative_name(image, prefix)}\t{relative_name(mask, prefix)}" for image, mask in pairs)
    return f"{len(pairs)} pairs (sha256 {hashlib.sha256(names.encode()).hexdigest()[:12]})"
