"""Saliency maps on disk: reading any method's maps, matching them to masks, scoring them, writing
ours safely.

Reading follows the toolboxes (PySODMetrics reads with ``cv2.IMREAD_GRAYSCALE``): a map's 8-bit
gray values are taken as they are (no rescaling of dark maps), colour maps are converted to gray.
``score_maps`` is the one place map files become metric updates (``evaluate --maps`` and
``compare`` both call it). Writing never leaves the output folder, whatever the stem of the input was.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from ..atomic_files import atomic_output
from ..data.decode import load_mask
from ..data.folder import IMAGE_EXTS
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


@dataclass
class MapMatch:
    """Maps paired with masks by file stem, and what was left over on either side."""

    pairs: list[tuple[str, Path, Path]] = field(default_factory=list)  # (stem, map, mask)
    maps_without_mask: list[Path] = field(default_factory=list)
    masks_without_map: list[Path] = field(default_factory=list)


def files_by_stem(folder: Path, what: str) -> dict[str, Path]:
    """The map or mask files directly in ``folder`` by stem, sorted; for a stem with several files,
    the lossless format first. Raises ``OptionError`` naming ``what`` when the folder is missing."""
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
    """Pair the images in ``maps_dir`` with the masks in ``gt_dir`` by file stem (non-recursive;
    of ``a.jpg`` and ``a.png`` the PNG, so an MSRA10K-style folder works as ``gt_dir``)."""
    maps = files_by_stem(Path(maps_dir), "maps")
    masks = files_by_stem(Path(gt_dir), "ground-truth")
    return MapMatch(
        pairs=[(s, maps[s], masks[s]) for s in sorted(maps.keys() & masks.keys())],
        maps_without_mask=[maps[s] for s in sorted(maps.keys() - masks.keys())],
        masks_without_map=[masks[s] for s in sorted(masks.keys() - maps.keys())],
    )


def load_saliency_map(path: str | Path) -> torch.Tensor:
    """Read a saliency map as uint8 ``(H, W)``: gray values as stored, colour converted to gray,
    16-bit scaled to 8 bits. Raises ``DataError`` naming the file when it cannot be read."""
    path = Path(path)
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


def resize_map(saliency: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Bilinear resize of a uint8 ``(H, W)`` map to ``size`` (H, W), rounded back to uint8."""
    x = saliency.to(torch.float32)[None, None]
    y = F.interpolate(x, size=tuple(size), mode="bilinear", align_corners=False)
    return y[0, 0].round().clamp(0, 255).to(torch.uint8)


def score_maps(pairs: Iterable[tuple[Path, Path]], metric: SaliencyMetrics) -> list[str]:
    """Feed each ``(map file, mask file)`` pair to ``metric``; returns the names of the maps that
    were resized (bilinear) to their mask's size, as the toolboxes need equal sizes."""
    resized: list[str] = []
    for map_path, mask_path in pairs:
        mask = load_mask(mask_path)[0]
        saliency = load_saliency_map(map_path)
        if saliency.shape != mask.shape:
            saliency = resize_map(saliency, (mask.shape[0], mask.shape[1]))
            resized.append(Path(map_path).name)
        metric.update(([saliency], [mask], [Path(mask_path).stem]))
    return resized


def safe_stem(stem: str) -> str:
    """A file name stem that cannot leave its folder: separators and NUL become ``_`` and the
    names ``.``/``..`` (a file called ``...png`` has stem ``..``) get a ``_`` prefix."""
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
    """One distinct, file-system-safe name per data set folder: its name (or its parent's, when
    the folder is a generic ``GT``/``masks``), then ``parent_name``, then a ``-2`` suffix."""

    def base(p: Path) -> Path:
        return p.parent if p.name.lower() in _GENERIC_DIRS and p.parent.name else p

    paths = [base(Path(f).resolve()) for f in folders]
    names = [safe_stem(p.name) for p in paths]
    clashing = {n for n in names if names.count(n) > 1}
    for i, p in enumerate(paths):
        if names[i] in clashing and p.parent.name:
            names[i] = safe_stem(f"{p.parent.name}_{p.name}")
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}-{seen[name]}")
    return out
