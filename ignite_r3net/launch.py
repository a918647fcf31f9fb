"""Start the workers: spawn, join a torchrun group, or run in-process, all through ``idist.Parallel``.

Every worker runs the same ``fn(local_rank, config)``. A failure in any worker becomes one
``WorkerFailed`` line naming the rank and the cause (the traceback goes to
``OUTPUT_DIR/error-rank<N>.log``); spawned siblings are stopped, so the job ends with a non-zero
exit code instead of hanging in a collective.
"""

from __future__ import annotations

import datetime
import gc
import os
import sys
import traceback
from pathlib import Path
from typing import Callable

import ignite.distributed as idist
import torch

from .config import TrainConfig


class WorkerFailed(RuntimeError):
    """Raised in the launching process when any worker failed (its own message is already printed)."""


def under_torchrun() -> bool:
    """True when a launcher such as torchrun already set up this process's rank."""
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def default_backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def parallel_for(config: TrainConfig) -> idist.Parallel:
    """The ``idist.Parallel`` context matching how this process was started and what was asked."""
    backend = config.backend or default_backend()
    timeout = datetime.timedelta(seconds=config.dist_timeout)
    if under_torchrun():
        # joining an existing group: Parallel must not spawn
        return idist.Parallel(backend=backend, timeout=timeout)
    if config.world_size > 1:
        return idist.Parallel(
            backend=backend,
            nproc_per_node=config.nproc,
            nnodes=config.nnodes,
            node_rank=config.node_rank,
            master_addr=config.master_addr,
            master_port=config.master_port,
            timeout=timeout,
        )
    return idist.Parallel(backend=None)


def launch(fn: Callable[[int, TrainConfig], None], config: TrainConfig) -> None:
    """Run ``fn`` on every worker; raise ``WorkerFailed`` if any of them failed."""
    try:
        with parallel_for(config) as parallel:
            parallel.run(_report_failures, fn, config)
    except WorkerFailed:
        raise
    except (torch.multiprocessing.ProcessRaisedException, torch.multiprocessing.ProcessExitedException) as e:
        raise WorkerFailed(_summarise_spawn_error(e)) from None


def _report_failures(local_rank: int, fn: Callable[[int, TrainConfig], None], config: TrainConfig) -> None:
    """Worker entry: run ``fn``; on failure print one line, keep the traceback in a file, exit 1."""
    try:
        fn(local_rank, config)
        if idist.get_world_size() > 1:
            _exit_together()
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - every failure must end the job with a clear line
        if isinstance(e, SystemExit) and not e.code:
            raise
        rank = idist.get_rank()
        where = _save_traceback(config.output_dir, rank)
        message = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise WorkerFailed(f"rank {rank} failed: {type(e).__name__}: {message}{where}") from None


def _exit_together() -> None:
    """End a finished worker of a multi-process job: wait for every rank, then leave at once.

    Tearing the process group and DDP down in the interpreter's shutdown sometimes aborts a
    worker in C++ ("terminate called without an active exception") after all work is done, which
    would turn a successful run into a failed job; everything is written and flushed by now.
    """
    gc.collect()  # the Engine's reference cycles hold the DataLoader: free it so its workers stop cleanly
    idist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _save_traceback(output_dir: str, rank: int) -> str:
    try:
        path = Path(output_dir) / f"error-rank{rank}.log"
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
