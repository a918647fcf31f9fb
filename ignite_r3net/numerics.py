"""How a process computes on its device: TF32, cuDNN autotuning (for training's crops of one size; not
at native resolution, where it would tune again for every new size) and deterministic algorithms."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

CUBLAS_WORKSPACE = ":4096:8"
# the two settings under which cuBLAS is deterministic (torch's "Reproducibility" notes)
_DETERMINISTIC_CUBLAS = (":4096:8", ":16:8")


def set_deterministic_environment() -> None:
    """Set ``CUBLAS_WORKSPACE_CONFIG`` unless deterministic already, before any CUDA work, in every process."""
    if os.environ.get("CUBLAS_WORKSPACE_CONFIG") not in _DETERMINISTIC_CUBLAS:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE


def set_tf32(enabled: bool) -> None:
    """TensorFloat-32 for float32 convolutions and matrix products (Ampere and newer GPUs only)."""
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def configure_training(device: torch.device, deterministic: bool, tf32: bool) -> None:
    """``--tf32``, and either ``--deterministic`` or cuDNN autotuning on a GPU, for a training worker."""
    set_tf32(tf32)
    if deterministic:
        set_deterministic_environment()
    torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = device.type == "cuda" and not deterministic


@contextmanager
def no_autotuning() -> Iterator[None]:
    """cuDNN autotuning off for the block, as it was after."""
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


@contextmanager
def inference_numerics(tf32: bool) -> Iterator[None]:
    """``--tf32`` and no autotuning for an ``evaluate`` or ``predict`` worker's block, restored after."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    set_tf32(tf32)
    try:
        with no_autotuning():
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
