"""Where the workers run: how many processes, on which nodes, and where they meet (``LaunchSpec``: the
distribution options read together with what torchrun or srun, seen through the environment, decided)."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ..errors import warn


def started_by_torchrun() -> bool:
    """Whether torchrun's agent started this process (it sets TORCHELASTIC_RUN_ID for its workers)."""
    return "TORCHELASTIC_RUN_ID" in os.environ


def warn_if_restarts_share_a_store() -> None:
    """Warn when torchrun restarts workers with its shared rendezvous store: there, with no per-attempt prefix, a
    restarted group can find a dead peer's address and fail with "Gloo connectFullMesh failed"."""
    env = os.environ
    if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and int(env.get("TORCHELASTIC_MAX_RESTARTS", "0")) > 0:
        if env.get("RANK") == "0" and env.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
            warn(
                "torchrun --max-restarts with its shared rendezvous store: a restarted group can read the dead "
                "attempt's addresses and fail to connect; run torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 "
                "(examples/torchrun_elastic.sh does)"
            )


def rank_set_by_launcher() -> bool:
    """Whether a launcher (torchrun, or another that sets torch's variables) set this process's rank."""
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


_SLURM_REQUIRED = ("SLURM_JOB_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_JOB_NODELIST")


@dataclass(frozen=True)
class SlurmTask:
    """This task of a SLURM job step, as ``srun`` tells it: one rank (one task per GPU) or one node that spawns
    ``--nproc`` workers (``srun --ntasks-per-node 1``); see examples/slurm/train.sbatch."""

    job_id: str
    procid: int  # rank of this task among the step's tasks
    localid: int  # rank of this task on its node
    ntasks: int
    nodelist: str
    nnodes: int  # nodes of the allocation

    @property
    def one_task_per_node(self) -> bool:
        return self.ntasks == self.nnodes


def slurm_task() -> SlurmTask | None:
    """This process's SLURM task, or None outside ``srun`` (or when torchrun set the ranks)."""
    env = os.environ
    if not all(k in env for k in _SLURM_REQUIRED) or started_by_torchrun():
        return None
    return SlurmTask(
        job_id=env["SLURM_JOB_ID"],
        procid=int(env["SLURM_PROCID"]),
        localid=int(env["SLURM_LOCALID"]),
        ntasks=int(env["SLURM_NTASKS"]),
        nodelist=env["SLURM_JOB_NODELIST"],
        nnodes=int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or 1),
    )


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list (``node[03-05,9],gpu1`` -> ``node03``): scontrol's, else ignite's."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=10, check=True
        ).stdout.split()
        if out:
            return out[0]
    except (OSError, subprocess.SubprocessError):
        pass
    # the expansion ignite itself gives SLURM_JOB_NODELIST when it takes the ranks from SLURM
    from ignite.distributed.comp_models.native import _expand_hostlist

    return (_expand_hostlist(nodelist) or [nodelist])[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class LaunchSpec:
    """Where a job's processes run and meet: the distribution options of ``train``, or of a command that spreads
    its work over the processes of one node (``ProcessOptions``)."""

    nproc: int = 1
    backend: str | None = None
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str | None = None  # default: SLURM's first node, else 127.0.0.1
    master_port: int | None = None  # default: derived from SLURM's job id; one node: a free port; else 29500
    dist_timeout: int = 600
    traceback_dir: str | None = None
    verbose: bool = False  # ignite's launcher messages at INFO (else WARNING)
    device: str = "auto"  # --device: auto, cuda or cpu (process_setup.use_device resolves it)

    @property
    def slurm(self) -> SlurmTask | None:
        return None if rank_set_by_launcher() else slurm_task()

    @property
    def world_size(self) -> int:
        """Processes in the job: torchrun's WORLD_SIZE, SLURM's tasks x nproc, else nproc x nnodes."""
        if rank_set_by_launcher():
            return int(os.environ["WORLD_SIZE"])
        return self.node()[1] * self.nproc

    def spawns(self) -> bool:
        if rank_set_by_launcher():
            return False
        if self.slurm is not None:
            return self.nproc > 1  # one task per node: it spawns that node's workers
        return self.nproc * self.nnodes > 1

    def spawns_alone(self) -> bool:
        """Whether this process spawns every worker of the job (a job of one node)."""
        return self.spawns() and self.node()[1] == 1

    @property
    def resolved_backend(self) -> str:
        """``--backend``, else nccl for processes on GPUs, else gloo (``--device cpu`` asks nothing of CUDA)."""
        if self.backend:
            return self.backend
        on_gpus = self.device == "cuda" or (self.device == "auto" and torch.cuda.is_available())
        return "nccl" if on_gpus else "gloo"

    def node(self) -> tuple[int, int]:
        """``(node rank, number of nodes)`` of a spawning process: SLURM's task, else the options."""
        task = self.slurm
        return (task.procid, task.ntasks) if task is not None else (self.node_rank, self.nnodes)

    def joins(self) -> bool:
        """Whether this process is one rank of a group torchrun or srun started."""
        task = self.slurm
        return rank_set_by_launcher() or (task is not None and self.nproc == 1 and task.ntasks > 1)

    def is_leader(self) -> bool:
        """Whether this launching process writes the job's shared files (node 0's, or rank 0's)."""
        task = self.slurm
        return task.procid == 0 if task is not None else self.node_rank == 0 and os.environ.get("RANK", "0") == "0"


@dataclass(frozen=True)
class Endpoint:
    """Where the processes of a job meet, and the ``(setting, origin)`` each part came from, for the messages:
    ``("MASTER_PORT", "the environment")``, ``("--master-port", "")``."""

    addr: str
    port: int
    addr_from: tuple[str, str]
    port_from: tuple[str, str]

    def __str__(self) -> str:
        return f"{self.addr}:{self.port}"

    @property
    def source(self) -> str:
        """``MASTER_ADDR and MASTER_PORT from the environment``, ``--master-addr, --master-port``, ..."""
        (addr, addr_origin), (port, port_origin) = self.addr_from, self.port_from
        if addr_origin and addr_origin == port_origin:
            return f"{addr} and {port} from {addr_origin}"
        return ", ".join(
            f"{what} from {origin}" if origin else what for what, origin in (self.addr_from, self.port_from)
        )


def rendezvous_endpoint(spec: LaunchSpec) -> Endpoint:
    """The options, else the environment (torchrun's, an sbatch script's), else SLURM's, else 127.0.0.1:29500; a
    job of one node meets on a free port of 127.0.0.1."""
    env, task = os.environ, spec.slurm
    origin = "torchrun" if started_by_torchrun() else "the environment"
    if spec.spawns_alone():
        return Endpoint("127.0.0.1", spec.master_port or free_port(), ("this host", ""), ("a free port", ""))
    if spec.master_addr:
        addr, addr_from = spec.master_addr, ("--master-addr", "")
    elif env.get("MASTER_ADDR"):
        addr, addr_from = env["MASTER_ADDR"], ("MASTER_ADDR", origin)
    elif task is not None:
        addr, addr_from = first_host(task.nodelist), ("the first node of SLURM_JOB_NODELIST", "")
    else:
        addr, addr_from = "127.0.0.1", ("the default address", "")
    if spec.master_port:
        port, port_from = spec.master_port, ("--master-port", "")
    elif env.get("MASTER_PORT"):
        port, port_from = int(env["MASTER_PORT"]), ("MASTER_PORT", origin)
    elif task is not None:  # as ignite derives it
        port = 15000 + int(task.job_id[-4:]) if task.job_id[-4:].isdigit() else 29500
        port_from = ("15000 + the last 4 digits of SLURM_JOB_ID", "")
    else:
        port, port_from = 29500, ("the default port", "")
    return Endpoint(addr, port, addr_from, port_from)


@contextmanager
def slurm_hidden_from_children(task: SlurmTask | None) -> Iterator[None]:
    """Spawned workers must not see SLURM's variables: ignite reads any ``SLURM_JOB_ID`` as "ranks come from SLURM"
    and refuses the rank the spawner gives ("Arguments rank and world_size should not be specified with SLURM")."""
    hidden = [k for k in os.environ if k.startswith("SLURM_")] if task is not None else []
    with environment(dict.fromkeys(hidden)):
        yield


@contextmanager
def environment(values: Mapping[str, str | None]) -> Iterator[None]:
    """``values`` (None: unset) in this process's environment, and the processes it starts, for the block."""
    saved = {key: os.environ.get(key) for key in values}
    try:
        _set_environment(values)
        yield
    finally:
        _set_environment(saved)


def _set_environment(values: Mapping[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
