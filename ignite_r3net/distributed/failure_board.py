"""A rank that fails tells every rank of the job, on every node, through the job's store.

A rank blocked in a collective does not always notice that a peer died: NCCL's kernel waits for a peer on another
node until the watchdog aborts the process at ``--dist-timeout``, with no line. So the first rank that fails writes
its line into the TCP store the job's processes share (node 0's launcher's, torchrun's agent's, or rank 0's), a
channel apart from the collective, and a thread of every rank watches it. A rank that finds a line there aborts its
process group, which ends NCCL's collectives with an error so that the main thread reports the line as its own
failure; a main thread still blocked ``GRACE_S`` later (gloo's waits, a store wait: nothing another thread can
interrupt) ends with the process.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch.distributed as dist
from torch.distributed import distributed_c10d

from .signals import stop_children, threads_leave_signals_to_main

POLL_S = 1.0  # how often a rank reads the store; every rank adds one request per period
GRACE_S = 10.0  # how long the main thread has to end by itself once the failure is known
SEEN_WAIT_S = 5.0  # how long the failed process keeps the store for the others to read its line
CHILDREN_GRACE_S = 2.0  # DataLoader workers of a process that must end: SIGTERM, then SIGKILL


def host() -> str:  # as the failure line names this machine
    return socket.gethostname()


def _key(name: str) -> str:
    # torchrun's agent keeps its store across restarts (--max-restarts): an attempt must not read
    # the failure that ended the one before it
    return f"ignite_r3net/failure/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{name}"


def job_store() -> Any | None:
    """The TCP store of this process's group, unprefixed (the launcher of a multi-node job reads it too); None
    outside a process group or for a group formed on another kind of store."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    store = distributed_c10d._get_default_store()
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    return store if isinstance(store, dist.TCPStore) else None


def published(store: Any) -> str | None:
    """The line of the job's first failure, or None while no process failed."""
    if not store.check([_key("line")]):
        return None
    return bytes(store.get(_key("line"))).decode()


def publish(store: Any, line: str, readers: int) -> str:
    """Record ``line`` as the job's failure unless another process recorded one first; return the line the job
    ends with. This process may serve the store (rank 0, node 0's launcher), so the first to publish keeps it up
    until the ``readers`` others have read the line, ``SEEN_WAIT_S`` at most (a dead rank never reads)."""
    first = bytes(store.compare_set(_key("line"), "", line)).decode()
    if first == line:
        deadline = time.monotonic() + SEEN_WAIT_S
        while store.add(_key("seen"), 0) < readers and time.monotonic() < deadline:
            time.sleep(0.05)
    return first


def publish_quietly(store: Any | None, line: str, readers: int) -> str:
    """``publish``, or ``line`` itself where there is no store or it is gone."""
    if store is None:
        return line
    try:
        return publish(store, line, readers)
    except dist.DistError:
        return line


class FailureWatch:
    """A thread that reads the job's store every ``POLL_S`` for another rank's failure and ends this process."""

    def __init__(self, store: Any, readers: int, spawned: bool) -> None:
        self._store = store.clone()  # its own connection: the main thread may block in the store
        self._readers = readers
        self._spawned = spawned
        self._main_left = threading.Event()
        self._lock = threading.Lock()
        self.failure: str | None = None
        with threads_leave_signals_to_main():
            self._thread = threading.Thread(target=self._watch, name="failure-watch", daemon=True)
            self._thread.start()

    def main_left(self) -> None:  # the main thread returned or raised: the watch stops
        self._main_left.set()

    def stop(self) -> None:
        self.main_left()
        self._thread.join(POLL_S + 1.0)

    def peer_failure(self) -> str | None:
        """Another rank's failure line, if one is published (this rank read it, or reads it now)."""
        if self.failure is None:
            try:
                line = published(self._store)
            except dist.DistError:
                return None
            if line is not None:
                self._read(line)
        return self.failure

    def report(self, line: str) -> str:
        """Publish this rank's failure ``line``; return the job's (an earlier one may have won)."""
        first = publish_quietly(self._store, line, self._readers)
        if first != line:
            self._read(first)
        return first

    def _read(self, line: str) -> None:
        """Keep the job's failure ``line`` and tell its publisher this rank has read it (once)."""
        with self._lock:
            if self.failure is not None:
                return
            self.failure = line
        try:
            self._store.add(_key("seen"), 1)
        except dist.DistError:
            pass

    def _watch(self) -> None:
        while not self._main_left.wait(POLL_S):
            try:
                line = published(self._store)
            except dist.DistError:
                return  # the store's process ended: the job is over or ends by itself
            if self._main_left.is_set():
                return  # the line may be this rank's own, published after its main thread left
            if line is not None:
                self._end_for(line)
                return

    def _end_for(self, line: str) -> None:
        self._read(line)
        _abort_group()
        if not self._main_left.wait(GRACE_S):
            _end_process(line, print_line=not self._spawned)


def _abort_group() -> None:
    """Abort the default group's communicators: NCCL's collectives then end with an error in the main thread
    (gloo ignores it). The group stays registered, for ignite's clean-up to destroy."""
    try:
        distributed_c10d._get_default_group().abort()
    except (RuntimeError, ValueError):
        pass  # no group, or none left to abort


def _end_process(line: str, print_line: bool) -> None:
    """End this process and its DataLoader workers with the job's failure ``line`` (printed here unless a launcher
    of ours reports it).

    The one hard exit of the package. Its cause: the main thread is blocked in C++ (gloo waiting for a dead peer
    until --dist-timeout, a store wait, a CUDA sync) and no thread can interrupt that: a signal's Python handler
    runs only once the call returns, and an exception can only be raised in the main thread between bytecodes."""
    if print_line:
        print(f"error: {line}", file=sys.stderr, flush=True)
    stop_children(CHILDREN_GRACE_S)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


@contextmanager
def watching_for_failures(spawned: bool) -> Iterator[FailureWatch | None]:
    """A ``FailureWatch`` over this process's group for the block (None outside a group of several processes)."""
    store = job_store()
    if store is None or dist.get_world_size() < 2:
        yield None
        return
    watch = FailureWatch(store, dist.get_world_size() - 1, spawned)
    try:
        yield watch
    finally:
        watch.stop()
