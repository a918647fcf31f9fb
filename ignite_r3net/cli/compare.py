"""``compare``: the field's tables and curves for many methods on many data sets."""

from __future__ import annotations

import argparse

from ..evaluation.comparison_table import DEFAULT_METRICS
from ..metrics import METRIC_KEYS
from .common import add_model_options, add_process_options, add_protocol_option


def add_compare(sub: argparse._SubParsersAction) -> None:
    cmp = sub.add_parser(
        "compare",
        help="tables and PR / F-measure curves of many methods on many data sets",
        description="Score every method on every data set with the code of 'evaluate --maps', and write "
        "OUT/results.json ({dataset: {method: {metric: value, count}}}), OUT/table.md, table.csv and "
        "table.tex (best value of each column bold, second-best underlined; CSV plain) and "
        "OUT/curves/pr_<dataset>.png/.svg and fm_<dataset>.png/.svg (one line per method) with the "
        "curves' numbers in curves/curves.json. Scores are cached in OUT/cache per (method, data set), "
        "keyed by the files, their modification times, the protocol and the metric code: running again "
        "with one more method scores only that method. Rows and columns follow the command line.",
        epilog="example: python run.py compare --datasets ECSSD=data/ECSSD/GT DUTS_TE=data/DUTS_TE "
        "--methods Ours=runs/a/best.pt PoolNet=maps/PoolNet --out comparison",
    )
    cmp.add_argument(
        "--datasets",
        nargs="+",
        required=True,
        metavar="NAME=DIR",
        help="data sets: DIR is the masks folder (maps are matched to its masks by file stem), or a data "
        "set folder holding images and masks (images/ + masks/, Imgs/ + GT/, DUTS-TE-Image/ + DUTS-TE-Mask/, "
        "or name.jpg beside name.png), which checkpoint methods need for their images; a masks folder "
        "inside such a folder works too",
    )
    cmp.add_argument(
        "--methods",
        nargs="+",
        required=True,
        metavar="NAME=SOURCE",
        help="methods: SOURCE is a folder with one subfolder of maps per data set NAME (SOURCE/<dataset>/"
        "<stem>.png, as released maps come; a folder matching the name up to case and punctuation is "
        "accepted), or a checkpoint file, whose maps are first made as by 'evaluate --save-maps' into "
        "OUT/maps/<method>/<dataset> and kept for the next run",
    )
    cmp.add_argument("--out", required=True, metavar="OUT", help="output folder (created; rerun into it to reuse)")
    cmp.add_argument(
        "--metrics",
        nargs="+",
        default=list(DEFAULT_METRICS),
        metavar="METRIC",
        help=f"table columns per data set, in this order, from: {', '.join(METRIC_KEYS)} (results.json "
        f"always holds all nine); default: {' '.join(DEFAULT_METRICS)}",
    )
    add_protocol_option(cmp)
    cmp.add_argument(
        "--allow-missing",
        action="store_true",
        help="score a method that lacks some maps of a data set on the maps it has (the cell is marked "
        "and not ranked) instead of stopping; a method lacking a whole data set is always just a '-'",
    )
    cmp.add_argument("--digits", type=int, default=3, help="decimals in the tables (ranks use the printed values)")
    add_model_options(cmp)
    add_process_options(
        cmp, "processes for scoring (and for checkpoint inference); the numbers are those of one process"
    )
    cmp.set_defaults(handler=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    from ..evaluation.compare import InferenceOptions, compare

    compare(
        args.datasets,
        args.methods,
        args.out,
        metrics=args.metrics,
        protocol=args.protocol,
        allow_missing=args.allow_missing,
        digits=args.digits,
        inference=InferenceOptions(backbone=args.backbone, crf=args.crf, amp=args.amp, workers=args.workers),
        nproc=args.nproc,
        backend=args.backend,
        master_port=args.master_port,
    )
    return 0
