"""The start-up data scan, cold and warm: what a launch, a resume or a restart spends checking a data
set before any worker starts.

Both sides run what ``train`` runs in its launching process for ``--data DIR``
(``assert_dataset_ok``, then ``listing_digest`` of the pairs it returns) on the same generated
folder of ``pairs`` MSRA10K-style pairs (``name.jpg`` + ``name.png``, 64x64: the header scan reads
headers, so the image size hardly matters). Cold: an empty scan cache (``XDG_CACHE_HOME`` pointed
at a fresh folder), so every header is read, as on the first launch; warm: the same scan again,
with the cache the cold one wrote, as on a relaunch. The files were just written, so both find
them in the page cache (as the issue's figures, measured with a warm page cache). Each of
``repeats`` rounds runs a cold scan, then ``warm_runs`` warm ones; each side keeps its fastest.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ignite_r3net.data.checks import assert_dataset_ok
from ignite_r3net.data.folder import listing_digest

__all__ = ["bench_scan", "write_pairs"]

_VARIANTS = 16  # distinct files, copied under every name (encoding 10,000 of each would take longer)


def write_pairs(folder: Path, pairs: int, size: int = 64, seed: int = 2018) -> Path:
    """``pairs`` 8-bit JPEG images with 0/255 PNG masks, ``size`` x ``size``, in ``folder``."""
    rng = np.random.default_rng(seed)
    variants = []
    for _ in range(_VARIANTS):
        image, mask = io.BytesIO(), io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(image, "JPEG", quality=90)
        Image.fromarray((rng.random((size, size)) > 0.5).astype(np.uint8) * 255).save(mask, "PNG")
        variants.append((image.getvalue(), mask.getvalue()))
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(pairs):
        image, mask = variants[i % _VARIANTS]
        (folder / f"{i:06d}.jpg").write_bytes(image)
        (folder / f"{i:06d}.png").write_bytes(mask)
    return folder


def _timed_scan(folder: Path, cache_home: Path) -> float:
    previous = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(cache_home)
    try:
        start = time.perf_counter()
        pairs = assert_dataset_ok(folder)
        listing_digest(folder, pairs)
        seconds = time.perf_counter() - start
    finally:
        if previous is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = previous
    if not pairs:
        raise RuntimeError(f"no pairs found in {folder}")
    return seconds


def bench_scan(pairs: int = 10_000, repeats: int = 2, warm_runs: int = 3, size: int = 64) -> dict[str, Any]:
    """Seconds of a cold and a warm scan of ``pairs`` generated pairs, and their ratio (the key)."""
    cold, warm = float("inf"), float("inf")
    with tempfile.TemporaryDirectory(prefix="bench_scan_") as tmp:
        start = time.perf_counter()
        folder = write_pairs(Path(tmp) / "data", pairs, size)
        write_s = time.perf_counter() - start
        for r in range(repeats):
            cache_home = Path(tmp) / f"cache{r}"
            cold = min(cold, _timed_scan(folder, cache_home))
            for _ in range(warm_runs):
                warm = min(warm, _timed_scan(folder, cache_home))
            shutil.rmtree(cache_home)
    return {
        "cold_s": cold,
        "warm_s": warm,
        "ratio": cold / warm,
        "settings": {"pairs": pairs, "size": size, "repeats": repeats, "warm_runs": warm_runs, "write_s": write_s},
    }
