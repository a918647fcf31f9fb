"""Command line: ``train`` (the default), ``evaluate``, ``predict``, ``make-data``, ``check-data``.

The ``train`` options are generated from ``TrainConfig``, so every recipe field has a flag whose
``--help`` shows its default.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path

from .config import TrainConfig
from .errors import error_line


class CommandError(Exception):
    """A user error: printed as one line, exit code 2."""


def _field_type(field: dataclasses.Field) -> type:
    hint = typing.get_type_hints(TrainConfig)[field.name]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def add_train_options(parser: argparse.ArgumentParser) -> None:
    """One ``--flag`` per ``TrainConfig`` field, with its help text and default."""
    for field in dataclasses.fields(TrainConfig):
        flag = "--" + field.name.replace("_", "-")
        meta = dict(field.metadata)
        help_text = meta.pop("help")
        if field.name == "backbone":
            from .model import BACKBONES

            help_text += f" (one of: {', '.join(BACKBONES)})"
        kind = _field_type(field)
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=field.default, help=help_text)
        else:
            if "choices" not in meta:  # argparse shows {a,b,c} for choices
                meta["metavar"] = field.name.upper()
            parser.add_argument(flag, type=kind, default=field.default, help=help_text, **meta)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)})


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except where there is none (None) or the help text already
    says what the default is."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default is None or "default" in text:
            return text
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: ``train`` (default), ``evaluate``, ``predict``, ``make-data``,
    ``check-data``."""
    parser = argparse.ArgumentParser(
        prog=_program_name(),
        description="Train and evaluate R3Net saliency detection with pytorch-ignite. "
        "Without a command, 'train' is run: `python run.py --nproc 2 ...`.",
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    train = sub.add_parser(
        "train",
        help="train R3Net (the default command)",
        description="Train R3Net with the original training recipe (SGD, poly LR, "
        "7 side-output losses) on one or many processes.",
    )
    add_train_options(train)
    train.set_defaults(handler=run_train)

    from .commands import add_data_commands
    from .evaluation.commands import add_evaluation_commands

    add_evaluation_commands(sub)
    add_data_commands(sub)
    for command in sub.choices.values():
        command.formatter_class = HelpFormatter
        command.allow_abbrev = False  # "--checkpoint" must not pass for "--checkpoint-every"
    return parser


def _program_name() -> str:
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name == "ignite-r3net" else "python run.py"


def run_train(args: argparse.Namespace) -> int:
    from .training.run import train

    train(config_from_args(args))
    return 0


def _with_default_command(argv: Sequence[str]) -> list[str]:
    """Insert ``train`` when the command line starts with an option (or is empty)."""
    argv = list(argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv.insert(0, "train")
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python run.py`` and the ``ignite-r3net`` console script."""
    parser = build_parser()
    args = parser.parse_args(_with_default_command(sys.argv[1:] if argv is None else argv))
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt as e:
        from .launch import Terminated

        terminated = isinstance(e, Terminated)
        print("terminated" if terminated else "interrupted", file=sys.stderr)
        return 143 if terminated else 130
    except Exception as e:  # noqa: BLE001 - user errors become one line; bugs keep their traceback
        if _is_user_error(e):
            from .launch import WorkerFailed

            print(f"error: {error_line(e)}", file=sys.stderr)
            return 1 if isinstance(e, WorkerFailed) else 2
        raise


def _is_user_error(e: Exception) -> bool:
    from .data import DataError
    from .launch import WorkerFailed
    from .training.checkpoint import CheckpointError
    from .training.preflight import ConfigError

    return isinstance(e, (CommandError, ConfigError, DataError, CheckpointError, WorkerFailed, FileNotFoundError))


if __name__ == "__main__":
    sys.exit(main())
