"""``train --val-split F``: the share F of the training pairs held out for validation, chosen by each pair's
name, so that a pair never changes side when pairs are added to (or removed from) its folders."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..atomic_files import write_text
from .folder import list_pairs

VAL_SPLIT_FILE = "val_split.txt"  # the held-out names, one a line, in the output folder

Pair = tuple[Path, Path]


def pair_name(pair: Pair) -> str:
    """What decides a pair's side: its image's file stem (a pair's image and mask share it)."""
    return pair[0].stem


def is_held_out(name: str, fraction: float) -> bool:
    """Whether the pair named ``name`` is held out at ``fraction``: the first 8 bytes of its sha256, read as a
    number in [0, 1), fall below ``fraction``. Each name's side depends on that name alone, and a larger fraction
    only adds names to the held-out ones."""
    draw = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big") / 2**64
    return draw < fraction


def split_pairs(pairs: Iterable[Pair], fraction: float | None) -> tuple[list[Pair], list[Pair]]:
    """``(training, held out)`` of ``pairs``, each in the given order; ``fraction`` None: every pair trains.
    Pairs of one name in several folders go to the same side."""
    training: list[Pair] = []
    held_out: list[Pair] = []
    for pair in pairs:
        (held_out if fraction is not None and is_held_out(pair_name(pair), fraction) else training).append(pair)
    return training, held_out


def held_out_pairs(folders: Sequence[str | Path], fraction: float) -> list[Pair]:
    """The pairs of ``folders`` (listed as training lists them) that ``--val-split fraction`` holds out."""
    return split_pairs((pair for folder in folders for pair in list_pairs(folder)), fraction)[1]


def held_out_names(pairs: Iterable[Pair]) -> list[str]:
    """The sorted names of ``pairs``, each once: what config.json and ``VAL_SPLIT_FILE`` record."""
    return sorted({pair_name(pair) for pair in pairs})


def write_held_out_names(names: Sequence[str], output_dir: str | Path) -> Path:
    """``OUTPUT_DIR/val_split.txt``: ``names``, one a line."""
    path = Path(output_dir) / VAL_SPLIT_FILE
    write_text("".join(f"{name}\n" for name in names), path)
    return path
