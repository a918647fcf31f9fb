"""A failed worker becomes one line: ``rank N failed: <type>: <cause>``, its traceback in a file.

``run_reporting_failures`` is the entry every worker runs; the launching process turns what a
spawned worker raised into the error to report with ``spawn_failure``.
"""

from __future__ import annotations

import gc
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import ignite.distributed as idist
import torch

from ..console import tolerate_closed_console
from ..errors import RanksDisagree, Terminated, UserError, WorkerFailed, error_line
from .signals import ignore_interrupts_in_worker, terminating

T = TypeVar("T")

_PEER_LOST = ("Connection reset by peer", "Connection closed by peer")


def run_reporting_failures(
    local_rank: int, fn: Callable[[int, T], None], arg: T, traceback_dir: str | None, spawned: bool = False
) -> None:
    """Worker entry: run ``fn``; on failure keep the traceback in a file and raise one line."""
    if spawned:
        ignore_interrupts_in_worker()
    tolerate_closed_console()  # a spawned worker's streams are new ones
    try:
        fn(local_rank, arg)
        _release_worker_state()
    except (KeyboardInterrupt, RanksDisagree):
        raise  # a refusal every rank makes alike, before any work: no rank failed
    except BaseException as e:  # noqa: BLE001 - every failure must end the job with a clear line
        if isinstance(e, SystemExit) and not e.code:
            raise
        if terminating():
            # after SIGTERM, a peer or DataLoader worker that the same signal ended is no failure
            # of this rank (and ``Terminated`` may have been swallowed in a fork hook)
            raise Terminated() from None
        rank = idist.get_rank()
        where = _save_traceback(traceback_dir, rank)
        message = _peer_lost_line(error_line(e, default=""))
        raise WorkerFailed(f"rank {rank} failed: {type(e).__name__}: {message}{where}") from None


def _peer_lost_line(message: str) -> str:
    """gloo's words for a peer that went away, as a line that says what happened; the traceback
    file keeps gloo's own."""
    if any(words in message for words in _PEER_LOST):
        return "lost the connection to another rank, which failed or was stopped (its own error says why)"
    return message


def _release_worker_state() -> None:
    """Collect what ``fn`` built before ignite destroys the process group (right after this entry
    returns). The Engine's handler cycles hold the DDP model, whose Reducer keeps the gloo group
    alive: left to the collector, the group is never destroyed and its threads are torn down with
    the interpreter."""
    gc.collect()


def _save_traceback(folder: str | None, rank: int) -> str:
    if folder is None:
        return ""
    try:
        path = Path(folder) / f"error-rank{rank}.log"
        path.write_text(traceback.format_exc(), encoding="utf-8")
        return f" (traceback in {path})"
    except OSError:
        return ""


def spawn_failure(e: Exception) -> UserError:
    """The error a spawned worker's failure is reported as, from the exception torch's spawn
    re-raised (which holds the worker's traceback as text)."""
    rank = getattr(e, "error_index", None)
    text = str(e).strip().splitlines()
    last = text[-1] if text else type(e).__name__
    for kind in (WorkerFailed, RanksDisagree):
        if f"{kind.__name__}: " in last:
            return kind(last.split(f"{kind.__name__}: ", 1)[1])
    if isinstance(e, torch.multiprocessing.ProcessExitedException):
        return WorkerFailed(f"process {rank} exited unexpectedly ({last})")
    return WorkerFailed(f"process {rank} failed: {last}")
