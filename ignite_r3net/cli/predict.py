"""``predict``: saliency maps (or cutouts) of images, from a checkpoint or an exported model."""

from __future__ import annotations

import argparse

from ..options import PredictOptions
from .common import add_command


def add_predict(sub: argparse._SubParsersAction) -> None:
    add_command(
        sub,
        "predict",
        PredictOptions,
        "ignite_r3net.evaluation.predict:predict",
        help="write saliency maps (or cutouts) for images",
        description="Write an 8-bit PNG saliency map, at the input's own size and with its stem, for "
        "every input image (files, or every image directly inside a folder), with PyTorch from a "
        "checkpoint or with a model written by 'export', on one or --nproc processes (or the ranks of "
        "torchrun or srun). With --cutout, write the image with the map as its alpha channel instead (an "
        "RGBA PNG: a background remover's output). Each file is written atomically; a rerun into the same "
        "--output skips those it holds from the same model file and options (recorded in OUTPUT/.predict), "
        "so a stopped run continues. Images that cannot be read are listed at the end (exit code 1); the "
        "others are written.",
        epilog="example (a folder of photos to cutouts): python run.py predict --checkpoint CKPT --input "
        "photos --output cutouts --cutout",
    )
