"""CUDA faked on a CPU machine: torch reports ``count`` GPUs, as a GPU host would, so that the checks
and the device choices of a GPU run can be tested without one. Nothing runs on the fake GPUs.

Like the CUDA driver, the fake honours ``CUDA_VISIBLE_DEVICES`` (empty: no GPU), which is how
``--device cpu`` hides the GPUs; ``set_device`` refuses an index beyond the GPUs with CUDA's
"invalid device ordinal".

In a test: ``install(count, monkeypatch.setattr)``. As a program (the ranks of a launcher test):
``python fake_gpus.py COUNT`` fakes COUNT GPUs, joins the group that srun's or torch's variables
describe (gloo) and prints the rank's ``idist.device()`` and ignite's local rank.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import torch


def install(count: int, setattr: Callable[[Any, str, Any], None]) -> None:
    """Make ``torch.cuda`` report ``count`` GPUs (through ``setattr``: ``monkeypatch.setattr``)."""
    current = [0]

    def device_count() -> int:
        return 0 if os.environ.get("CUDA_VISIBLE_DEVICES") == "" else count

    def set_device(index: int | torch.device) -> None:
        index = index.index if isinstance(index, torch.device) else int(index)
        if not 0 <= index < device_count():
            raise RuntimeError("CUDA error: invalid device ordinal")
        current[0] = index

    setattr(torch.cuda, "device_count", device_count)
    setattr(torch.cuda, "is_available", lambda: device_count() > 0)
    setattr(torch.cuda, "set_device", set_device)
    setattr(torch.cuda, "current_device", lambda: current[0])


def _print_device(local_rank: int, arg: None) -> None:
    import ignite.distributed as idist

    print(f"rank {idist.get_rank()}: device {idist.device()}, ignite local rank {idist.get_local_rank()}", flush=True)


if __name__ == "__main__":
    install(int(sys.argv[1]), setattr)
    from ignite_r3net.distributed.launch import launch
    from ignite_r3net.distributed.topology import LaunchSpec

    launch(_print_device, None, LaunchSpec(backend="gloo", dist_timeout=60))
