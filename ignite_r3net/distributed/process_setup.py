"""Settings every launching process and worker applies once its heavy imports are done."""

from __future__ import annotations

import gc
import logging
import os

import ignite.distributed as idist
import torch


def freeze_long_lived_objects() -> None:
    """Exempt every object alive now from the cyclic garbage collector for the rest of the process.

    torch, torchvision and ignite leave about a million import-time objects that live until exit;
    without the freeze every full collection, several of them at interpreter shutdown, walks them
    all. Frozen pages are also not copied into forked DataLoader workers."""
    gc.collect()
    gc.freeze()


def quiet_launcher_logs() -> None:
    """Silence what would repeat our one-line error: torch's "Terminating process N via signal
    SIGTERM" when a rank fails, and the resource tracker's "leaked semaphore" warning about the
    DataLoader workers of ranks that were terminated (their clean-up is right).

    The resource tracker starts later, in whichever process first needs it, and takes its
    warning filters from the environment, hence ``PYTHONWARNINGS``."""
    logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)
    quiet = "ignore:resource_tracker:UserWarning"
    current = os.environ.get("PYTHONWARNINGS", "")
    if quiet not in current.split(","):
        os.environ["PYTHONWARNINGS"] = f"{current},{quiet}" if current else quiet


def share_cpu_cores() -> None:
    """On the CPU, one torch thread pool per process of its share of the cores: processes on one
    host share them, and N pools of full size would fight (``OMP_NUM_THREADS`` wins when set)."""
    if idist.device().type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        local = max(idist.get_nproc_per_node(), 1)
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))
