"""Images run together: equal sizes in one batch, fewer when large, in a plan independent of the processes."""

from __future__ import annotations

# a batch holds no more pixels than --batch-size images of this size (MSRA10K's): a folder of camera
# photos of one size runs in small batches, or one by one, instead of exhausting memory
REFERENCE_PIXELS = 400 * 300
Size = tuple[int, int]  # (height, width)


def plan_batches(sizes: list[Size | None], batch_size: int) -> list[list[int]]:
    """Batches of image indices by first image: equal sizes together, up to ``batch_size`` (fewer when large),
    an image of unknown size alone. Independent of the processes, so N of them write the maps of one."""
    groups: dict[Size, list[int]] = {}
    batches: list[list[int]] = []
    for index, size in enumerate(sizes):
        if size is None:
            batches.append([index])
        else:
            groups.setdefault(size, []).append(index)
    for (height, width), indices in groups.items():
        step = max(1, min(batch_size, batch_size * REFERENCE_PIXELS // max(height * width, 1)))
        batches += [indices[i : i + step] for i in range(0, len(indices), step)]
    return sorted(batches, key=lambda batch: batch[0])
