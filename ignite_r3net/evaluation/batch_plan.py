"""Which images ``predict`` runs together: images of equal size in batches, the batches dealt to the
ranks in turn. The plan depends on the images' sizes and ``--batch-size`` only, never on the number
of processes, so N processes run the batches of one and write the same maps, byte for byte."""

from __future__ import annotations

REFERENCE_PIXELS = 400 * 300
"""A batch holds no more pixels than ``--batch-size`` images of this size (MSRA10K's): a folder of
camera photos of one size runs in small batches, or one by one, instead of exhausting memory."""

Size = tuple[int, int]  # (height, width)


def batch_limit(size: Size, batch_size: int) -> int:
    """How many images of ``size`` one batch may hold: ``batch_size``, fewer for large images."""
    height, width = size
    return max(1, min(batch_size, batch_size * REFERENCE_PIXELS // max(height * width, 1)))


def plan_batches(sizes: list[Size | None], batch_size: int) -> list[list[int]]:
    """Batches of image indices: equal sizes together (in index order), at most ``batch_limit``
    each; an image of unknown size (its header is unreadable) alone. Batches are ordered by their
    first image."""
    groups: dict[Size, list[int]] = {}
    alone: list[list[int]] = []
    for index, size in enumerate(sizes):
        if size is None:
            alone.append([index])
        else:
            groups.setdefault(size, []).append(index)
    batches = list(alone)
    for size, indices in groups.items():
        step = batch_limit(size, batch_size)
        batches += [indices[i : i + step] for i in range(0, len(indices), step)]
    return sorted(batches, key=lambda batch: batch[0])


def deal(batches: list[list[int]], rank: int, world_size: int) -> list[list[int]]:
    """This rank's batches: batch j goes to rank j mod ``world_size``."""
    return batches[rank::world_size]
