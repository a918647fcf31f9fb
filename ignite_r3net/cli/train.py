"""``train`` (the default command): one ``--flag`` per recipe field of ``TrainConfig``."""

from __future__ import annotations

import argparse
import dataclasses

from ..config import TrainConfig
from ..model.backbones import BACKBONES
from .common import add_options, given_options


def add_train(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser(
        "train",
        help="train R3Net (the default command)",
        description="Train R3Net with the original training recipe (SGD, poly LR, 7 side-output losses) "
        "on one or many processes.",
    )
    train.add_argument(
        "--config",
        metavar="FILE",
        help="rerun the recipe a run saved in FILE (its config.json): the options given on the command line "
        "replace the saved ones; the saved --resume is not taken, and the starting weights are fetched again "
        "(with a warning when they differ from the saved run's)",
    )
    backbone_help = next(f for f in dataclasses.fields(TrainConfig) if f.name == "backbone").metadata["help"]
    add_options(train, TrainConfig, backbone=f"{backbone_help} (one of: {', '.join(BACKBONES)})")
    train.set_defaults(handler=run_train)


def run_train(args: argparse.Namespace) -> int:
    # each command's code is imported when it runs: see cli/__init__.py
    from ..training.recipe_config import config_from_file, config_from_options
    from ..training.start import train

    given = given_options(TrainConfig, args)
    train(config_from_file(args.config, given) if args.config else config_from_options(given))
    return 0
