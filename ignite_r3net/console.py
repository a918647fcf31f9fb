"""The console of a run: optional (a closed pipe never ends it) and quiet (no library chatter)."""

from __future__ import annotations

import logging
import os
import sys
from typing import IO

from .progress import console_print

# ignite's INFO loggers that name its internals ("Spawn function '<function ...>' in 2 processes",
# the spawn parameters, "Apply torch DistributedDataParallel on model", "End of run")
IGNITE_INFO_LOGGERS = (
    "ignite.distributed.launcher.Parallel",
    "ignite.distributed.auto.auto_model",
    "ignite.distributed.auto.auto_dataloader",
)


def echo(line: str, stream: IO[str] | None = None) -> bool:
    """Print ``line`` to ``stream`` (stdout), above any progress bar; False when nobody reads it any
    more (``| head``)."""
    stream = sys.stdout if stream is None else stream
    try:
        console_print(line, stream)
        return True
    except BrokenPipeError:
        silence(stream)
        return False


def silence(stream: IO[str]) -> None:
    """Point a stream whose pipe was closed at /dev/null, as Python's documentation advises for
    SIGPIPE: its buffered text and later writes, also the interpreter's flush at exit, then go
    nowhere instead of raising ``BrokenPipeError`` again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # not a file descriptor (a test's StringIO): nothing to redirect
        pass


def quiet_library_logs(verbose: bool) -> None:
    """ignite's launcher and DDP messages at WARNING, or at INFO with ``--verbose``. ignite's own
    way to change an internal logger's level (``setup_logger``'s docstring); called in the launching
    process and in each worker, whose loggers are their own."""
    from ignite.utils import setup_logger

    for name in IGNITE_INFO_LOGGERS:
        setup_logger(name, level=logging.INFO if verbose else logging.WARNING, reset=True)
