"""Where the workers compute (``--device``): the CPU, or one GPU per process, settled by ``use_device``
in the launching process before any worker starts.

``cpu`` hides CUDA (``CUDA_VISIBLE_DEVICES=""``), the one switch torch and ignite both obey: ignite
computes on ``cuda:<local rank>`` whenever CUDA is available, whatever the backend. ``cuda`` (or
``auto`` on a GPU host) needs as many GPUs as the node runs processes (spawned, torchrun's or srun's).
"""

from __future__ import annotations

import dataclasses
import os
import re

import torch

from ..errors import OptionError
from ..options.commands import ProcessOptions
from .slurm import slurm_task
from .topology import LaunchSpec, rank_set_by_launcher
from .torchrun import started_by_torchrun


def use_device(spec: LaunchSpec) -> str:
    """``--device`` resolved to ``"cuda"`` or ``"cpu"`` for this process and its workers; call it before
    anything asks torch about CUDA (the driver reads ``CUDA_VISIBLE_DEVICES`` once).

    Raises:
        OptionError: ``--device cuda`` without a GPU, ``--backend nccl`` on the CPU, more processes
            than GPUs, or ``--device cpu`` after CUDA started in this process (a Python caller).
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
    """``processes`` of ``evaluate``, ``predict`` or ``compare`` with ``--device`` resolved (``use_device``)."""
    return dataclasses.replace(processes, device=use_device(LaunchSpec.on_one_node(processes)))


def hide_cuda() -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if torch.cuda.is_available():  # the driver had already read the variable
        raise OptionError(
            "--device cpu: CUDA was started in this process before it could hide the GPUs; start it with "
            "CUDA_VISIBLE_DEVICES= (empty) instead"
        )


def check_processes_fit(spec: LaunchSpec, gpus: int) -> None:
    """Raise ``OptionError`` when this node runs more processes than the ``gpus`` this process sees."""
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
    """The tasks of this srun step on this node: SLURM_TASKS_PER_NODE (``2(x3),1``) at SLURM_NODEID."""
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
    """A rank about to join that sees exactly one GPU (``srun --gpus-per-task 1``) computes on it: the
    local rank ignite reads (SLURM_LOCALID under SLURM, else LOCAL_RANK) becomes 0, so that
    ``torch.cuda.set_device(local_rank)`` does not fail with "invalid device ordinal"."""
    if not rank_set_by_launcher() and slurm_task() is None:
        return
    if torch.cuda.is_available() and torch.cuda.device_count() == 1:
        os.environ["LOCAL_RANK"] = "0"
        if "SLURM_LOCALID" in os.environ:
            os.environ["SLURM_LOCALID"] = "0"
