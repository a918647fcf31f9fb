"""``train`` (the default command): one ``--flag`` per recipe field of ``TrainConfig``."""

from __future__ import annotations

import argparse

from ..config import TrainConfig
from ..model import BACKBONES
from .common import add_options, options_from_args


def add_train(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser(
        "train",
        help="train R3Net (the default command)",
        description="Train R3Net with the original training recipe (SGD, poly LR, 7 side-output losses) "
        "on one or many processes.",
    )
    backbone_help = TrainConfig.__dataclass_fields__["backbone"].metadata["help"]
    add_options(train, TrainConfig, backbone=f"{backbone_help} (one of: {', '.join(BACKBONES)})")
    train.set_defaults(handler=run_train)


def run_train(args: argparse.Namespace) -> int:
    from ..training import train  # each command's code is imported when it runs: see cli/__init__.py

    train(options_from_args(TrainConfig, args))
    return 0
