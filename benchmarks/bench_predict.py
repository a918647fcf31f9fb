"""``predict`` over a folder of images on 1 and on 2 CPU processes, side by side.

Each side is a real ``python run.py predict --nproc N`` (subprocess, gloo, ``CUDA_VISIBLE_DEVICES=""``,
``OMP_NUM_THREADS=1``: one thread per process, so two processes use the two cores of a 2-core
machine and one process one) on the same images, with the same checkpoint (R3Net with ``backbone``
and seeded random weights: the work does not depend on the weights) and ``--workers 0``. The figure
is the rate ``predict`` prints (``wrote N map(s) ... in S s, R images/s``): the maps written over the
time from the first batch to the last rank's last map, so start-up (imports, spawn, reading the
model) does not count. Runs alternate 1, 2, 1, 2, ... for ``repeats`` rounds; each side keeps its
best rate.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from bench_scaling import one_thread_cpu_env

from ignite_r3net.evaluation.predict import collect_inputs
from ignite_r3net.model.r3net import R3Net

REPO = Path(__file__).resolve().parents[1]
_RATE = re.compile(r"^wrote (\d+) map\(s\) to .* in ([0-9.]+) s, ([0-9.e+]+) images/s$", re.M)

__all__ = ["bench_predict"]


def _predict(images: Path, checkpoint: Path, out: Path, nproc: int, timeout: float) -> float:
    env = one_thread_cpu_env()
    cmd = [sys.executable, str(REPO / "run.py"), "predict", "--checkpoint", str(checkpoint), "--input", str(images)]
    cmd += ["--output", str(out), "--nproc", str(nproc), "--workers", "0", "--no-progress", "--backend", "gloo"]
    proc = subprocess.run(cmd, env=env, cwd=str(REPO), capture_output=True, text=True, timeout=timeout)
    found = _RATE.search(proc.stdout)
    if proc.returncode != 0 or found is None:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return float(found.group(3))  # the rate predict prints (its seconds are printed rounded to 0.1 s)


def bench_predict(
    data_dir: str | Path,
    backbone: str = "resnet18",
    images: int | None = None,
    repeats: int = 1,
    seed: int = 2018,
    timeout: float = 900.0,
) -> dict[str, Any]:
    """images/s of ``predict --nproc 1`` and ``--nproc 2`` on the images of ``data_dir`` (the first
    ``images`` of them), and their ratio."""
    sources = collect_inputs([str(data_dir)])[:images]
    rates: dict[int, float] = {1: 0.0, 2: 0.0}
    with tempfile.TemporaryDirectory(prefix="bench_predict_") as tmp:
        folder = Path(tmp) / "images"
        folder.mkdir()
        for source in sources:
            (folder / source.name).symlink_to(source.resolve())
        checkpoint = Path(tmp) / "best_model_bench.pt"
        torch.manual_seed(seed)
        torch.save(R3Net(backbone).state_dict(), checkpoint)
        for r in range(repeats):
            for nproc in (1, 2):
                rate = _predict(folder, checkpoint, Path(tmp) / f"maps{nproc}-{r}", nproc, timeout)
                rates[nproc] = max(rates[nproc], rate)
    return {
        "one_proc_images_per_s": rates[1],
        "two_proc_images_per_s": rates[2],
        "ratio": rates[2] / rates[1],
        "settings": {"backbone": backbone, "images": len(sources), "repeats": repeats, "threads_per_process": 1},
    }
