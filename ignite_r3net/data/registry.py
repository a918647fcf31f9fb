"""The standard saliency data sets by name, found in ``--data-root DIR`` by the folder names people give them
(``HKU_IS``). A pair count other than the published one only warns: copies that drop a few pairs are common."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError, OptionError, warn
from .folder import IMAGE_EXTS, scan, split_dirs


@dataclass(frozen=True)
class StandardSet:
    name: str
    aliases: tuple[str, ...]  # the folder names people use, up to case and punctuation
    pairs: int
    split: str  # "test" or "train"
    source: str  # the publication that released it


# Pair counts as their distributors state them, quoted in lartpang/awesome-segmentation-saliency-dataset
# README.md (commit 1053891e); SOD: the 300 masks of ArcherFMY/sal_eval_toolbox tools/GroundTruth/SOD.
# Sources: the publications cited for each set in ArcherFMY/sal_eval_toolbox README.md ("benchmarks").
_DUTS_PAPER = "Wang et al., Learning to Detect Salient Objects with Image-level Supervision, CVPR 2017"
STANDARD_SETS: tuple[StandardSet, ...] = (
    StandardSet("ECSSD", ("ecssd",), 1000, "test", "Yan et al., Hierarchical Saliency Detection, CVPR 2013"),
    StandardSet(
        "HKU-IS", ("hkuis",), 4447, "test", "Li & Yu, Visual Saliency Based on Multiscale Deep Features, CVPR 2015"
    ),
    StandardSet(
        "PASCAL-S",
        ("pascals", "pascal"),
        850,
        "test",
        "Li et al., The Secrets of Salient Object Segmentation, CVPR 2014",
    ),
    StandardSet(
        "SOD",
        ("sod",),
        300,
        "test",
        "Movahedi & Elder, Design and Perceptual Validation of Performance Measures for Salient Object "
        "Segmentation, CVPRW 2010",
    ),
    StandardSet(
        "DUT-OMRON",
        ("dutomron", "duto", "dutomrom"),
        5168,
        "test",
        "Yang et al., Saliency Detection via Graph-Based Manifold Ranking, CVPR 2013",
    ),
    StandardSet("DUTS-TE", ("dutste", "dutstest"), 5019, "test", _DUTS_PAPER),
    StandardSet(
        "MSRA10K",
        ("msra10k", "msra10kimgsgt"),
        10000,
        "train",
        "Cheng et al., Global Contrast Based Salient Region Detection, TPAMI 2015",
    ),
    StandardSet("DUTS-TR", ("dutstr", "dutstrain"), 10553, "train", _DUTS_PAPER),
)
TEST_SETS = tuple(s.name for s in STANDARD_SETS if s.split == "test")
STANDARD_BY_NAME = {s.name: s for s in STANDARD_SETS}


def _key(name: str) -> str:
    # a folder or set name up to case and punctuation: ``HKU-IS`` and ``hku_is`` are ``hkuis``
    return re.sub(r"[^a-z0-9]+", "", name.lower())


_BY_KEY = {key: s for s in STANDARD_SETS for key in (_key(s.name), *s.aliases)}


def standard_set(name: str) -> StandardSet | None:
    """The standard set ``name`` stands for (any alias, case or punctuation), or None."""
    return _BY_KEY.get(_key(name))


def find_in_root(root: str | Path, dataset: StandardSet) -> Path | None:
    """The folder of ``dataset`` in ``root``, down to the one that holds its images and masks, or None."""
    root = Path(root)
    keys = {_key(dataset.name), *dataset.aliases}
    matches = sorted(p for p in root.iterdir() if p.is_dir() and _key(p.name) in keys) if root.is_dir() else []
    return _data_folder(matches[0]) if matches else None


def _data_folder(folder: Path) -> Path:
    # folder, or the one folder it holds when it holds no images and no images/masks pair of folders
    # (a zip's top folder, ``MSRA10K_Imgs_GT/Imgs``, PoolNet's ``Imgs/`` + ``test.lst``)
    while True:
        try:
            if split_dirs(folder) is not None:
                return folder
        except DataError:  # one lone images-like folder: looked into below
            pass
        entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
        subfolders = [p for p in entries if p.is_dir()]
        if len(subfolders) != 1 or any(p.suffix.lower() in IMAGE_EXTS for p in entries):
            return folder
        folder = subfolders[0]


def resolve_names(values: list[str], data_root: str | None, option: str, named: bool = False) -> list[str]:
    """``values`` with each set's name replaced by its folder in ``data_root`` (``NAME=DIR`` when ``named``), warning
    on an unpublished pair count; OptionError for a value that is no path or known name, or a set not found."""
    if data_root is None:
        return values
    root = Path(data_root)
    if not root.is_dir():
        raise OptionError(f"--data-root {data_root} is not a folder")
    resolved = []
    for value in values:
        if Path(value).exists() or "=" in value or value == "synthetic":
            resolved.append(value)
            continue
        dataset = standard_set(value)
        if dataset is None:
            raise OptionError(
                f"{option} {value}: no such folder and no data set of that name (known: {', '.join(STANDARD_BY_NAME)})"
            )
        folder = find_in_root(root, dataset)
        if folder is None:
            raise OptionError(
                f"{option} {value}: no folder of {dataset.name} in --data-root {data_root} "
                f"(looked for {', '.join(sorted({dataset.name, *dataset.aliases}))}, any case and punctuation)"
            )
        check_count(folder, dataset)
        resolved.append(f"{dataset.name}={folder}" if named else str(folder))
    return resolved


def found_sets(data_root: str | Path, split: str = "test") -> dict[str, Path]:
    """The standard sets of ``split`` found in ``data_root``, by name, in the registry's order."""
    found = {s.name: find_in_root(data_root, s) for s in STANDARD_SETS if s.split == split}
    return {name: folder for name, folder in found.items() if folder is not None}


def check_count(folder: Path, dataset: StandardSet, shown: int = 5) -> int:
    """The number of pairs in ``folder``; warns when it is not the published one, naming the first problems."""
    pairs, problems = scan(folder)
    if len(pairs) != dataset.pairs:
        more = f"; {len(problems)} listing problems, first: {'; '.join(problems[:shown])}" if problems else ""
        warn(f"{dataset.name} in {folder}: {len(pairs)} pairs, the published set has {dataset.pairs}{more}")
    return len(pairs)
