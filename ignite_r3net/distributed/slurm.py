"""What ``srun`` tells each task. A task is either one rank (one task per GPU) or one node that spawns
``--nproc`` workers (``srun --ntasks-per-node 1``); the default rendezvous is on the allocation's first node
(see examples/slurm/train.sbatch)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

from .torchrun import started_by_torchrun

_REQUIRED = ("SLURM_JOB_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_JOB_NODELIST")


@dataclass(frozen=True)
class SlurmTask:
    """This task of a SLURM job step."""

    job_id: str
    procid: int  # rank of this task among the step's tasks
    localid: int  # rank of this task on its node
    ntasks: int
    nodelist: str
    nnodes: int  # nodes of the allocation

    @property
    def one_task_per_node(self) -> bool:
        return self.ntasks == self.nnodes

    @property
    def default_port(self) -> int:  # as ignite derives it
        return 15000 + int(self.job_id[-4:]) if self.job_id[-4:].isdigit() else 29500

    def master_addr(self) -> str:
        return first_host(self.nodelist)


def slurm_task() -> SlurmTask | None:
    """This process's SLURM task, or None outside ``srun`` (or when torchrun set the ranks)."""
    env = os.environ
    if not all(k in env for k in _REQUIRED) or started_by_torchrun(env):
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
    """The first host of a SLURM node list (``node[03-05,9],gpu1`` -> ``node03``), from ``scontrol show
    hostnames`` or, where scontrol is missing, a parser of the list syntax."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=10, check=True
        ).stdout.split()
        if out:
            return out[0]
    except (OSError, subprocess.SubprocessError):
        pass
    depth, end = 0, len(nodelist)
    for i, c in enumerate(nodelist):
        depth += (c == "[") - (c == "]")
        if c == "," and depth == 0:
            end = i
            break
    entry = nodelist[:end].strip()
    if "[" not in entry:
        return entry
    prefix, rest = entry.split("[", 1)
    ranges, suffix = rest.split("]", 1)
    return prefix + ranges.split(",")[0].split("-")[0] + suffix
