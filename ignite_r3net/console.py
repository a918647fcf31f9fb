"""The console of a run: optional (a closed pipe never ends it) and quiet (no library chatter)."""

from __future__ import annotations

import logging
import os
import sys
from contextlib import suppress
from typing import IO, Any, cast

from .progress import console_print

# ignite's INFO loggers that name its internals ("Spawn function '<function ...>' in 2 processes",
# the spawn parameters, "Apply torch DistributedDataParallel on model", "End of run")
IGNITE_INFO_LOGGERS = (
    "ignite.distributed.launcher.Parallel",
    "ignite.distributed.auto.auto_model",
    "ignite.distributed.auto.auto_dataloader",
)


def echo(line: str, stream: IO[str] | None = None) -> bool:
    """Print ``line`` to ``stream`` (stdout) above any bar; False when nobody reads it any more (``| head``)."""
    stream = sys.stdout if stream is None else stream
    tolerant = stream if isinstance(stream, _PipeTolerant) else _PipeTolerant(stream)
    console_print(line, cast(IO[str], tolerant))  # the stream's own interface, through __getattr__
    return not tolerant.pipe_closed


class _PipeTolerant:
    """A console stream whose closed pipe is no error: from the first ``BrokenPipeError`` on it is /dev/null."""

    def __init__(self, stream: IO[str], closed: bool = False) -> None:
        self._stream = stream
        self.pipe_closed = closed

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._closed()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._closed()

    def _closed(self) -> None:
        # as Python's documentation advises for SIGPIPE: buffered text, later writes and the flush at exit go nowhere
        self.pipe_closed = True
        with suppress(OSError, ValueError):  # not a file descriptor (a test's StringIO): nothing to redirect
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


# the streams closed when the job started ("stdout,stderr"): the processes it starts later inherit /dev/null there,
# and learn from this variable that nobody reads them
CLOSED_AT_START = "IGNITE_R3NET_CLOSED_CONSOLE"


def tolerate_closed_console() -> None:
    """Make a closed stdout or stderr harmless in this process, the run goes on: a pipe that closes (``| head``)
    or a stream closed from the start (``>&-``, which Python shows as ``sys.stdout is None``)."""
    closed = {name for name in os.environ.get(CLOSED_AT_START, "").split(",") if name}
    for fd, name in ((1, "stdout"), (2, "stderr")):
        stream = getattr(sys, name)
        if stream is None:
            stream = _null_stream(fd)
            closed.add(name)
        if not isinstance(stream, _PipeTolerant):
            setattr(sys, name, _PipeTolerant(stream, closed=name in closed))
    if closed:
        os.environ[CLOSED_AT_START] = ",".join(sorted(closed))


def _null_stream(fd: int) -> IO[str]:
    """/dev/null as the text stream of the closed descriptor ``fd``, and on ``fd`` itself while it is free (inherited
    by the processes started later): else the next file opened would take its number, and they would write into it."""
    try:
        os.fstat(fd)
    except OSError:  # free: /dev/null takes its place
        null = os.open(os.devnull, os.O_WRONLY)
        if null == fd:
            os.set_inheritable(fd, True)  # os.open's descriptors are not (PEP 446); dup2's are
        else:
            os.dup2(null, fd)
            os.close(null)
        return open(fd, "w", closefd=False)  # the console of the process, open until it ends
    return open(os.devnull, "w")  # another file has the number already: left alone


def quiet_library_logs(verbose: bool) -> None:
    """ignite's launcher and DDP messages at WARNING, or at INFO with ``--verbose``, in this process."""
    from ignite.utils import setup_logger

    for name in IGNITE_INFO_LOGGERS:
        setup_logger(name, level=logging.INFO if verbose else logging.WARNING, reset=True)
