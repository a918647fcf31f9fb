"""What each process sets up for itself: the device its workers compute on (``--device``: the CPU, or one GPU per
process, settled by ``use_device`` in the launching process before any worker starts), their torch threads, the
garbage collector and the launchers' logs."""

from __future__ import annotations

import gc
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

import ignite.distributed as idist
import torch

from ..errors import OptionError
from .topology import LaunchSpec, rank_set_by_launcher, slurm_task, started_by_torchrun


def use_device(spec: LaunchSpec) -> str:
    """``--device`` resolved to ``"cuda"`` or ``"cpu"``, before anything asks torch about CUDA (the driver reads
    ``CUDA_VISIBLE_DEVICES`` once); ``OptionError`` when it does not fit the backend or the process count."""
    if spec.device == "cpu":
        # the one switch torch and ignite both obey: ignite computes on cuda:<local rank> whenever CUDA is available
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        if torch.cuda.is_available():  # the driver had already read the variable
            raise OptionError(
                "--device cpu: CUDA was started in this process before it could hide the GPUs; start it with "
                "CUDA_VISIBLE_DEVICES= (empty) instead"
            )
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


def check_processes_fit(spec: LaunchSpec, gpus: int) -> None:
    """Raise ``OptionError`` when this node runs more processes than the ``gpus`` this process sees."""
    advice = "or --device cpu for CPU processes"
    if spec.spawns() and spec.nproc > gpus:
        raise OptionError(
            f"--nproc {spec.nproc} is more than the {gpus} GPU(s) visible on this node (one process per GPU): "
            f"give --nproc {gpus} or fewer, {advice}"
        )
    if spec.spawns() or not spec.joins():
        return  # the spawned workers fit, or one process on the current GPU
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
    """A rank about to join that sees exactly one GPU (``srun --gpus-per-task 1``) computes on it: the local rank
    ignite reads (SLURM_LOCALID, else LOCAL_RANK) becomes 0, else set_device fails with "invalid device ordinal"."""
    if not rank_set_by_launcher() and slurm_task() is None:
        return
    if torch.cuda.is_available() and torch.cuda.device_count() == 1:
        os.environ["LOCAL_RANK"] = "0"
        if "SLURM_LOCALID" in os.environ:
            os.environ["SLURM_LOCALID"] = "0"


def freeze_long_lived_objects() -> None:
    """Exempt the objects alive now (a million, from the imports) from every later collection, which also spares
    forked DataLoader workers a copy of their pages."""
    gc.collect()
    gc.freeze()


def quiet_launcher_logs() -> None:
    """Silence what would repeat our one-line error: torch's "Terminating process N via signal SIGTERM" and the
    resource tracker's "leaked semaphore" (the tracker starts later, reading ``PYTHONWARNINGS``)."""
    logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)
    quiet = "ignore:resource_tracker:UserWarning"
    current = os.environ.get("PYTHONWARNINGS", "")
    if quiet not in current.split(","):
        os.environ["PYTHONWARNINGS"] = f"{current},{quiet}" if current else quiet


def available_cpus() -> int:
    """The CPU cores this process may run on (its affinity mask: taskset, SLURM's binding)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no sched_getaffinity (macOS)
        return os.cpu_count() or 1


def worker_thread_count(device: torch.device, limit: int | None = None) -> int:
    """The torch threads one worker on ``device`` should use, at most ``limit``: ``OMP_NUM_THREADS`` when set,
    else its share of the host's cores. On a GPU the count is left as it is (the CPU only feeds the device)."""
    if device.type != "cpu" or "OMP_NUM_THREADS" in os.environ:
        threads = torch.get_num_threads()
    else:
        # full-size pools would oversubscribe the cores (evaluate with 2 processes on 2 cores ran 3x slower)
        threads = max(1, available_cpus() // max(idist.get_nproc_per_node(), 1))
    return threads if limit is None else max(1, min(threads, limit))


def set_worker_threads(device: torch.device, limit: int | None = None) -> int:
    """Give this worker ``worker_thread_count(device, limit)`` torch threads; returns the count."""
    threads = worker_thread_count(device, limit)
    if threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    return threads


@contextmanager
def worker_threads(device: torch.device, limit: int | None = None) -> Iterator[int]:
    """``set_worker_threads`` for the block, for workers that may run inside the launching process (``--nproc 1``)."""
    before = torch.get_num_threads()
    try:
        yield set_worker_threads(device, limit)
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
