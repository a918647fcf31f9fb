"""``evaluate``, ``predict`` and ``export``: a checkpoint's maps scored or written, or the model
written as a file of its own."""

from __future__ import annotations

import argparse

from ..options import EvaluateOptions, ExportOptions, PredictOptions
from .common import add_options, options_from_args


def add_evaluate(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser(
        "evaluate",
        help="score a checkpoint on data sets, or existing saliency maps against masks",
        description="Score a checkpoint on one or more data sets (full resolution unless --size or "
        "--max-side, batch 1), or score saliency maps already on disk (--maps/--gt). Prints one row per "
        "data set; --json and --per-image write the numbers as files.",
    )
    add_options(ev, EvaluateOptions)
    ev.set_defaults(handler=run_evaluate)


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


def add_export(sub: argparse._SubParsersAction) -> None:
    ex = sub.add_parser(
        "export",
        help="write the trained model as one ONNX or TorchScript file for use outside this package",
        description="Write R3Net's inference graph (eval mode, sigmoid output at the input's size) as one "
        "file that runs without this package. Input: RGB uint8 (N, 3, H, W), 0..255; output: float "
        "(N, 1, H, W) saliency in 0..1; batch, height and width are dynamic and the ImageNet "
        "normalisation is inside the graph (this contract is also stored in the file's metadata). The "
        "file is loaded back and compared with the PyTorch model before it is given its name.",
    )
    add_options(ex, ExportOptions)
    ex.set_defaults(handler=run_export)


# each command's code is imported when it runs: see cli/__init__.py
def run_evaluate(args: argparse.Namespace) -> int:
    from ..evaluation.evaluate import evaluate

    evaluate(options_from_args(EvaluateOptions, args))
    return 0


def run_predict(args: argparse.Namespace) -> int:
    from ..evaluation.predict import predict

    predict(options_from_args(PredictOptions, args))
    return 0


def run_export(args: argparse.Namespace) -> int:
    from ..export.writer import export_model

    export_model(options_from_args(ExportOptions, args))
    return 0
