"""Where the workers run: how many processes, on which nodes, and where they meet.

``LaunchSpec`` holds the distribution options (``--nproc``, ``--nnodes``, ``--master-addr``, ...)
and reads them together with what torchrun or srun already decided for this process.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ..config import TrainConfig
from ..options.shared import ProcessOptions
from .slurm import SlurmTask, slurm_task
from .torchrun import started_by_torchrun


def rank_set_by_launcher() -> bool:
    """True when a launcher already set this process's rank (LOCAL_RANK and WORLD_SIZE): torchrun,
    or another that sets torch's variables. ``torchrun.started_by_torchrun`` asks for torchrun alone."""
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def default_backend(device: str = "auto") -> str:
    """nccl for processes on GPUs (``--device cuda``, or ``auto`` where CUDA is available), else gloo.
    ``--device cpu`` asks nothing of CUDA (``devices.use_device`` hides it)."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return "nccl" if device == "cuda" else "gloo"


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
    verbose: bool = False  # ignite's launcher messages at INFO (else WARNING)
    device: str = "auto"  # --device: auto, cuda or cpu (devices.use_device resolves it)

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
            config.verbose,
            config.device,
        )

    @classmethod
    def on_one_node(cls, processes: ProcessOptions) -> LaunchSpec:
        """The workers of ``evaluate``, ``predict`` or ``compare``: one node; the spawned workers meet
        on a free port unless ``--master-port`` is given, also under srun (SLURM's derived port is the
        training run's; see ``rendezvous_endpoint``), and ranks that torchrun or srun started meet
        where those say."""
        return cls(
            processes.nproc,
            processes.backend,
            master_port=processes.master_port,
            verbose=processes.verbose,
            device=processes.device,
        )

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
        """Whether this process starts worker processes (rather than being, or joining, one)."""
        if rank_set_by_launcher():
            return False
        if self.slurm is not None:
            return self.nproc > 1  # one task per node: it spawns that node's workers
        return self.nproc * self.nnodes > 1

    def spawns_alone(self) -> bool:
        """Whether this process spawns every worker of the job itself (the job has one node)."""
        return self.spawns() and self.node()[1] == 1

    @property
    def resolved_backend(self) -> str:
        """``--backend``, else nccl for processes on GPUs, else gloo."""
        return self.backend or default_backend(self.device)

    def node(self) -> tuple[int, int]:
        """``(node rank, number of nodes)`` of a spawning process: SLURM's task, else the options."""
        task = self.slurm
        return (task.procid, task.ntasks) if task is not None else (self.node_rank, self.nnodes)

    def joins(self) -> bool:
        """Whether this process is one rank of a group another launcher started (torchrun, srun)."""
        task = self.slurm
        return rank_set_by_launcher() or (task is not None and self.nproc == 1 and task.ntasks > 1)

    def is_leader(self) -> bool:
        """Whether this launching process is the one that writes the job's shared files
        (config.json, the run lock, clean-up): node 0's, or the first rank's under torchrun or srun."""
        task = self.slurm
        if task is not None:
            return task.procid == 0
        return self.node_rank == 0 and os.environ.get("RANK", "0") == "0"


@dataclass(frozen=True)
class Endpoint:
    """Where the processes of a job meet (``addr:port``, the TCP store of the rendezvous) and which
    setting each part came from, for the start-up line and the errors: ``(setting, origin)`` such
    as ``("MASTER_PORT", "the environment")`` or ``("--master-port", "")``."""

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
    """The rendezvous of a job whose processes were started separately (torchrun ranks, srun tasks,
    the nodes of a multi-node launch): ``--master-addr`` / ``--master-port``, else ``MASTER_ADDR`` /
    ``MASTER_PORT`` from the environment (what torchrun gives its ranks, and what many sbatch
    scripts export), else SLURM's first node and 15000 + the job id's last digits, else
    127.0.0.1:29500. A job of one node meets on a free port of 127.0.0.1 instead."""
    env, task = os.environ, spec.slurm
    origin = "torchrun" if started_by_torchrun() else "the environment"
    if spec.spawns_alone():
        return Endpoint("127.0.0.1", spec.master_port or free_port(), ("this host", ""), ("a free port", ""))
    if spec.master_addr:
        addr, addr_from = spec.master_addr, ("--master-addr", "")
    elif env.get("MASTER_ADDR"):
        addr, addr_from = env["MASTER_ADDR"], ("MASTER_ADDR", origin)
    elif task is not None:
        addr, addr_from = task.master_addr(), ("the first node of SLURM_JOB_NODELIST", "")
    else:
        addr, addr_from = "127.0.0.1", ("the default address", "")
    if spec.master_port:
        port, port_from = spec.master_port, ("--master-port", "")
    elif env.get("MASTER_PORT"):
        port, port_from = int(env["MASTER_PORT"]), ("MASTER_PORT", origin)
    elif task is not None:
        port, port_from = task.default_port, ("15000 + the last 4 digits of SLURM_JOB_ID", "")
    else:
        port, port_from = 29500, ("the default port", "")
    return Endpoint(addr, port, addr_from, port_from)


def set_rank_variables_from_slurm(task: SlurmTask, endpoint: Endpoint) -> None:
    """torch's rendezvous variables from SLURM's and ``endpoint``, set before joining: ignite then
    checks they agree with SLURM's and uses this address and port."""
    os.environ.update(
        RANK=str(task.procid),
        LOCAL_RANK=str(task.localid),
        WORLD_SIZE=str(task.ntasks),
        MASTER_ADDR=endpoint.addr,
        MASTER_PORT=str(endpoint.port),
    )


@contextmanager
def slurm_hidden_from_children(task: SlurmTask | None) -> Iterator[None]:
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


@contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in this process's environment (and so in the processes it starts) for the block."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
