"""``make-data`` and ``check-data``: the synthetic data set and the data set scan (no torch)."""

from __future__ import annotations

import argparse

from .common import with_default


def add_make_data(sub: argparse._SubParsersAction) -> None:
    make = sub.add_parser(
        "make-data",
        help="write the generated synthetic saliency data set",
        description="Write the synthetic data set (MSRA10K layout) to OUT/train and OUT/val.",
    )
    make.add_argument("--out", required=True, help="output folder")
    make.add_argument("--train", type=int, default=400, help=with_default("number of training pairs", 400))
    make.add_argument("--val", type=int, default=60, help=with_default("number of validation pairs", 60))
    make.add_argument(
        "--seed", type=int, default=2018, help=with_default("generator seed (same seed, same files)", 2018)
    )
    make.set_defaults(handler=run_make_data)


def add_check_data(sub: argparse._SubParsersAction) -> None:
    check = sub.add_parser(
        "check-data",
        help="scan a data set and report every problem by file name",
        description="Scan image/mask pairs (headers only, unless --decode) and list every problem. What "
        "the header scan finds about each file is cached in $XDG_CACHE_HOME/ignite_r3net/scan (default "
        "~/.cache), keyed by the file's path, size and modification time, so a second scan reads only new "
        "or changed files (--decode decodes every file each time).",
    )
    check.add_argument("folders", nargs="+", help="data set folders (MSRA10K or DUTS layout)")
    check.add_argument(
        "--decode",
        action="store_true",
        help="also decode every image and mask in full, as training does, and name each one that fails or "
        "that libjpeg decodes with warnings (corrupt or truncated data: part of the picture missing or grey); "
        "slower than the header scan",
    )
    check.set_defaults(handler=run_check_data)


def run_make_data(args: argparse.Namespace) -> int:
    from ..data.commands import make_data

    make_data(args.out, n_train=args.train, n_val=args.val, seed=args.seed)
    return 0


def run_check_data(args: argparse.Namespace) -> int:
    from ..data.commands import check_data

    return check_data(args.folders, decode=args.decode)
