"""Saliency maps and data set folders on disk: reading any method's maps (8-bit gray values as stored,
as the toolboxes read them), matching them to masks, scoring them (``score_maps``, for ``evaluate --maps``
and ``compare`` alike), writing ours inside their folder, and naming and locating data set folders.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from ..atomic_files import atomic_output
from ..data.decode import load_mask
from ..data.folder import IMAGE_EXTS, dataset_of_half, split_dirs
from ..errors import DataError, OptionError
from ..metrics.saliency import SaliencyMetrics

MAP_EXTS = IMAGE_EXTS  # any image format the data loader reads
# Preference when one stem has several files (an MSRA10K-style folder holds name.jpg + name.png):
# the lossless formats first, since masks and maps are normally PNG.
_PREFERENCE = {ext: i for i, ext in enumerate((".png", ".bmp", ".tif", ".tiff", ".webp", ".jpg", ".jpeg"))}
# Folder names that say "this is the masks half of a data set", so its parent names the data set.
_GENERIC_DIRS = set(
    "gt gts mask masks groundtruth ground_truth label labels images imgs image maps sal saliency".split()
)
_BAD_NAME = re.compile(r"[\x00-\x1f/\\]")


@dataclass
class MapMatch:
    """Maps paired with masks by file stem, and what was left over on either side."""

    pairs: list[tuple[str, Path, Path]] = field(default_factory=list)  # (stem, map, mask)
    maps_without_mask: list[Path] = field(default_factory=list)
    masks_without_map: list[Path] = field(default_factory=list)


def files_by_stem(folder: Path, what: str) -> dict[str, Path]:
    """The map or mask files in ``folder`` by stem, the lossless one of several; ``what`` names it in errors."""
    if not folder.exists():
        raise OptionError(f"{what} folder {folder} does not exist")
    if not folder.is_dir():
        raise OptionError(f"{what} {folder} is not a folder")
    found: dict[str, Path] = {}
    for p in sorted(folder.iterdir()):
        # hidden files (.DS_Store, ._name) are never maps
        if not p.is_file() or p.name.startswith(".") or p.suffix.lower() not in MAP_EXTS:
            continue
        old = found.get(p.stem)
        if old is None or _PREFERENCE[p.suffix.lower()] < _PREFERENCE[old.suffix.lower()]:
            found[p.stem] = p
    return found


def match_maps(maps_dir: str | Path, gt_dir: str | Path) -> MapMatch:
    """Pair the images in ``maps_dir`` with the masks in ``gt_dir`` by file stem (MSRA10K: ``a.png``, not ``a.jpg``)."""
    maps = files_by_stem(Path(maps_dir), "maps")
    masks = files_by_stem(Path(gt_dir), "ground-truth")
    return MapMatch(
        pairs=[(s, maps[s], masks[s]) for s in sorted(maps.keys() & masks.keys())],
        maps_without_mask=[maps[s] for s in sorted(maps.keys() - masks.keys())],
        masks_without_map=[masks[s] for s in sorted(masks.keys() - maps.keys())],
    )


def load_saliency_map(path: str | Path) -> torch.Tensor:
    """A map as uint8 ``(H, W)``: gray values as stored, colour to gray, 16-bit to 8; else ``DataError``."""
    try:
        with Image.open(path) as img:
            img.load()
            if img.mode in ("I;16", "I;16B", "I;16L", "I"):
                arr = np.asarray(img).astype(np.float64)
                arr = np.clip(np.rint(arr * (255.0 / 65535.0)), 0, 255).astype(np.uint8)
            elif img.mode == "F":
                arr = np.clip(np.rint(np.asarray(img) * 255.0), 0, 255).astype(np.uint8)
            else:
                arr = np.asarray(img.convert("L"))
    except Exception as exc:  # PIL raises several types for unreadable files
        raise DataError(f"cannot read saliency map {path}: {exc}") from exc
    return torch.from_numpy(np.array(arr, dtype=np.uint8, copy=True))  # PIL arrays are read-only


def score_maps(pairs: Iterable[tuple[Path, Path]], metric: SaliencyMetrics) -> list[str]:
    """Feed each ``(map, mask)`` file pair to ``metric``; returns the maps resized (bilinear) to their mask."""
    resized: list[str] = []
    for map_path, mask_path in pairs:
        mask = load_mask(mask_path)[0]
        saliency = load_saliency_map(map_path)
        if saliency.shape != mask.shape:  # the toolboxes need equal sizes: bilinear, rounded back to uint8
            scaled = F.interpolate(saliency[None, None].float(), size=mask.shape, mode="bilinear", align_corners=False)
            saliency = scaled[0, 0].round().clamp(0, 255).to(torch.uint8)
            resized.append(Path(map_path).name)
        metric.update(([saliency], [mask], [Path(mask_path).stem]))
    return resized


def safe_stem(stem: str) -> str:
    """A stem that cannot leave its folder: separators and NUL to ``_``, ``.``/``..`` (of ``...png``) prefixed."""
    cleaned = "".join("_" if c in "/\\\x00" else c for c in stem)
    if cleaned in ("", ".", ".."):
        cleaned = "_" + cleaned
    return cleaned


def output_path(out_dir: str | Path, stem: str, suffix: str = ".png") -> Path:
    """``out_dir / safe_stem(stem) + suffix``, checked to lie inside ``out_dir``."""
    out = Path(out_dir).resolve()
    path = (out / (safe_stem(stem) + suffix)).resolve()
    if path.parent != out:  # belt and braces: safe_stem should already guarantee this
        raise ValueError(f"refusing to write {path}: outside {out}")
    return path


def save_map(path: str | Path, saliency: torch.Tensor) -> None:
    """Write a uint8 ``(H, W)`` map as an 8-bit grayscale PNG, atomically."""
    arr = saliency.detach().to("cpu", torch.uint8).numpy()
    # not durable: the fsyncs cost several ms per map (more than a GPU's inference of it); compare
    # counts a folder of maps only once the manifest written after them is there
    with atomic_output(path, durable=False) as tmp:
        Image.fromarray(arr, mode="L").save(tmp, format="PNG")


def dataset_names(folders: Sequence[str | Path]) -> list[str]:
    """A distinct, safe name per folder: its own (its parent's for ``GT``, ``masks``...), ``parent_name``, ``-2``."""

    def base(p: Path) -> Path:
        return p.parent if p.name.lower() in _GENERIC_DIRS and p.parent.name else p

    paths = [base(Path(f).resolve()) for f in folders]
    names = [safe_stem(p.name) for p in paths]
    clashing = {n for n in names if names.count(n) > 1}
    for i, p in enumerate(paths):
        if names[i] in clashing and p.parent.name:
            names[i] = safe_stem(f"{p.parent.name}_{p.name}")
    return [f"{name}-{names[:i].count(name) + 1}" if name in names[:i] else name for i, name in enumerate(names)]


@dataclass(frozen=True)
class DatasetFolder:
    """A data set's masks folder, and the folder ``list_pairs`` reads (None: no images found)."""

    masks: Path
    data: Path | None


def locate_dataset(folder: str | Path, given: str) -> DatasetFolder:
    """The masks and data of ``folder``: a data set folder (DUTS or MSRA10K layout), the masks half of a
    DUTS-layout one, or a masks folder. Its images half is an ``OptionError`` quoting ``given``."""
    path = Path(folder).resolve()
    split = split_dirs(path)
    if split is not None:
        return DatasetFolder(split[1], path)
    half = dataset_of_half(path)
    if half is not None and half[1] == "images":
        raise OptionError(
            f"{given} is the images folder of the data set {half[0]}: give the data set folder "
            f"{half[0]} (or its masks folder)"
        )
    if half is not None:
        return DatasetFolder(path, half[0])
    # MSRA10K-style: an image beside some .png mask of the same stem
    pngs = {p.stem for p in path.glob("*.png")}
    images = any(p.suffix.lower() != ".png" and p.stem in pngs for p in path.iterdir() if p.is_file())
    return DatasetFolder(path, path if images else None)


def parse_named(values: list[str], option: str) -> list[tuple[str, str]]:
    """``NAME=PATH`` items as (name, path); names must be distinct and usable as file names."""
    parsed: list[tuple[str, str]] = []
    for item in values:
        name, sep, path = item.partition("=")
        name = name.strip()
        if not sep or not name or not path:
            raise OptionError(f"{option} {item!r}: expected NAME=PATH, e.g. ECSSD=/data/ECSSD/GT")
        if name.startswith(".") or _BAD_NAME.search(name):
            raise OptionError(
                f"{option} {item!r}: NAME must not start with '.' or hold '/', '\\' or control characters"
            )
        if name in {n for n, _ in parsed}:
            raise OptionError(f"{option}: the name {name!r} is given twice")
        parsed.append((name, path))
    return parsed


def named_folders(values: list[str], option: str) -> list[tuple[str, str]]:
    """(name, folder) of ``NAME=DIR`` or ``DIR`` items (named by ``dataset_names``; an existing path is a DIR)."""
    items = [("", v) if Path(v).exists() or "=" not in v else parse_named([v], option)[0] for v in values]
    derived = iter(dataset_names([folder for name, folder in items if not name]))
    named = [(name or next(derived), folder) for name, folder in items]
    names = [name for name, _ in named]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise OptionError(f"{option}: the name {twice[0]!r} is given twice; name the folders with NAME=DIR")
    return named
