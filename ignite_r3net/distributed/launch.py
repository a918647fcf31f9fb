"""``launch(fn, arg, spec)``: run ``fn(local_rank, arg)`` on every worker of the job, spawned through
``idist.Parallel``, as one rank of a group torchrun or srun started, or in this process."""

from __future__ import annotations

import datetime
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import ignite.distributed as idist
import torch

from ..console import quiet_library_logs
from ..errors import UserError, WorkerFailed
from .failures import publish_quietly, run_reporting_failures, spawn_failure
from .process_setup import freeze_long_lived_objects, local_rank_on_its_gpu, quiet_launcher_logs
from .rendezvous import Meeting, meet
from .signals import raise_on_sigterm, restore_sigterm, stop_children
from .topology import (
    LaunchSpec,
    environment,
    rendezvous_endpoint,
    slurm_hidden_from_children,
    started_by_torchrun,
    warn_if_restarts_share_a_store,
)

T = TypeVar("T")

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
    """Run ``fn(local_rank, arg)`` on every worker. Raises ``WorkerFailed`` (traceback in ``<traceback_dir>``),
    ``Terminated``, ``KeyboardInterrupt``, ``RendezvousFailed`` or ``RanksDisagree``."""
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
    if store is None or not isinstance(failure, WorkerFailed):
        return failure
    return WorkerFailed(publish_quietly(store, str(failure), spec.world_size - 1))


@contextmanager
def joined_group(spec: LaunchSpec) -> Iterator[None]:
    """This process as one rank of a job whose ranks were started separately: meet, form the group with
    ``--dist-timeout`` (ignite's ``Parallel`` would wait c10d's 30 minutes), and destroy it at the end."""
    backend = spec.resolved_backend
    endpoint = rendezvous_endpoint(spec)
    task = spec.slurm
    if task is not None:  # torch's variables from SLURM's
        os.environ.update(RANK=str(task.procid), LOCAL_RANK=str(task.localid), WORLD_SIZE=str(task.ntasks))
        os.environ.update(MASTER_ADDR=endpoint.addr, MASTER_PORT=str(endpoint.port))
    local_rank_on_its_gpu()
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    alike = {"WORLD_SIZE": str(world_size), "--backend": backend}
    torchrun = started_by_torchrun()
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
    backend = spec.resolved_backend
    alike = {"--nproc": str(spec.nproc), "--nnodes": str(nnodes), "--backend": backend}
    meeting = Meeting(
        "node", node_rank, nnodes, rendezvous_endpoint(spec), backend, spec.world_size, spec.dist_timeout, alike
    )
    store = meet(meeting)
    try:
        with environment(_USE_MEETING_STORE):
            yield store
    finally:
        del store
