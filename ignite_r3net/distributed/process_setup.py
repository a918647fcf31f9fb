"""Settings every launching process and worker applies once its heavy imports are done."""

from __future__ import annotations

import gc
import logging
import os


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
