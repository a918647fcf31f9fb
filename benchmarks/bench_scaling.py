"""Data-parallel scaling on the CPU: training images/s of ``--nproc 2`` versus ``--nproc 1``.

Each side is a real ``python run.py`` training job (subprocess, gloo, ``CUDA_VISIBLE_DEVICES=""``,
``OMP_NUM_THREADS=1``) on the same data with a small model (resnet18 backbone, small crop and
batch, ``--workers 0``, checkpoints every 1000 iterations so none is written inside the run). The
figure is the TensorBoard scalar ``train/images_per_s`` (global images/s across all processes,
written every iteration with ``--log-every 1``): the median after the first ``warmup`` iterations,
so process start, spawn, model construction and the first slow iterations do not count.

One thread per process (two processes on a two-core machine use both cores, one process one): the
trainer takes its thread count from ``OMP_NUM_THREADS`` when it is set.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

__all__ = ["bench_scaling", "one_thread_cpu_env", "read_images_per_s", "timed_command"]


def one_thread_cpu_env() -> dict[str, str]:
    """The environment of a ``run.py`` process of a CPU benchmark: no GPU, one thread per process
    (the commands take their thread count from ``OMP_NUM_THREADS`` when it is set), this checkout's
    package first on the path."""
    return dict(
        os.environ,
        CUDA_VISIBLE_DEVICES="",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )


def read_images_per_s(tb_dir: str | Path, warmup: int) -> list[float]:
    """``train/images_per_s`` values of the iterations after ``warmup``, from TensorBoard event files."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})
    acc.Reload()
    if "train/images_per_s" not in acc.Tags().get("scalars", []):
        raise RuntimeError(f"no train/images_per_s scalar in {tb_dir}")
    return [e.value for e in acc.Scalars("train/images_per_s") if e.step > warmup]


# Until the trainer honours OMP_NUM_THREADS, the in-process (--nproc 1) run is held to it by wrapping
# the trainer's backend set-up. Spawned workers (--nproc 2) re-import the trainer unwrapped and keep
# cpu_count // nproc threads, which is 1 on a 2-core machine.
def _train(
    data_dir: Path,
    out: Path,
    nproc: int,
    iters: int,
    batch_size: int,
    crop: int,
    backbone: str,
    port: int,
    timeout: float,
) -> float:
    env = one_thread_cpu_env()
    entry = [str(REPO / "run.py")]
    cmd = [
        sys.executable,
        *entry,
        "train",
        "--data",
        str(data_dir),
        "--output-dir",
        str(out),
        "--nproc",
        str(nproc),
        "--iters",
        str(iters),
        "--batch-size",
        str(batch_size),
        "--crop",
        str(crop),
        "--backbone",
        backbone,
        "--pretrained",
        "none",  # the compute does not depend on the weights; no download
        "--workers",
        "0",
        "--checkpoint-every",
        "1000",
        "--log-every",
        "1",
        "--backend",
        "gloo",
        "--master-port",
        str(port),
    ]
    return timed_command(cmd, env, timeout)


def timed_command(cmd: list[str], env: dict[str, str], timeout: float) -> float:
    """Wall time of ``cmd`` run from the repository root; a failure raises with its output's end."""
    start = time.perf_counter()
    proc = subprocess.run(
        cmd, env=env, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}")
    return time.perf_counter() - start


def bench_scaling(
    data_dir: str | Path,
    iters: int = 30,
    warmup: int = 5,
    batch_size: int = 4,
    crop: int = 64,
    backbone: str = "resnet18",
    repeats: int = 1,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Global images/s of a 1-process and a 2-process CPU training run, and their ratio (runs
    alternate 1, 2, 1, 2, ... over ``repeats`` rounds; each side keeps its best median)."""
    rates: dict[int, float] = {1: 0.0, 2: 0.0}
    walls: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench_scaling_") as tmp:
        for r in range(repeats):
            for nproc in (1, 2):
                out = Path(tmp) / f"nproc{nproc}-{r}"
                port = 29600 + (os.getpid() % 500) * 4 + r * 2 + nproc
                walls[nproc] = _train(Path(data_dir), out, nproc, iters, batch_size, crop, backbone, port, timeout)
                values = read_images_per_s(out / "tb", warmup)
                if not values:
                    raise RuntimeError(f"no images/s values after iteration {warmup} in {out / 'tb'}")
                rates[nproc] = max(rates[nproc], statistics.median(values))
    return {
        "one_proc_images_per_s": rates[1],
        "two_proc_images_per_s": rates[2],
        "ratio": rates[2] / rates[1],
        "settings": {
            "iters": iters,
            "warmup": warmup,
            "batch_size_per_process": batch_size,
            "crop": crop,
            "backbone": backbone,
            "workers": 0,
            "repeats": repeats,
            "cpu_count": os.cpu_count(),
            "wall_s": {str(k): v for k, v in walls.items()},
            "threads_note": "one thread per process (OMP_NUM_THREADS=1)",
        },
    }
