"""``predict``: saliency maps of images, from a checkpoint or an exported model."""

from __future__ import annotations

import argparse

from ..options import PredictOptions
from .common import add_options, options_from_args


def add_predict(sub: argparse._SubParsersAction) -> None:
    pr = sub.add_parser(
        "predict",
        help="write saliency maps for images",
        description="Write an 8-bit PNG saliency map, at the input's own size and with its stem, for "
        "every input image (files, or every image directly inside a folder), with PyTorch from a "
        "checkpoint or with a model written by 'export'.",
    )
    add_options(pr, PredictOptions)
    pr.set_defaults(handler=run_predict)


# the command's code is imported when it runs: see cli/__init__.py
def run_predict(args: argparse.Namespace) -> int:
    from ..evaluation.predict import predict

    predict(options_from_args(PredictOptions, args))
    return 0
