"""Where the workers compute (``--device``), and whether this node's GPUs hold its processes.

One process computes on one device: the CPU, or one GPU that no other process of the node uses.
``use_device`` settles it in the launching process, before any worker starts:

* ``cpu`` hides CUDA from this process and every process it starts (``CUDA_VISIBLE_DEVICES=""``).
  Hiding is the one switch torch and ignite both obey: ignite picks ``cuda:<local rank>`` for
  ``idist.device()`` and calls ``torch.cuda.set_device(local_rank)`` whenever CUDA is available,
  whatever the backend, so a gloo process on a GPU host would otherwise compute on a GPU, and one
  with a local rank beyond the GPUs would die with "invalid device ordinal".
* ``cuda`` (or ``auto`` on a host with GPUs): the processes this node runs must not outnumber
  its GPUs; ``--nproc`` spawned workers, torchrun's ranks (LOCAL_WORLD_SIZE) and srun's tasks are
  all counted.

A rank that sees exactly one GPU (``srun --gpus-per-task 1``: each task sees only ``cuda:0`` while
its local rank is SLURM_LOCALID) computes on it: ``local_rank_on_its_gpu`` makes the local rank
that ignite reads 0 before the group forms.
"""

from __future__ import annotations

import dataclasses
import os
import re

import torch

from ..errors import OptionError
from ..options.shared import ProcessOptions
from .slurm import slurm_task
from .topology import LaunchSpec, rank_set_by_launcher
from .torchrun import started_by_torchrun


def use_device(spec: LaunchSpec) -> str:
    """``spec.device`` (``--device auto|cuda|cpu``) resolved for this process and the workers it
    starts: ``"cuda"`` or ``"cpu"``. Call it before anything asks torch about CUDA: the CUDA driver
    reads ``CUDA_VISIBLE_DEVICES`` once, at its first use.

    Raises:
        OptionError: ``--device cuda`` without a visible GPU, ``--backend nccl`` on the CPU, more
            processes on this node than GPUs, or ``--device cpu`` in a process that has already
            started CUDA (a Python caller): it could not hide the GPUs from itself.
    """
    if spec.device == "cpu":
        hide_cuda()
        if spec.backend == "nccl":
            raise OptionError("--backend nccl needs --device cuda (NCCL runs on GPUs); use --backend gloo on the CPU")
        return "cpu"
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 0:
        if spec.device == "cuda":
            raise OptionError("--device cuda: no CUDA GPU is visible on this host; use --device cpu (or auto)")
        if spec.backend == "nccl":
            raise OptionError("--backend nccl needs CUDA GPUs, and none is visible; use --backend gloo")
        return "cpu"
    check_processes_fit(spec, gpus)
    return "cuda"


def processes_on_device(processes: ProcessOptions) -> ProcessOptions:
    """``processes`` (``--nproc``, ``--device``, ...) of ``evaluate``, ``predict`` or ``compare`` with
    ``--device`` resolved by ``use_device``: the first thing these commands do after their options."""
    return dataclasses.replace(processes, device=use_device(LaunchSpec.on_one_node(processes)))


def hide_cuda() -> None:
    """Hide the GPUs from this process and the processes it starts (``--device cpu``)."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if torch.cuda.is_available():  # the driver had already read the variable
        raise OptionError(
            "--device cpu: CUDA was started in this process before it could hide the GPUs; start it with "
            "CUDA_VISIBLE_DEVICES= (empty) instead"
        )


def check_processes_fit(spec: LaunchSpec, gpus: int) -> None:
    """Raise ``OptionError`` when this node runs more processes than it has GPUs (``gpus``, as this
    process sees them): each process needs a GPU of its own."""
    advice = "or --device cpu for CPU processes"
    if spec.spawns():
        if spec.nproc > gpus:
            raise OptionError(
                f"--nproc {spec.nproc} is more than the {gpus} GPU(s) visible on this node (one process per GPU): "
                f"give --nproc {gpus} or fewer, {advice}"
            )
        return
    if not spec.joins():
        return  # one process, on the current GPU
    if started_by_torchrun():
        ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        if ranks > gpus:
            raise OptionError(
                f"torchrun starts {ranks} ranks on this node and it has {gpus} GPU(s) visible (one rank per GPU): "
                f"give torchrun --nproc-per-node {gpus} or fewer, {advice}"
            )
        return
    if gpus == 1:
        return  # a task bound to its own GPU (srun --gpus-per-task 1) uses it: see local_rank_on_its_gpu
    task = slurm_task()
    tasks = tasks_on_this_node() if task is not None else None
    local_rank = task.localid if task is not None else int(os.environ.get("LOCAL_RANK", "0"))
    if (tasks or local_rank + 1) > gpus:
        who = f"srun starts {tasks} tasks" if tasks else f"this rank is local rank {local_rank}"
        raise OptionError(
            f"{who} on this node and it has {gpus} GPU(s) visible (one rank per GPU): run at most {gpus} "
            f"tasks per node, or bind one GPU to each (srun --gpus-per-task 1), {advice}"
        )


def tasks_on_this_node() -> int | None:
    """How many tasks of this srun step run on this node: SLURM_TASKS_PER_NODE (``2(x3),1``: two
    tasks on each of the first three nodes, one on the fourth) at SLURM_NODEID; None when unset."""
    env = os.environ
    if "SLURM_TASKS_PER_NODE" not in env or "SLURM_NODEID" not in env:
        return None
    counts: list[int] = []
    for entry in env["SLURM_TASKS_PER_NODE"].split(","):
        found = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", entry.strip())
        if found is None:
            return None
        counts += [int(found[1])] * int(found[2] or 1)
    node = int(env["SLURM_NODEID"])
    return counts[node] if node < len(counts) else None


def local_rank_on_its_gpu() -> None:
    """For a rank about to join its group: when it sees exactly one GPU, make the local rank
    ignite reads 0, so that ignite's ``torch.cuda.set_device(local_rank)`` and DDP's device pick
    that GPU (``cuda:0``) rather than fail with "invalid device ordinal". ignite takes the local
    rank from SLURM_LOCALID under SLURM (and checks LOCAL_RANK against it), from LOCAL_RANK
    otherwise; both are set. The rank is then alone on its node as ignite counts nodes
    (``idist.get_nproc_per_node()`` is 1), which is true of its GPU."""
    if not rank_set_by_launcher() and slurm_task() is None:
        return
    if torch.cuda.is_available() and torch.cuda.device_count() == 1:
        os.environ["LOCAL_RANK"] = "0"
        if "SLURM_LOCALID" in os.environ:
            os.environ["SLURM_LOCALID"] = "0"
