"""``evaluate`` on the CPU: ``--nproc 2`` versus ``--nproc 1``, the whole command as a user runs it.

Each side is a real ``python run.py evaluate --checkpoint CKPT --data DIR`` (subprocess,
``CUDA_VISIBLE_DEVICES=""``, gloo, the default ``--workers``) on the same images, with
``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` removed from its environment, so each process takes
the thread count the package chooses (its share of the cores). The model is R3Net with seeded random
weights (the work does not depend on them) and the images are the first ``images`` pairs of the
benchmark set (300x400 by default), linked into a folder of their own. The figure is each side's
wall time, process start, spawn and model loading included (what a user waits for); the sides
alternate (1, 2, 1, 2, ...) over ``repeats`` rounds and each keeps its fastest run. ``ratio`` is
the 1-process time over the 2-process time.

``ceiling`` is what the ratio can reach at most on this machine, measured in the same run: two
processes of one thread each do at best twice the work of one thread, against one process that
already runs its convolutions on two threads, so the ceiling is ``2 * t2 / t1`` with ``t1`` and
``t2`` the model's forward time on one image (the first image's size) with one and two threads.
Where one process already uses both cores well, no division of the work can beat it by much.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_scaling import timed_command

REPO = Path(__file__).resolve().parents[1]

__all__ = ["bench_evaluate", "format_evaluate"]


def _subset(data_dir: Path, images: int, dest: Path) -> int:
    """The first ``images`` (image, mask) pairs of ``data_dir`` linked into ``dest``."""
    from ignite_r3net.data.folder import list_pairs

    pairs = list_pairs(data_dir)[:images]
    dest.mkdir(parents=True)
    for image, mask in pairs:
        for path in (image, mask):
            (dest / path.name).symlink_to(path.resolve())
    return len(pairs)


def _checkpoint(path: Path, backbone: str, seed: int) -> Path:
    import torch

    from ignite_r3net.model.r3net import R3Net

    torch.manual_seed(seed)
    torch.save(R3Net(backbone).state_dict(), path)
    return path


def _forward_seconds(backbone: str, size: tuple[int, int], threads: int, repeats: int) -> float:
    """The fastest of ``repeats`` R3Net forward passes on one image of ``size`` with ``threads``
    torch threads (after one warm-up pass)."""
    import torch

    from ignite_r3net.model.r3net import R3Net

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model = R3Net(backbone).eval()
        x = torch.randn(1, 3, *size)
        best = float("inf")
        with torch.inference_mode():
            model(x)
            for _ in range(repeats):
                start = time.perf_counter()
                model(x)
                best = min(best, time.perf_counter() - start)
        return best
    finally:
        torch.set_num_threads(before)


def _first_image_size(data: Path) -> tuple[int, int]:
    from PIL import Image

    from ignite_r3net.data.folder import list_pairs

    with Image.open(list_pairs(data)[0][0]) as image:
        return image.height, image.width


def _evaluate(checkpoint: Path, data: Path, nproc: int, backbone: str, timeout: float) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env.update(CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, str(REPO / "run.py"), "evaluate", "--checkpoint", str(checkpoint), "--data", str(data)]
    cmd += ["--backbone", backbone, "--nproc", str(nproc), "--backend", "gloo"]
    return timed_command(cmd, env, timeout)


def bench_evaluate(
    data_dir: str | Path,
    images: int = 48,
    repeats: int = 2,
    backbone: str = "resnet18",
    seed: int = 2018,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Wall time of ``evaluate --nproc 1`` and ``--nproc 2`` on the same images, and their ratio."""
    best: dict[int, float] = {1: float("inf"), 2: float("inf")}
    runs: dict[int, list[float]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="bench_evaluate_") as tmp:
        data = Path(tmp) / "images"
        count = _subset(Path(data_dir), images, data)
        checkpoint = _checkpoint(Path(tmp) / "r3net.pt", backbone, seed)
        for _ in range(repeats):
            for nproc in (1, 2):
                seconds = _evaluate(checkpoint, data, nproc, backbone, timeout)
                runs[nproc].append(seconds)
                best[nproc] = min(best[nproc], seconds)
        size = _first_image_size(data)
    forward = {threads: _forward_seconds(backbone, size, threads, max(repeats, 2)) for threads in (1, 2)}
    return {
        "one_proc_s": best[1],
        "two_proc_s": best[2],
        "ratio": best[1] / best[2],
        "one_proc_images_per_s": count / best[1],
        "two_proc_images_per_s": count / best[2],
        "forward_1t_s": forward[1],
        "forward_2t_s": forward[2],
        "ceiling": 2 * forward[2] / forward[1],
        "settings": {
            "images": count,
            "backbone": backbone,
            "repeats": repeats,
            "cpu_count": os.cpu_count(),
            "image_size": list(size),
            "runs_s": {str(k): v for k, v in runs.items()},
            "threads_note": "OMP_NUM_THREADS unset: each process takes its share of the cores",
        },
    }


def format_evaluate(r: dict[str, Any], goal: str) -> str:
    """The benchmark's line in ``benchmarks/run.py``'s output."""
    return (
        f"evaluate: {r['settings']['images']} images, 1 process {r['one_proc_s']:.1f} s, 2 processes "
        f"{r['two_proc_s']:.1f} s, ratio {r['ratio']:.2f}{goal}; ceiling {r['ceiling']:.2f} (forward "
        f"{r['forward_1t_s']:.3f} s on 1 thread, {r['forward_2t_s']:.3f} s on 2)"
    )
