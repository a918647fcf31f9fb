"""Data tools on the command line: ``make-data`` and ``check-data``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .data import check_dataset, list_pairs, make_synthetic_dataset


def add_data_commands(sub: argparse._SubParsersAction) -> None:
    make = sub.add_parser(
        "make-data",
        help="write the generated synthetic saliency data set",
        description="Write the synthetic data set (MSRA10K layout) to OUT/train and OUT/val.",
    )
    make.add_argument("--out", required=True, help="output folder")
    make.add_argument("--train", type=int, default=400, help="number of training pairs")
    make.add_argument("--val", type=int, default=60, help="number of validation pairs")
    make.add_argument("--seed", type=int, default=2018, help="generator seed (same seed, same files)")
    make.set_defaults(handler=run_make_data)

    check = sub.add_parser(
        "check-data",
        help="scan a data set and report every problem by file name",
        description="Scan image/mask pairs (headers only) and list every problem.",
    )
    check.add_argument("folders", nargs="+", help="data set folders (MSRA10K or DUTS layout)")
    check.set_defaults(handler=run_check_data)


def run_make_data(args: argparse.Namespace) -> int:
    from .cli import CommandError  # imported here: cli imports this module

    if args.train < 1 or args.val < 0:
        raise CommandError(f"--train must be at least 1 and --val at least 0, got {args.train} and {args.val}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise CommandError(f"--out {out} exists and is not a folder")
    try:
        train_dir, val_dir = make_synthetic_dataset(out, n_train=args.train, n_val=args.val, seed=args.seed)
    except OSError as e:
        raise CommandError(f"--out {out}: cannot write the data set: {e.strerror or e}") from None
    print(f"wrote {args.train} training pairs to {train_dir} and {args.val} validation pairs to {val_dir}")
    return 0


def run_check_data(args: argparse.Namespace) -> int:
    failed = False
    for folder in args.folders:
        problems = check_dataset(folder)
        if problems:
            failed = True
            print(f"{folder}: {len(problems)} problem(s)")
            for line in problems:
                print(f"  {line}")
        else:
            print(f"{folder}: {len(list_pairs(folder))} pairs, no problems")
    sys.stdout.flush()
    return 1 if failed else 0
