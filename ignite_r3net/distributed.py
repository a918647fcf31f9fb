"""Start the workers: spawn, join a torchrun or srun group, or run in-process, all through ``idist.Parallel``.

Every worker runs the same ``fn(local_rank, arg)`` (training and evaluation alike). A failure in
any worker becomes one ``WorkerFailed`` line naming the rank and the cause (the traceback goes to
``<traceback_dir>/error-rank<N>.log``); spawned siblings are stopped, so the job ends with a
non-zero exit code instead of hanging in a collective.
"""

from __future__ import annotations

import datetime
import gc
import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import ignite.distributed as idist
import torch

from .config import TrainConfig
from .errors import Terminated, WorkerFailed, error_line, warn
from .slurm import SlurmTask, slurm_task

T = TypeVar("T")

rank_zero_only = idist.one_rank_only(rank=0)
"""Decorator: run the wrapped function on rank 0 only, the one place rank-0-only work is decided
(files, TensorBoard, the console). Every rank still calls it, so it never hides a collective."""


def under_torchrun() -> bool:
    """True when a launcher such as torchrun already set up this process's rank."""
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def default_backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def free_port() -> int:
    """A TCP port free on this host now, for a rendezvous on one node."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class LaunchSpec:
    """Where and how many workers run: the distribution options of ``TrainConfig`` and ``evaluate``,
    read together with what torchrun or srun already decided for this process."""

    nproc: int = 1
    backend: str | None = None
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str | None = None  # default: SLURM's first node, else 127.0.0.1
    master_port: int | None = None  # default: derived from SLURM's job id; one node: a free port; else 29500
    dist_timeout: int = 600
    traceback_dir: str | None = None

    @classmethod
    def of(cls, config: TrainConfig) -> LaunchSpec:
        return cls(
            config.nproc,
            config.backend,
            config.nnodes,
            config.node_rank,
            config.master_addr,
            config.master_port,
            config.dist_timeout,
            config.output_dir,
        )

    @property
    def slurm(self) -> SlurmTask | None:
        return None if under_torchrun() else slurm_task()

    @property
    def world_size(self) -> int:
        """Processes in the job: torchrun's WORLD_SIZE, SLURM's tasks x nproc, else nproc x nnodes."""
        if under_torchrun():
            return int(os.environ["WORLD_SIZE"])
        task = self.slurm
        return (task.ntasks if task else self.nnodes) * self.nproc

    def spawns(self) -> bool:
        """Whether this process starts worker processes (rather than being, or joining, one)."""
        if under_torchrun():
            return False
        if self.slurm is not None:
            return self.nproc > 1  # one task per node: it spawns that node's workers
        return self.nproc * self.nnodes > 1

    def joins(self) -> bool:
        """Whether this process is one rank of a group another launcher started (torchrun, srun)."""
        task = self.slurm
        return under_torchrun() or (task is not None and self.nproc == 1 and task.ntasks > 1)

    def is_leader(self) -> bool:
        """Whether this launching process is the one that writes the job's shared files
        (config.json, the run lock, clean-up): node 0's, or the first rank's under torchrun or srun."""
        task = self.slurm
        if task is not None:
            return task.procid == 0
        return self.node_rank == 0 and os.environ.get("RANK", "0") == "0"


def parallel_for(spec: LaunchSpec) -> idist.Parallel:
    """The ``idist.Parallel`` context matching how this process was started and what was asked."""
    backend = spec.backend or default_backend()
    timeout = datetime.timedelta(seconds=spec.dist_timeout)
    task = spec.slurm
    if spec.joins():
        if task is not None:
            _set_rank_variables_from_slurm(task, spec)
        _warn_if_restarts_share_a_store()
        return idist.Parallel(backend=backend, timeout=timeout)  # joins: must not spawn
    if spec.spawns():
        return idist.Parallel(
            backend=backend,
            nproc_per_node=spec.nproc,
            nnodes=task.ntasks if task else spec.nnodes,
            node_rank=task.procid if task else spec.node_rank,
            master_addr=spec.master_addr or (task.master_addr() if task else "127.0.0.1"),
            master_port=spec.master_port or (task.default_port if task else _default_port(spec.nnodes)),
            timeout=timeout,
        )
    return idist.Parallel(backend=None)


def _default_port(nnodes: int) -> int:
    """One node: a free port, so that two runs on one host do not both take torch's 29500; several
    nodes started by hand must agree on a port without talking: 29500, as torchrun."""
    return free_port() if nnodes == 1 else 29500


def _warn_if_restarts_share_a_store() -> None:
    """torchrun restarts failed workers (``--max-restarts``) with the same rendezvous store by
    default: its agent creates one TCPStore in the first round and shares it with every later one
    (``DynamicRendezvousHandler``'s TCPStore sharing), and the restarted workers' process group
    reads its peers' addresses from it without a per-attempt prefix. A restarted rank can then read
    the address a dead peer published in the previous attempt and fail with "Gloo connectFullMesh
    failed ... Connection refused" (seen here about one restart in three). torch's opt-out,
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 for the torchrun process, gives each attempt its own store."""
    env = os.environ
    if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and int(env.get("TORCHELASTIC_MAX_RESTARTS", "0")) > 0:
        if env.get("RANK") == "0" and env.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
            warn(
                "torchrun --max-restarts with its shared rendezvous store: a restarted group can read the dead "
                "attempt's addresses and fail to connect; run torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 "
                "(examples/torchrun_elastic.sh does)"
            )


def _set_rank_variables_from_slurm(task: SlurmTask, spec: LaunchSpec) -> None:
    """torch's rendezvous variables from SLURM's (``--master-addr``/``--master-port`` win), set
    before joining: ignite then checks they agree with SLURM's and uses this address and port."""
    os.environ.update(
        RANK=str(task.procid),
        LOCAL_RANK=str(task.localid),
        WORLD_SIZE=str(task.ntasks),
        MASTER_ADDR=spec.master_addr or task.master_addr(),
        MASTER_PORT=str(spec.master_port or task.default_port),
    )


@contextmanager
def _slurm_hidden_from_children(task: SlurmTask | None) -> Iterator[None]:
    """Spawned workers must not see SLURM's variables: ignite's worker set-up reads any
    ``SLURM_JOB_ID`` as "ranks come from SLURM" and refuses the rank the spawner gives it
    (``setup_env_vars``: "Arguments rank and world_size should not be specified with SLURM").
    The children copy the environment when they start, so it is restored right after."""
    if task is None:
        yield
        return
    saved = {k: v for k, v in os.environ.items() if k.startswith("SLURM_")}
    for key in saved:
        del os.environ[key]
    try:
        yield
    finally:
        os.environ.update(saved)


def freeze_long_lived_objects() -> None:
    """Exempt every object alive now from the cyclic garbage collector, for the rest of the process.

    Called once the heavy imports are done, by the launching process and by each worker: torch,
    torchvision and ignite leave about a million objects that live until the process ends. Every
    full collection walks all of them, and the interpreter runs several at shutdown: that alone
    made each process take 1.0-1.3 s to exit here (0.3 s frozen), which every launch paid once per
    process. ``gc.freeze`` is CPython's tool for this; it also keeps forked DataLoader workers from
    copying the pages those objects live on. The collection first leaves only live objects to
    freeze; what the run creates afterwards (the Engine's cycles included) is collected as usual.
    """
    gc.collect()
    gc.freeze()


def launch(fn: Callable[[int, T], None], arg: T, spec: LaunchSpec) -> None:
    """Run ``fn(local_rank, arg)`` on every worker; raise ``WorkerFailed`` if any of them failed."""
    freeze_long_lived_objects()
    _quiet_resource_tracker()
    # "Terminating process N via signal SIGTERM" when a rank fails: our one-line error says why
    logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)
    previous = _raise_on_sigterm()
    try:
        with parallel_for(spec) as parallel, _slurm_hidden_from_children(spec.slurm if spec.spawns() else None):
            parallel.run(_report_failures, fn, arg, spec.traceback_dir, spec.spawns())
    except KeyboardInterrupt:
        _stop_children()
        raise
    except WorkerFailed:
        raise
    except (torch.multiprocessing.ProcessRaisedException, torch.multiprocessing.ProcessExitedException) as e:
        raise WorkerFailed(_summarise_spawn_error(e)) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


_terminating = threading.Event()
"""Set once this process received SIGTERM: what fails from then on fails because of it."""


def _raise_on_sigterm() -> Any:
    """Turn SIGTERM into ``Terminated`` for the duration of the job (by default it would end this
    process at once and leave the spawned ranks training as orphans); returns the old handler.

    The same signal often ends this process's DataLoader workers too: torchrun, SLURM and systemd
    signal a rank's whole process group. PyTorch's DataLoader watches its workers with a SIGCHLD
    handler that raises "DataLoader worker ... is killed by signal: Terminated" wherever the main
    thread is, in a ``finally`` clause or a ``__del__`` as well, so that error would replace
    ``Terminated`` (or print as an ignored exception). Once the job is ending that watch has nothing
    left to report, so the handler replaces it first, with a handler that does nothing rather than
    the default: a SIGCHLD already pending would otherwise raise "Signal 17 ignored due to race
    condition" (Python's word for a pending signal whose Python handler has gone).
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    _terminating.clear()

    def terminate(signum: int, frame: Any) -> None:
        _terminating.set()
        signal.signal(signal.SIGCHLD, _ignore_signal)
        raise Terminated()

    return signal.signal(signal.SIGTERM, terminate)


def _ignore_signal(signum: int, frame: Any) -> None:
    pass


def raise_if_terminated() -> None:
    """Raise ``Terminated`` if this process received SIGTERM during ``launch``. A signal handler
    that runs inside a ``__del__`` or a fork hook cannot raise: Python prints "Exception ignored"
    and goes on, so the training loop checks here too."""
    if _terminating.is_set():
        raise Terminated()


def _quiet_resource_tracker() -> None:
    """When one rank fails, the others are terminated with their DataLoader workers, whose
    semaphores multiprocessing's resource tracker then cleans up with a "leaked semaphore" warning
    after our one-line error. The clean-up is right; the warning is noise. The tracker, started
    later by the first process that needs it, takes its warning filters from the environment."""
    quiet = "ignore:resource_tracker:UserWarning"
    current = os.environ.get("PYTHONWARNINGS", "")
    if quiet not in current.split(","):
        os.environ["PYTHONWARNINGS"] = f"{current},{quiet}" if current else quiet


def _stop_children(grace: float = 5.0) -> None:
    """End the processes this one started (an interrupt that reached only the launching process,
    e.g. ``kill -INT``, would otherwise leave the ranks training): SIGTERM, then SIGKILL."""
    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    deadline = time.monotonic() + grace
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            child.kill()


def _report_failures(
    local_rank: int, fn: Callable[[int, T], None], arg: T, traceback_dir: str | None, spawned: bool = False
) -> None:
    """Worker entry: run ``fn``; on failure keep the traceback in a file and raise one line."""
    if spawned:
        # Ctrl-C reaches the whole process group; the launching process ends the job by
        # terminating its ranks, which would otherwise each print a KeyboardInterrupt traceback
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        fn(local_rank, arg)
        _release_worker_state()
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - every failure must end the job with a clear line
        if isinstance(e, SystemExit) and not e.code:
            raise
        if _terminating.is_set():
            # after SIGTERM (a worker of a torchrun or srun group): a peer or a DataLoader worker
            # that the same signal ended is no failure of this rank; ``Terminated`` may also have
            # been swallowed where Python cannot raise (a fork hook), leaving only this error
            raise Terminated() from None
        rank = idist.get_rank()
        where = _save_traceback(traceback_dir, rank)
        message = _peer_lost_line(error_line(e, default=""))
        raise WorkerFailed(f"rank {rank} failed: {type(e).__name__}: {message}{where}") from None


_PEER_LOST = ("Connection reset by peer", "Connection closed by peer")


def _peer_lost_line(message: str) -> str:
    """gloo's words for a peer that went away (a source path, an address, "GLHF!") in a line that
    says what happened; the traceback file keeps gloo's own."""
    if any(words in message for words in _PEER_LOST):
        return "lost the connection to another rank, which failed or was stopped (its own error says why)"
    return message


def _release_worker_state() -> None:
    """Free what ``fn`` built before ignite destroys the process group, which it does as soon as
    this worker entry returns (``idist.finalize()`` in a spawned worker, ``Parallel.__exit__``
    under torchrun and srun).

    The Engine's handlers form reference cycles that hold the DDP model and the DataLoaders. Left
    to the cyclic garbage collector, they outlive ``destroy_process_group()``: the DDP Reducer keeps
    the gloo ProcessGroup alive, so it is never destroyed and its threads (``pt_gloo_runloop``,
    ``gloo_tcp_loop``) are never joined, and the Reducer itself is freed only by the last
    collection inside ``Py_FinalizeEx``, with the interpreter already being torn down (seen with gdb
    in torchrun workers). Collected here, the group's last reference is the one
    ``destroy_process_group()`` drops: it is destroyed and its threads joined in the main thread
    with the interpreter alive, and the DataLoader iterators shut their workers down normally.
    """
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


def _summarise_spawn_error(e: Exception) -> str:
    rank = getattr(e, "error_index", None)
    text = str(e).strip().splitlines()
    last = text[-1] if text else type(e).__name__
    if "WorkerFailed: " in last:
        return last.split("WorkerFailed: ", 1)[1]
    if isinstance(e, torch.multiprocessing.ProcessExitedException):
        return f"process {rank} exited unexpectedly ({last})"
    return f"process {rank} failed: {last}"
