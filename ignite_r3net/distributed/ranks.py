"""Which rank does what: rank-0-only work goes through ``rank_zero_only``, nowhere else."""

from __future__ import annotations

import ignite.distributed as idist

rank_zero_only = idist.one_rank_only(rank=0)
"""Decorator: run the wrapped function on rank 0 only (files, TensorBoard, the console). Every rank
still calls it, so it never hides a collective."""


@rank_zero_only
def _rank_zero() -> bool:
    return True


def is_rank_zero() -> bool:
    """Whether this process is rank 0: for settings of work every rank does but only rank 0 shows
    (a progress bar). Work that only rank 0 does is a ``rank_zero_only`` function instead."""
    return bool(_rank_zero())
