"""Where the workers run: how many processes, on which nodes, and where they meet (``LaunchSpec``:
the distribution options read together with what torchrun or srun decided for this process)."""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ..config import TrainConfig
from ..options.commands import ProcessOptions
from .slurm import SlurmTask, slurm_task
from .torchrun import started_by_torchrun


def rank_set_by_launcher() -> bool:
    """Whether a launcher (torchrun, or another that sets torch's variables) set this process's rank."""
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class LaunchSpec:
    """The distribution options of ``TrainConfig`` or of ``ProcessOptions``."""

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
        # every field but traceback_dir is the option of the same name
        same = [f.name for f in dataclasses.fields(cls) if f.name != "traceback_dir"]
        return cls(**{name: getattr(config, name) for name in same}, traceback_dir=config.output_dir)

    @classmethod
    def on_one_node(cls, processes: ProcessOptions) -> LaunchSpec:
        """The workers of ``evaluate``, ``predict`` or ``compare``, on one node: spawned ones meet on a
        free port unless ``--master-port`` is given, also under srun (SLURM's derived port is the
        training run's)."""
        return cls(**dataclasses.asdict(processes))  # its fields are some of ours

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
    """Where the processes of a job meet (the rendezvous's TCP store) and the ``(setting, origin)`` each
    part came from, for the messages: ``("MASTER_PORT", "the environment")``, ``("--master-port", "")``."""

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
    """The rendezvous of a job: ``--master-addr`` / ``--master-port``, else ``MASTER_ADDR`` /
    ``MASTER_PORT`` (torchrun's, or an sbatch script's), else SLURM's first node and 15000 + the job
    id's last digits, else 127.0.0.1:29500; a job of one node meets on a free port of 127.0.0.1."""
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
    """torch's rendezvous variables from SLURM's and ``endpoint``, set before joining."""
    os.environ.update(
        RANK=str(task.procid),
        LOCAL_RANK=str(task.localid),
        WORLD_SIZE=str(task.ntasks),
        MASTER_ADDR=endpoint.addr,
        MASTER_PORT=str(endpoint.port),
    )


@contextmanager
def slurm_hidden_from_children(task: SlurmTask | None) -> Iterator[None]:
    """Spawned workers must not see SLURM's variables: ignite reads any ``SLURM_JOB_ID`` as "ranks
    come from SLURM" and refuses the rank the spawner gives ("Arguments rank and world_size should
    not be specified with SLURM"). The children copy the environment as they start."""
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
