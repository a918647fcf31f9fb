"""``launch(fn, arg, spec)``: run ``fn(local_rank, arg)`` on every worker through ``idist.Parallel``.

It spawns workers, joins the group torchrun or srun set up, or runs ``fn`` in this process, as
``spec`` and the environment say. A failure in any worker becomes one ``WorkerFailed`` line
naming the rank and the cause (the traceback goes to ``<traceback_dir>/error-rank<N>.log``);
spawned siblings are stopped, so the job ends with a non-zero exit code instead of hanging in a
collective.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import TypeVar

import ignite.distributed as idist
import torch

from ..errors import WorkerFailed
from .failures import run_reporting_failures, summarise_spawn_error
from .process_setup import freeze_long_lived_objects, quiet_launcher_logs
from .signals import raise_on_sigterm, restore_sigterm, stop_children
from .topology import (
    LaunchSpec,
    default_backend,
    default_port,
    set_rank_variables_from_slurm,
    slurm_hidden_from_children,
    warn_if_restarts_share_a_store,
)

T = TypeVar("T")


def parallel_for(spec: LaunchSpec) -> idist.Parallel:
    """The ``idist.Parallel`` context matching how this process was started and what was asked."""
    backend = spec.backend or default_backend()
    timeout = datetime.timedelta(seconds=spec.dist_timeout)
    task = spec.slurm
    if spec.joins():
        if task is not None:
            set_rank_variables_from_slurm(task, spec)
        warn_if_restarts_share_a_store()
        return idist.Parallel(backend=backend, timeout=timeout)  # joins: must not spawn
    if spec.spawns():
        return idist.Parallel(
            backend=backend,
            nproc_per_node=spec.nproc,
            nnodes=task.ntasks if task else spec.nnodes,
            node_rank=task.procid if task else spec.node_rank,
            master_addr=spec.master_addr or (task.master_addr() if task else "127.0.0.1"),
            master_port=spec.master_port or (task.default_port if task else default_port(spec.nnodes)),
            timeout=timeout,
        )
    return idist.Parallel(backend=None)


def launch(fn: Callable[[int, T], None], arg: T, spec: LaunchSpec) -> None:
    """Run ``fn(local_rank, arg)`` on every worker; raise ``WorkerFailed`` if any of them failed.

    Raises ``Terminated`` (SIGTERM) or ``KeyboardInterrupt`` (Ctrl-C) after stopping the spawned
    workers."""
    freeze_long_lived_objects()
    quiet_launcher_logs()
    previous = raise_on_sigterm()
    try:
        with parallel_for(spec) as parallel, slurm_hidden_from_children(spec.slurm if spec.spawns() else None):
            parallel.run(run_reporting_failures, fn, arg, spec.traceback_dir, spec.spawns())
    except KeyboardInterrupt:
        stop_children()
        raise
    except WorkerFailed:
        raise
    except (torch.multiprocessing.ProcessRaisedException, torch.multiprocessing.ProcessExitedException) as e:
        raise WorkerFailed(summarise_spawn_error(e)) from None
    finally:
        restore_sigterm(previous)
