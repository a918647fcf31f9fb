"""SIGTERM and Ctrl-C stop the whole job, its spawned ranks and DataLoader workers included: during a job SIGTERM
becomes ``Terminated`` (a ``KeyboardInterrupt``), handled like Ctrl-C, rather than leave spawned ranks as orphans."""

from __future__ import annotations

import multiprocessing
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import Terminated

_terminating = threading.Event()  # set once this process received SIGTERM: what fails from then on fails for it


def raise_on_sigterm() -> Any:
    """Turn SIGTERM into ``Terminated`` until the returned previous handler is restored."""
    if threading.current_thread() is not threading.main_thread():
        return None
    _terminating.clear()

    def terminate(signum: int, frame: Any) -> None:
        _terminating.set()
        # torchrun, SLURM and systemd signal the DataLoader workers too: they ignore it (init_loader_worker), but one
        # forked just before it could ends by it, and PyTorch's SIGCHLD handler would raise "DataLoader worker ...
        # exited unexpectedly" in place of Terminated (not SIG_DFL: "Signal 17 ignored")
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        raise Terminated()

    return signal.signal(signal.SIGTERM, terminate)


def restore_sigterm(previous: Any) -> None:
    """Put back the handler ``raise_on_sigterm`` replaced (None: none)."""
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def terminating() -> bool:
    return _terminating.is_set()


def raise_if_terminated() -> None:
    """Raise ``Terminated`` after SIGTERM: a handler that ran inside a ``__del__`` or a fork hook could not raise."""
    if _terminating.is_set():
        raise Terminated()


@contextmanager
def threads_leave_signals_to_main() -> Iterator[None]:
    """Threads started in the block (ours, or a library's such as MLflow's) block SIGINT and SIGTERM, so that the
    kernel hands those to the main thread: given to another thread, a signal only sets a flag, and a main thread
    asleep in ``poll()`` (the launcher waiting for its ranks) slept through Ctrl-C. Threads inherit the mask."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def stop_children(grace: float = 5.0) -> None:
    """End the processes this one started (``kill -INT`` reaches only it): SIGTERM, then SIGKILL after ``grace``."""
    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    deadline = time.monotonic() + grace
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            child.kill()
