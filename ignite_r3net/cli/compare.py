"""``compare``: the field's tables and curves for many methods on many data sets."""

from __future__ import annotations

import argparse

from ..options import CompareOptions
from .common import add_command


def add_compare(sub: argparse._SubParsersAction) -> None:
    add_command(
        sub,
        "compare",
        CompareOptions,
        "ignite_r3net.evaluation.compare:compare",
        help="tables and PR / F-measure curves of many methods on many data sets",
        description="Score every method on every data set with the code of 'evaluate --maps', and write "
        "OUT/results.json ({dataset: {method: {metric: value, count}}}), OUT/table.md, table.csv and "
        "table.tex (best value of each column bold, second-best underlined; CSV plain) and "
        "OUT/curves/pr_<dataset>.png/.svg and fm_<dataset>.png/.svg (one line per method) with the "
        "curves' numbers in curves/curves.json, and the visual comparison OUT/figures/visual_<dataset>.png/.pdf "
        "(image, ground truth and each method's map for --show images; see --show). Scores are cached in "
        "OUT/cache per (method, data set), "
        "keyed by the files, their modification times, the protocol and the metric code: running again "
        "with one more method scores only that method. Rows and columns follow the command line.",
        epilog="example: python run.py compare --datasets ECSSD=data/ECSSD/GT DUTS_TE=data/DUTS_TE "
        "--methods Ours=runs/a/best.pt PoolNet=maps/PoolNet --out comparison",
    )
