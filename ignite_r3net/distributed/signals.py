"""SIGTERM and Ctrl-C stop the whole job, its spawned ranks and DataLoader workers included.

By default SIGTERM ends the launching process at once and leaves spawned ranks training as orphans; during a
job it becomes ``Terminated`` (a ``KeyboardInterrupt``), handled like Ctrl-C.
"""

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
    """Turn SIGTERM into ``Terminated`` until the returned previous handler is restored.

    torchrun, SLURM and systemd signal a rank's DataLoader workers too. PyTorch's SIGCHLD handler would then raise
    "DataLoader worker ... killed by signal" wherever the main thread is (a ``finally``, a ``__del__``) in place of
    ``Terminated``, so SIGCHLD is given a handler that does nothing first (not SIG_DFL: a pending SIGCHLD would
    print "Signal 17 ignored")."""
    if threading.current_thread() is not threading.main_thread():
        return None
    _terminating.clear()

    def terminate(signum: int, frame: Any) -> None:
        _terminating.set()
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        raise Terminated()

    return signal.signal(signal.SIGTERM, terminate)


def restore_sigterm(previous: Any) -> None:
    """Put back the SIGTERM handler ``raise_on_sigterm`` replaced (None: it replaced none)."""
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def terminating() -> bool:
    return _terminating.is_set()


def raise_if_terminated() -> None:
    """Raise ``Terminated`` if this process received SIGTERM during the job. A signal handler that runs inside a
    ``__del__`` or a fork hook cannot raise (Python prints "Exception ignored"), so the training loop checks here."""
    if _terminating.is_set():
        raise Terminated()


def ignore_interrupts_in_worker() -> None:
    """Ctrl-C reaches the whole process group; the launching process ends the job by terminating its spawned
    ranks, which would otherwise each print a KeyboardInterrupt traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def threads_leave_signals_to_main() -> Iterator[None]:
    """Threads started in the block (ours, or a library's such as MLflow's) block SIGINT and SIGTERM, so that the
    kernel hands those to the main thread. Linux gives a process's signal to any thread that does not block it;
    Python's handler then only sets a flag that the main thread reads when it next runs Python code, and a main
    thread asleep in ``poll()`` (the launcher waiting for its ranks) slept through Ctrl-C. A new thread inherits
    the mask of the thread that starts it."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def stop_children(grace: float = 5.0) -> None:
    """End the processes this one started with SIGTERM, then SIGKILL after ``grace`` seconds (an interrupt that
    reached only the launching process, e.g. ``kill -INT``, would otherwise leave the ranks training)."""
    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    deadline = time.monotonic() + grace
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            child.kill()
