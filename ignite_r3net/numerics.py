"""How a process computes on its device: TF32, cuDNN autotuning and deterministic algorithms.

A training worker sets them once (``configure_training``): autotuning pays off there because
every training crop has the same size. Validation, ``evaluate`` and ``predict`` meet images of many
sizes at native resolution, where cuDNN would tune every convolution again for each new size, so
they run without it (``no_autotuning``, ``inference_numerics``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

CUBLAS_WORKSPACE = ":4096:8"
# the two settings under which cuBLAS is deterministic (torch's "Reproducibility" notes)
_DETERMINISTIC_CUBLAS = (":4096:8", ":16:8")


def set_deterministic_environment() -> None:
    """Set ``CUBLAS_WORKSPACE_CONFIG`` unless it already holds a deterministic value. cuBLAS reads it
    at its first handle, so this runs before any CUDA work: in the launching process (spawned workers
    inherit it) and at the start of each worker (torchrun and srun start the workers themselves)."""
    if os.environ.get("CUBLAS_WORKSPACE_CONFIG") not in _DETERMINISTIC_CUBLAS:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE


def set_tf32(enabled: bool) -> None:
    """TensorFloat-32 for float32 convolutions (cuDNN) and matrix products (cuBLAS) on Ampere and
    newer GPUs; no effect elsewhere."""
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def configure_training(device: torch.device, deterministic: bool, tf32: bool) -> None:
    """The numerics of a training worker: ``--tf32``, and either ``--deterministic`` (deterministic
    algorithms only, no autotuning) or cuDNN autotuning on a GPU (the crops have one size)."""
    set_tf32(tf32)
    if deterministic:
        set_deterministic_environment()
    torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = device.type == "cuda" and not deterministic


@contextmanager
def no_autotuning() -> Iterator[None]:
    """cuDNN autotuning off for the block (inference at native resolution), as it was after."""
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


@contextmanager
def inference_numerics(tf32: bool) -> Iterator[None]:
    """``--tf32`` and no autotuning for the block of an ``evaluate`` or ``predict`` worker, the
    settings restored after (the worker may be the launching process itself)."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    set_tf32(tf32)
    try:
        with no_autotuning():
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
