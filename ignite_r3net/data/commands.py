"""The data tools of the command line: ``make-data`` and ``check-data``."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import OptionError, listing, note
from .checks import scan_dataset
from .synthetic import make_synthetic_dataset


def make_data(out: str, n_train: int = 400, n_val: int = 60, seed: int = 2018) -> None:
    """Write the synthetic data set (MSRA10K layout) to ``out/train`` and ``out/val``."""
    if n_train < 1 or n_val < 0:
        raise OptionError(f"--train must be at least 1 and --val at least 0, got {n_train} and {n_val}")
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise OptionError(f"--out {folder} exists and is not a folder")
    # make-data writes (and replaces) only its own syn_* files: the others stay and are listed with them
    for split in ("train", "val"):
        others = [p.name for p in sorted((folder / split).glob("*")) if not p.name.startswith("syn_")]
        if others:
            note(
                f"--out {folder}: {split}/ also holds {len(others)} file(s) make-data did not write "
                f"({listing(others, 3)}); they are left as they are, beside the generated pairs"
            )
    try:
        train_dir, val_dir = make_synthetic_dataset(folder, n_train=n_train, n_val=n_val, seed=seed)
    except OSError as e:
        raise OptionError(f"--out {folder}: cannot write the data set: {e.strerror or e}") from None
    print(
        f"wrote {_count(n_train, 'training pair')} to {train_dir} and {_count(n_val, 'validation pair')} to {val_dir}"
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def check_data(folders: list[str], decode: bool = False) -> int:
    """Print every problem of each folder; 1 when any was found, else 0. ``decode``: decode every file (torch)."""
    failed = False
    for folder in folders:
        scan = scan_dataset(folder)  # one listing of the folder for all that follows
        problems = list(scan.problems)
        if decode:
            from .decode import decode_problems

            # also where headers failed elsewhere: the user fixes everything in one round
            problems += decode_problems(scan.sound)
        if problems:
            failed = True
            print(f"{folder}: {len(problems)} problem(s)")
            for line in problems:
                print(f"  {line}")
        else:
            decoded = " (every file decoded)" if decode else ""
            print(f"{folder}: {_count(len(scan.pairs), 'pair')}, no problems{decoded}")
    sys.stdout.flush()
    return 1 if failed else 0
