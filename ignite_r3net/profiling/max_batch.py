"""``profile --train --find-max-batch``: the largest batch whose training step fits in a GPU's memory, found by
trying real steps: doubling from the smallest batch (2 for a training step) until one runs out of memory, then
halving the gap between the largest batch that fitted and the smallest that did not."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .measure import free_cached_memory, is_out_of_memory

LIMIT = 4096  # no search beyond this batch: a model that small needs no search


def fits(step: Callable[[int], object], batch: int, device: torch.device) -> bool:
    """Whether ``step(batch)`` runs without the device running out of memory (other errors propagate)."""
    try:
        step(batch)
    except Exception as e:  # torch.cuda.OutOfMemoryError, or a RuntimeError from another allocator
        if not is_out_of_memory(e):
            raise
        return False
    finally:
        free_cached_memory(device)
    return True


def find_max_batch(step: Callable[[int], object], device: torch.device, start: int = 1, limit: int = LIMIT) -> int:
    """The largest batch from ``start`` (a training step needs 2) to ``limit`` for which ``step`` fits, 0 when
    ``start`` does not. Assumes that a batch fits when a larger one does (memory grows with the batch)."""
    if not fits(step, start, device):
        return 0
    low, high = start, None  # the largest batch known to fit; the smallest known not to
    batch = 2 * start
    while batch <= limit:
        if not fits(step, batch, device):
            high = batch
            break
        low, batch = batch, batch * 2
    if high is None:
        return low
    while high - low > 1:
        middle = (low + high) // 2
        if fits(step, middle, device):
            low = middle
        else:
            high = middle
    return low
