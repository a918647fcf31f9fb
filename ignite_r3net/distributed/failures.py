"""A failed worker becomes one line, ``rank N failed on HOST: <type>: <cause>``, with its traceback in a file;
every other rank of the job ends with the same line, which travels through the job's store
(``failure_board``), not through the collective they may be blocked in.
"""

from __future__ import annotations

import gc
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import ignite.distributed as idist
import torch
import torch.distributed as dist

from ..console import tolerate_closed_console
from ..errors import RanksDisagree, Terminated, UserError, WorkerFailed, error_line
from .failure_board import FailureWatch, host, watching_for_failures
from .signals import ignore_interrupts_in_worker, terminating

T = TypeVar("T")

# gloo's and NCCL's words for a peer that went away
_PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "remote process exited")


def run_reporting_failures(
    local_rank: int, fn: Callable[[int, T], None], arg: T, traceback_dir: str | None, spawned: bool = False
) -> None:
    """Worker entry: run ``fn``; on failure keep the traceback in a file and raise one line."""
    if spawned:
        ignore_interrupts_in_worker()
    tolerate_closed_console()  # a spawned worker's streams are new ones
    with watching_for_failures(spawned) as watch:
        try:
            fn(local_rank, arg)
        except (KeyboardInterrupt, RanksDisagree):
            raise  # a refusal every rank makes alike, before any work: no rank failed
        except BaseException as e:  # noqa: BLE001 - every failure must end the job with a clear line
            if watch is not None:
                watch.main_left()  # this thread is not blocked: the watch must not end the process
            if isinstance(e, SystemExit) and not e.code:
                raise
            raise _failure(e, traceback_dir, watch) from None
    # collect what fn built before ignite destroys the process group (right after this returns): the Engine's
    # handler cycles hold the DDP model, whose Reducer keeps the gloo group alive; left to the collector, the
    # group is never destroyed and its threads are torn down with the interpreter
    gc.collect()


def _failure(e: BaseException, traceback_dir: str | None, watch: FailureWatch | None) -> BaseException:
    """``Terminated`` after SIGTERM, else ``WorkerFailed`` with the job's line (another rank's, if it failed first)."""
    if terminating():
        # after SIGTERM, a peer or DataLoader worker that the same signal ended is no failure
        # of this rank (and ``Terminated`` may have been swallowed in a fork hook)
        return Terminated()
    rank = idist.get_rank()
    where = _save_traceback(traceback_dir, rank, e)
    peer = watch.peer_failure() if watch is not None else None
    if peer is not None:  # what this rank met (a lost peer, an aborted group) follows from it
        return WorkerFailed(peer)
    line = f"rank {rank} failed on {host()}: {type(e).__name__}: {_peer_lost_line(e)}{where}"
    return WorkerFailed(watch.report(line) if watch is not None else line)


def _peer_lost_line(e: BaseException) -> str:
    """The cause of ``e`` in one line; a lost peer (killed, or its node lost: no rank published why) in words that
    say so, whatever the backend's (the traceback file keeps those)."""
    message = error_line(e, default="")
    if isinstance(e, dist.DistNetworkError) or any(words in message for words in _PEER_LOST):
        return "lost the connection to another rank, which failed or was stopped (its own error says why)"
    return message


def _save_traceback(folder: str | None, rank: int, e: BaseException) -> str:
    if folder is None:
        return ""
    try:
        path = Path(folder) / f"error-rank{rank}.log"
        path.write_text("".join(traceback.format_exception(e)), encoding="utf-8")
        return f" (traceback in {path})"
    except OSError:
        return ""


def spawn_failure(e: Exception, first_rank: int = 0) -> UserError:
    """The error a spawned worker's failure is reported as, from the exception torch's spawn re-raised (the
    worker's traceback as text); ``first_rank``: the rank of this node's first worker."""
    rank = first_rank + getattr(e, "error_index", 0)
    text = str(e).strip().splitlines()
    last = text[-1] if text else type(e).__name__
    for kind in (WorkerFailed, RanksDisagree):
        if f"{kind.__name__}: " in last:
            return kind(last.split(f"{kind.__name__}: ", 1)[1])
    if isinstance(e, torch.multiprocessing.ProcessExitedException):
        # killed without a word (SIGKILL, the kernel's out-of-memory killer): torch says how
        return WorkerFailed(f"rank {rank} failed on {host()}: its process exited unexpectedly ({last})")
    return WorkerFailed(f"rank {rank} failed on {host()}: {last}")
