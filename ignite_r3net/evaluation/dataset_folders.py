"""Data set folders as ``evaluate`` and ``compare`` take them: ``NAME=DIR`` items, and where the
masks and the images of a DIR are (a masks folder, a data set folder, or the masks half of one)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..data.folder import dataset_of_half, split_dirs
from ..errors import OptionError
from .maps import dataset_names

_BAD_NAME = re.compile(r"[\x00-\x1f/\\]")


@dataclass(frozen=True)
class DatasetFolder:
    """The masks folder of a data set and, when its images can be found, the folder ``list_pairs``
    reads, which inference needs."""

    masks: Path
    data: Path | None


def locate_dataset(folder: str | Path, given: str) -> DatasetFolder:
    """The masks and the data of the existing ``folder``: a data set folder (DUTS layout: an images
    and a masks subfolder; MSRA10K: name.jpg beside name.png), the masks half of a DUTS-layout one,
    or a masks folder alone. The images half of a data set is an ``OptionError`` quoting ``given``,
    the option as typed (its photos would be scored as masks)."""
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
    return DatasetFolder(path, path if _has_images_beside_masks(path) else None)


def _has_images_beside_masks(folder: Path) -> bool:
    # MSRA10K-style: an image beside some .png mask of the same stem
    pngs = {p.stem for p in folder.glob("*.png")}
    return any(p.suffix.lower() != ".png" and p.stem in pngs for p in folder.iterdir() if p.is_file())


def parse_named(values: list[str], option: str) -> list[tuple[str, str]]:
    """``NAME=PATH`` items as (name, path); names must be distinct and usable as file names."""
    parsed: list[tuple[str, str]] = []
    for item in values:
        name, sep, path = item.partition("=")
        name = name.strip()
        if not sep or not name or not path:
            raise OptionError(f"{option} {item!r}: expected NAME=PATH, e.g. ECSSD=/data/ECSSD/GT")
        _check_name(name, item, option)
        if name in {n for n, _ in parsed}:
            raise OptionError(f"{option}: the name {name!r} is given twice")
        parsed.append((name, path))
    return parsed


def named_folders(values: list[str], option: str) -> list[tuple[str, str]]:
    """(name, folder) of items that are ``NAME=DIR`` or a plain ``DIR`` (named after the folder, as
    ``dataset_names`` does); an existing path holding ``=`` is a plain folder. Names must differ."""
    items = [("", v) if Path(v).exists() or "=" not in v else parse_named([v], option)[0] for v in values]
    derived = iter(dataset_names([folder for name, folder in items if not name]))
    named = [(name or next(derived), folder) for name, folder in items]
    names = [name for name, _ in named]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise OptionError(f"{option}: the name {twice[0]!r} is given twice; name the folders with NAME=DIR")
    return named


def _check_name(name: str, item: str, option: str) -> None:
    if name in (".", "..") or name.startswith(".") or _BAD_NAME.search(name):
        raise OptionError(f"{option} {item!r}: NAME must not start with '.' or hold '/', '\\' or control characters")
