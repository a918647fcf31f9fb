"""The command line: ``train`` (the default), ``evaluate``, ``predict``, ``compare``, ``export``,
``reproduce``, ``make-data``, ``check-data`` (``commands.py``). A ``UserError`` from any command
becomes one ``error: ...`` line.

The options need no torch (their choices come from torch-free modules) and each command imports its
code when it runs, so ``--help`` answers at once and a process imports only what its command needs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..console import echo, tolerate_closed_console
from ..errors import Terminated, UserError, ending_line
from .commands import add_commands


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    parser = argparse.ArgumentParser(
        prog=_program_name(),
        description="Train and evaluate R3Net saliency detection with pytorch-ignite. "
        "Without a command, 'train' is run: `python run.py --nproc 2 ...`.",
        allow_abbrev=False,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_commands(sub)
    for parser_of_command in sub.choices.values():
        parser_of_command.allow_abbrev = False  # "--checkpoint" must not pass for "--checkpoint-every"
        parser_of_command.set_defaults(command_parser=parser_of_command)
    return parser


def _program_name() -> str:
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name == "ignite-r3net" else "python run.py"


def _with_default_command(argv: Sequence[str]) -> list[str]:
    """Insert ``train`` when the command line starts with an option (or is empty)."""
    argv = list(argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv.insert(0, "train")
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python run.py`` and the ``ignite-r3net`` console script."""
    tolerate_closed_console()
    parser = build_parser()
    args, unknown = parser.parse_known_args(_with_default_command(sys.argv[1:] if argv is None else argv))
    if unknown:  # the command's usage and --help, not the top level's
        args.command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return args.handler(args)
    except KeyboardInterrupt as e:
        echo(ending_line(e), sys.stderr)  # a closed pipe (`2>&1 | head`) loses the line, not the exit code
        return 143 if isinstance(e, Terminated) else 130
    except UserError as e:
        echo(ending_line(e), sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
