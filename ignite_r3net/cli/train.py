"""``train`` (the default command): one ``--flag`` per recipe field of ``TrainConfig``."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing

from ..config import TrainConfig
from ..model import BACKBONES


def add_train(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser(
        "train",
        help="train R3Net (the default command)",
        description="Train R3Net with the original training recipe (SGD, poly LR, 7 side-output losses) "
        "on one or many processes.",
    )
    add_train_options(train)
    train.set_defaults(handler=run_train)


def add_train_options(parser: argparse.ArgumentParser) -> None:
    """One ``--flag`` per option field of ``TrainConfig``, with its help text and default."""
    hints = typing.get_type_hints(TrainConfig)
    for field in dataclasses.fields(TrainConfig):
        meta = dict(field.metadata)
        if "help" not in meta:  # recorded at start-up, not an option
            continue
        help_text = meta.pop("help")
        if field.name == "backbone":
            help_text += f" (one of: {', '.join(BACKBONES)})"
        flag = "--" + field.name.replace("_", "-")
        if typing.get_origin(hints[field.name]) is list:
            # default None: argparse's "extend" would add to a default list, not replace it
            [item] = typing.get_args(hints[field.name])
            parser.add_argument(
                flag, nargs="+", action="extend", type=item, default=None, metavar=field.name.upper(), help=help_text
            )
            continue
        kind = _option_type(hints[field.name])
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=field.default, help=help_text)
            continue
        if "choices" not in meta:  # argparse shows {a,b,c} for choices
            meta["metavar"] = field.name.upper()
        parser.add_argument(flag, type=kind, default=field.default, help=help_text, **meta)


def _option_type(hint: object) -> type:
    """``int`` for ``int``, ``str`` for ``str | None``."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return typing.cast(type, hint)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The recipe the options describe (an option left out takes the field's default)."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if "help" in f.metadata}
    return TrainConfig(**{name: value for name, value in given.items() if value is not None})


def run_train(args: argparse.Namespace) -> int:
    from ..training import train  # each command's code is imported when it runs: see cli/__init__.py

    train(config_from_args(args))
    return 0
