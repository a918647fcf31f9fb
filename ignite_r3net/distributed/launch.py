"""``launch(fn, arg, spec)``: run ``fn(local_rank, arg)`` on every worker of the job (spawned through
``idist.Parallel``, as one rank of a group torchrun or srun started, or in this process), and when one fails, end
every rank, on every node, with one line: ``rank N failed on HOST: <type>: <cause>`` (its traceback in a file).
A rank blocked in a collective may not notice that a peer died (NCCL waits until ``--dist-timeout``, then aborts
without a line), so the first rank that fails writes its line into the job's TCP store and a thread of every rank
watches it: a rank that finds a line aborts its process group (NCCL's collectives then fail and the main thread
reports the line) and ends its process if the main thread is still blocked ``GRACE_S`` later (gloo's waits, a store
wait: nothing another thread can interrupt)."""

from __future__ import annotations

import datetime
import gc
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import ignite.distributed as idist
import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from ..console import quiet_library_logs, tolerate_closed_console
from ..errors import RanksDisagree, Terminated, UserError, WorkerFailed, error_line
from .process_setup import freeze_long_lived_objects, local_rank_on_its_gpu, quiet_launcher_logs
from .rendezvous import Meeting, meet, wait_for_readers
from .signals import raise_on_sigterm, restore_sigterm, stop_children, terminating, threads_leave_signals_to_main
from .topology import (
    LaunchSpec,
    environment,
    rendezvous_endpoint,
    slurm_hidden_from_children,
    started_by_torchrun,
    warn_if_restarts_share_a_store,
)

T = TypeVar("T")

POLL_S = 1.0  # how often a rank reads the store; every rank adds one request per period
GRACE_S = 10.0  # how long the main thread has to end by itself once the failure is known
SEEN_WAIT_S = 5.0  # how long the failed process keeps the store for the others to read its line
CHILDREN_GRACE_S = 0.0  # DataLoader workers of a process that must end: they ignore SIGTERM, so SIGKILL at once

# gloo's and NCCL's words for a peer that went away
_PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "remote process exited")
# c10d's processes use the rendezvous's store, as torchrun's workers their agent's (see _create_c10d_store)
_USE_MEETING_STORE = {"TORCHELASTIC_USE_AGENT_STORE": "True"}


def parallel_for(spec: LaunchSpec) -> idist.Parallel:
    """The ``idist.Parallel`` that spawns this node's workers, or runs ``fn`` in this process."""
    if not spec.spawns():
        return idist.Parallel(backend=None)
    endpoint = rendezvous_endpoint(spec)
    node_rank, nnodes = spec.node()
    return idist.Parallel(
        backend=spec.resolved_backend,
        nproc_per_node=spec.nproc,
        nnodes=nnodes,
        node_rank=node_rank,
        master_addr=endpoint.addr,
        master_port=endpoint.port,
        timeout=datetime.timedelta(seconds=spec.dist_timeout),
    )


def launch(fn: Callable[[int, T], None], arg: T, spec: LaunchSpec) -> None:
    """Run ``fn(local_rank, arg)`` on every worker. Raises ``WorkerFailed`` (traceback in
    ``<traceback_dir>/error-rank<N>.log``), ``Terminated`` or ``KeyboardInterrupt`` (the spawned workers stopped),
    ``RendezvousFailed`` or ``RanksDisagree``."""
    freeze_long_lived_objects()
    quiet_launcher_logs()
    quiet_library_logs(spec.verbose)  # ignite's launcher names our functions and its parameters
    previous = raise_on_sigterm()
    try:
        if spec.joins():
            with joined_group(spec):
                run_reporting_failures(idist.get_local_rank(), fn, arg, spec.traceback_dir)
            return
        children = spec.slurm if spec.spawns() else None
        with nodes_met(spec) as store, parallel_for(spec) as parallel, slurm_hidden_from_children(children):
            try:
                parallel.run(run_reporting_failures, fn, arg, spec.traceback_dir, spec.spawns())
            except (torch.multiprocessing.ProcessRaisedException, torch.multiprocessing.ProcessExitedException) as e:
                raise _job_failure(spawn_failure(e, spec.node()[0] * spec.nproc), store, spec) from None
    except KeyboardInterrupt:
        stop_children()
        raise
    finally:
        restore_sigterm(previous)


def _job_failure(failure: UserError, store: object | None, spec: LaunchSpec) -> UserError:
    """The job's first failure as a multi-node job's store records it (this node's worker may have ended for
    another node's), else ``failure``, announced here to the other nodes (a worker may die without a word)."""
    if store is not None and isinstance(failure, WorkerFailed):
        return WorkerFailed(publish_quietly(store, str(failure), spec.world_size - 1))
    return failure


@contextmanager
def joined_group(spec: LaunchSpec) -> Iterator[None]:
    """This process as one rank of a job whose ranks were started separately: meet, form the group with
    ``--dist-timeout`` (ignite's ``Parallel`` would wait c10d's 30 minutes), and destroy it at the end."""
    backend, endpoint = spec.resolved_backend, rendezvous_endpoint(spec)
    if (task := spec.slurm) is not None:  # torch's variables from SLURM's
        os.environ.update(RANK=str(task.procid), LOCAL_RANK=str(task.localid), WORLD_SIZE=str(task.ntasks))
        os.environ.update(MASTER_ADDR=endpoint.addr, MASTER_PORT=str(endpoint.port))
    local_rank_on_its_gpu()
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torchrun = started_by_torchrun()
    alike = {"WORLD_SIZE": str(world_size), "--backend": backend}
    meeting = Meeting("rank", rank, world_size, endpoint, backend, world_size, spec.dist_timeout, alike, torchrun)
    if torchrun:
        # torchrun's agents have met already and started every rank together: c10d's wait is short
        print(meeting.announce(), file=sys.stderr, flush=True)
        warn_if_restarts_share_a_store()
        store, variables = None, {}
    else:
        # c10d reads the address from the environment, which the options may have overridden
        store = meet(meeting)
        variables = {**_USE_MEETING_STORE, "MASTER_ADDR": endpoint.addr, "MASTER_PORT": str(endpoint.port)}
    with environment(variables):
        idist.initialize(backend, timeout=datetime.timedelta(seconds=spec.dist_timeout))
        try:
            yield
        finally:
            idist.finalize()
            del store  # served by rank 0: it must outlive the group


@contextmanager
def nodes_met(spec: LaunchSpec) -> Iterator[object | None]:
    """The nodes of a multi-node launch meet before spawning; the block gets node 0's store (None on one node)."""
    if not spec.spawns() or spec.spawns_alone():
        yield None
        return
    node_rank, nnodes = spec.node()
    backend, endpoint = spec.resolved_backend, rendezvous_endpoint(spec)
    alike = {"--nproc": str(spec.nproc), "--nnodes": str(nnodes), "--backend": backend}
    store = meet(Meeting("node", node_rank, nnodes, endpoint, backend, spec.world_size, spec.dist_timeout, alike))
    try:
        with environment(_USE_MEETING_STORE):
            yield store
    finally:
        del store


# a worker's failure, as one line


def run_reporting_failures(
    local_rank: int, fn: Callable[[int, T], None], arg: T, traceback_dir: str | None, spawned: bool = False
) -> None:
    """Worker entry: run ``fn``; on failure keep the traceback in a file and raise one line."""
    if spawned:  # Ctrl-C reaches every process: the launcher ends the spawned ranks, else each prints a traceback
        signal.signal(signal.SIGINT, signal.SIG_IGN)
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
    # collect what fn built before ignite destroys the group: the Engine's handler cycles hold the DDP model, whose
    # Reducer would keep the gloo group alive, never destroyed
    gc.collect()


def _failure(e: BaseException, traceback_dir: str | None, watch: FailureWatch | None) -> BaseException:
    """``Terminated`` after SIGTERM, else ``WorkerFailed`` with the job's line (another rank's, if it failed first)."""
    if terminating():
        # a peer the same signal ended (Terminated may have been swallowed in a fork hook)
        return Terminated()
    rank = idist.get_rank()
    where = _save_traceback(traceback_dir, rank, e)
    peer = watch.peer_failure() if watch is not None else None
    if peer is not None:  # what this rank met (a lost peer, an aborted group) follows from it
        return WorkerFailed(peer)
    # the backend's words for a peer whose process went away (killed, or ended by a failure), in ours
    lost = isinstance(e, dist.DistNetworkError) or any(words in error_line(e, default="") for words in _PEER_LOST)
    cause = "lost the connection to another rank, which failed or was stopped (its own error says why)"
    line = f"rank {rank} failed on {socket.gethostname()}: {type(e).__name__}: "
    line += f"{cause if lost else error_line(e, default='')}{where}"
    return WorkerFailed(watch.report(line, lost) if watch is not None else line)


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
    """The error for what torch's spawn re-raised (the worker's traceback as text); ``first_rank``: this node's."""
    rank = first_rank + getattr(e, "error_index", 0)
    who = f"rank {rank} failed on {socket.gethostname()}"
    text = str(e).strip().splitlines()
    last = text[-1] if text else type(e).__name__
    for kind in (WorkerFailed, RanksDisagree):
        if f"{kind.__name__}: " in last:
            return kind(last.split(f"{kind.__name__}: ", 1)[1])
    if isinstance(e, torch.multiprocessing.ProcessExitedException):
        # killed without a word (SIGKILL, the kernel's out-of-memory killer): torch says how
        return WorkerFailed(f"{who}: its process exited unexpectedly ({last})")
    return WorkerFailed(f"{who}: {last}")


# the board: the job's first failure line in its store, and the thread of every rank that watches it


def _key(name: str) -> str:
    # torchrun's agent keeps its store across restarts: an attempt must not read the failure that ended the last
    return f"ignite_r3net/failure/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{name}"


def published(store: Any) -> str | None:
    """The line of the job's first failure, or None while no process failed."""
    return bytes(store.get(_key("line"))).decode() if store.check([_key("line")]) else None


def publish(store: Any, line: str, readers: int) -> str:
    """Record ``line`` as the job's failure unless another process did first; return the job's line."""
    first = bytes(store.compare_set(_key("line"), "", line)).decode()
    if first == line:  # this process may serve the store
        wait_for_readers(store, _key("seen"), readers, SEEN_WAIT_S)
    return first


def publish_quietly(store: Any, line: str, readers: int) -> str:
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
        """Another rank's failure line, if one is published."""
        if self.failure is None:
            try:
                line = published(self._store)
            except dist.DistError:
                return None
            if line is not None:
                self._read(line)
        return self.failure

    def report(self, line: str, lost_a_peer: bool = False) -> str:
        """Publish this rank's failure ``line``; return the job's (an earlier one may have won). A rank that lost a
        peer waits for one reader less: the peer's process is gone, and a wait for it lasted all of ``SEEN_WAIT_S``
        (5 s more before a 2-process job ended, or before torchrun restarted an elastic job's survivor)."""
        first = publish_quietly(self._store, line, max(0, self._readers - 1) if lost_a_peer else self._readers)
        if first != line:
            self._read(first)
        return first

    def _read(self, line: str) -> None:
        # keep the job's failure line and tell its publisher, once, that this rank has read it
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
                self._read(line)
                try:  # NCCL's collectives then fail in the main thread (gloo ignores it); ignite destroys the group
                    distributed_c10d._get_default_group().abort()
                except (RuntimeError, ValueError):
                    pass  # no group, or none left to abort
                if not self._main_left.wait(GRACE_S):
                    _end_process(line, print_line=not self._spawned)
                return


def _end_process(line: str, print_line: bool) -> None:
    """End this process and its DataLoader workers with ``line`` (printed unless a launcher of ours reports it): the
    package's one hard exit, for a main thread blocked in C++ (gloo, a store wait, a CUDA sync)."""
    if print_line:
        print(f"error: {line}", file=sys.stderr, flush=True)
    stop_children(CHILDREN_GRACE_S)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


@contextmanager
def watching_for_failures(spawned: bool) -> Iterator[FailureWatch | None]:
    """A ``FailureWatch`` over this process's group for the block (None for a single process)."""
    # the group's TCP store, unprefixed: the launcher of a multi-node job reads it too
    store = distributed_c10d._get_default_store() if dist.is_available() and dist.is_initialized() else None
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    if not isinstance(store, dist.TCPStore) or dist.get_world_size() < 2:
        yield None
        return
    watch = FailureWatch(store, dist.get_world_size() - 1, spawned)
    try:
        yield watch
    finally:
        watch.stop()
