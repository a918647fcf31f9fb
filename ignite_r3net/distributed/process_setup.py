"""Settings every launching process and worker applies once its heavy imports are done."""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

import ignite.distributed as idist
import torch


def freeze_long_lived_objects() -> None:
    """Exempt the objects alive now (about a million from torch's, torchvision's and ignite's imports) from every
    later full collection; frozen pages are also not copied into forked DataLoader workers."""
    gc.collect()
    gc.freeze()


def quiet_launcher_logs() -> None:
    """Silence what would repeat our one-line error: torch's "Terminating process N via signal SIGTERM" and the
    resource tracker's "leaked semaphore" warning about terminated ranks' DataLoader workers (the tracker starts
    later, in any process, and reads its warning filters from ``PYTHONWARNINGS``)."""
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
        # processes on one host share its cores: each full-size pool would oversubscribe them
        # (evaluate with 2 processes on 2 cores ran 3x slower than with one)
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
