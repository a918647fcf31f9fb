"""Which rank does what: rank-0-only work goes through ``rank_zero_only``, nowhere else."""

from __future__ import annotations

from typing import cast

import ignite.distributed as idist
import torch

rank_zero_only = idist.one_rank_only(rank=0)
"""Decorator: run the wrapped function on rank 0 only (files, TensorBoard, the console). Every rank
still calls it, so it never hides a collective."""


# ignite types each collective for tensors, numbers and strings at once; these say which
def all_reduce_tensor(tensor: torch.Tensor, op: str = "SUM") -> torch.Tensor:
    """``idist.all_reduce`` of a tensor (``op``: ``"SUM"``, ``"MIN"``, ...), across all ranks."""
    return cast(torch.Tensor, idist.all_reduce(tensor, op=op))


def broadcast_tensor(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    """``idist.broadcast`` of a tensor: rank ``src``'s values on every rank."""
    return cast(torch.Tensor, idist.broadcast(tensor, src=src))


def all_gather_strings(text: str) -> list[str]:
    """``idist.all_gather`` of a string: every rank's, in rank order."""
    return cast(list[str], idist.all_gather(text))
