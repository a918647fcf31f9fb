"""``evaluate``: a checkpoint scored on data sets, or saliency maps already on disk scored."""

from __future__ import annotations

import argparse

from ..options import EvaluateOptions
from .common import add_command


def add_evaluate(sub: argparse._SubParsersAction) -> None:
    add_command(
        sub,
        "evaluate",
        EvaluateOptions,
        "ignite_r3net.evaluation.evaluate:evaluate",
        help="score a checkpoint on data sets, or existing saliency maps against masks",
        description="Score a checkpoint on one or more data sets (full resolution unless --size or "
        "--max-side, batch 1), or score saliency maps already on disk (--maps/--gt). Prints one row per "
        "data set; --json and --per-image write the numbers as files.",
    )
