"""``evaluate``: a checkpoint scored on data sets, or saliency maps already on disk scored."""

from __future__ import annotations

import argparse

from ..options import EvaluateOptions
from .common import add_options, options_from_args


def add_evaluate(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser(
        "evaluate",
        help="score a checkpoint on data sets, or existing saliency maps against masks",
        description="Score a checkpoint on one or more data sets (full resolution, batch 1), or score "
        "saliency maps already on disk (--maps/--gt). Prints one row per data set.",
    )
    add_options(ev, EvaluateOptions)
    ev.set_defaults(handler=run_evaluate)


# the command's code is imported when it runs: see cli/__init__.py
def run_evaluate(args: argparse.Namespace) -> int:
    from ..evaluation.evaluate import evaluate

    evaluate(options_from_args(EvaluateOptions, args))
    return 0
