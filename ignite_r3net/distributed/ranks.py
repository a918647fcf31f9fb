"""Which rank does what: rank-0-only work goes through ``rank_zero_only``, nowhere else."""

from __future__ import annotations

import json
from typing import Any, cast

import ignite.distributed as idist
import torch

# run the wrapped function on rank 0 only (files, TensorBoard, the console); every rank still calls
# it, so it never hides a collective
rank_zero_only = idist.one_rank_only(rank=0)


# ignite types each collective for tensors, numbers and strings at once; these say which
def all_reduce_tensor(tensor: torch.Tensor, op: str = "SUM") -> torch.Tensor:
    return cast(torch.Tensor, idist.all_reduce(tensor, op=op))


def broadcast_tensor(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    return cast(torch.Tensor, idist.broadcast(tensor, src=src))


def all_gather_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """Every rank's ``tensor`` (all of one shape), concatenated along the first dimension in rank order."""
    return cast(torch.Tensor, idist.all_gather(tensor))


def all_gather_strings(text: str) -> list[str]:
    return cast(list[str], idist.all_gather(text))


def all_gather_items(items: list[Any]) -> list[Any]:
    """Every rank's ``items`` (JSON values: tuples come back as lists), one list in rank order."""
    return [item for text in all_gather_strings(json.dumps(items)) for item in json.loads(text)]


@rank_zero_only
def _rank_zero() -> bool:
    return True


def is_rank_zero() -> bool:
    """For work every rank does but only rank 0 shows (a progress bar); rank-0-only work uses ``rank_zero_only``."""
    return bool(_rank_zero())
