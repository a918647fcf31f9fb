"""How failures reach the user: every error a user can cause is a ``UserError``, printed as one
``error: ...`` line with its ``exit_code``; anything else is a bug and keeps its traceback."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable
from types import ModuleType


def install_extra(extra: str) -> str:
    """How to add an optional extra: the README installs the package from a clone (it is not on PyPI)."""
    return f'pip install -e ".[{extra}]" in the clone of ignite_r3net'


class UserError(Exception):
    exit_code = 2


class OptionError(UserError):
    """A bad option value or path, or options that cannot work together."""


def optional_module(name: str, missing: str) -> ModuleType:
    """``import name`` for a command that needs an optional extra, else an ``OptionError`` saying ``missing``."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise OptionError(missing) from None


class DataError(UserError):
    """Every problem found in a data set, each naming its file."""

    def __init__(self, problems: str | list[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        if len(self.problems) == 1:
            message = self.problems[0]
        else:
            message = f"{len(self.problems)} data problems:\n" + "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(message)


class CheckpointError(UserError):
    """A checkpoint or weights file could not be written or read; the message names the file."""


class ExportError(UserError):
    """``export`` wrote a file that does not give the PyTorch model's maps (and removed it)."""

    exit_code = 1


class ImagesFailed(UserError):
    """Images ``predict`` could not read, listed (the others' results were written)."""

    exit_code = 1


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: the job is stopped (its ranks too) rather than left running."""


class RendezvousFailed(UserError):
    """The processes of a job did not meet (a peer missing, an unresolved address, a port taken)."""

    exit_code = 1


class RanksDisagree(UserError):
    """The processes of a job have different options or software: all refuse before any work."""


class WorkerFailed(UserError):
    """A worker of a running job failed: one line naming the rank and the cause."""

    exit_code = 1


def error_line(e: BaseException, default: str | None = None) -> str:
    """The first line of ``e``'s message (a DataLoader worker's: the original's); empty: ``default`` or the type."""
    text = str(e).strip()
    if not text:
        return type(e).__name__ if default is None else default
    lines = text.splitlines()
    # PyTorch re-raises an exception from a DataLoader worker as "Caught ..." with the worker's traceback below;
    # the cause a user can act on ("cannot read image X") is the traceback's last line
    if lines[0].startswith("Caught ") and "Original Traceback" in text:
        _, sep, message = lines[-1].partition(": ")  # "package.module.DataError: message"
        return message.strip() if sep else lines[-1].strip()
    return lines[0]


def ending_line(e: BaseException) -> str:
    """The console line of a run ``e`` ended: ``interrupted`` (Ctrl-C), ``terminated`` (SIGTERM) or ``error: ...``."""
    if isinstance(e, KeyboardInterrupt):
        return "terminated" if isinstance(e, Terminated) else "interrupted"
    if isinstance(e, UserError):
        lists_problems = "\n  - " in str(e)  # a data error with one problem per line is shown whole
        return f"error: {e if lists_problems else error_line(e)}"
    return f"error: {type(e).__name__}: {error_line(e)}"


def load_error_reason(e: BaseException) -> str:
    """Why ``torch.load(weights_only=True)`` (or safetensors) refused a file, in words a user can act on."""
    if "global" in str(e).lower():  # "Unsupported global: ...", "unsupported GLOBAL ... is blocked"
        return "it contains pickled objects other than tensors (refused: it could run code)"
    if isinstance(e, (PermissionError, IsADirectoryError, FileNotFoundError, MemoryError)):
        return error_line(e)  # about the file or the machine, not its content
    # anything else is the content (torch's unpickler raises whatever a file's first bytes lead to);
    # torch's own wording advises weights_only=False, which would run any code the file holds
    return "it is not a readable PyTorch file (corrupt, truncated, or another format)"


def listing(names: Iterable[object], limit: int = 20) -> str:
    """The first ``limit`` names, then ``(+N more)``: ``a, b, c (+7 more)``."""
    shown = [str(n) for n in names]
    more = len(shown) - limit
    return ", ".join(shown[:limit]) + (f" (+{more} more)" if more > 0 else "")


def warn(message: str) -> None:
    """A ``warning: ...`` line on stderr: something the user should know that does not stop the work."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


def note(message: str) -> None:
    """A ``note: ...`` line on stderr: a decision taken for the user (e.g. a stale lock taken over)."""
    print(f"note: {message}", file=sys.stderr, flush=True)
