"""A 2-process run killed with SIGKILL mid-epoch and resumed with --resume auto ends with exactly
the model of the same run never interrupted (DataLoader workers and augmentation on)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from helpers import REPO, cpu_env, free_port, log_iterations, make_tiny_dataset, run_cli

pytestmark = pytest.mark.timeout(400)

ITERS, EVERY = 30, 7
COMMON = [
    "--nproc",
    "2",
    "--backbone",
    "resnet18",
    "--crop",
    "64",
    "--batch-size",
    "2",
    "--workers",
    "2",
    "--rotate",
    "10",
    "--iters",
    str(ITERS),
    "--checkpoint-every",
    str(EVERY),
    "--keep",
    "2",
]


def _train_args(data, out):
    return [*COMMON, "--data", str(data), "--output-dir", str(out), "--master-port", str(free_port())]


def _start_and_kill_after(args: list[str], log_path, iteration: int, timeout: float = 200) -> None:
    """Start training in its own session and SIGKILL every process of it once ``iteration`` is logged."""
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "run.py"), *args],
        cwd=REPO,
        env=cpu_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if log_path.exists() and iteration in log_iterations(log_path):
                break
            assert proc.poll() is None, "training ended before it could be killed"
            time.sleep(0.02)
        else:
            pytest.fail(f"iteration {iteration} never logged")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_sigkill_mid_epoch_then_resume_auto_equals_uninterrupted(tmp_path):
    data, _ = make_tiny_dataset(tmp_path / "data", n=20)  # 20 images / (2 ranks x 2) = 5 iterations per epoch
    ref, killed = tmp_path / "ref", tmp_path / "killed"
    run_cli(_train_args(data, ref), timeout=300)

    _start_and_kill_after(_train_args(data, killed), killed / "train.log", iteration=10)
    saved = sorted(int(p.stem.split("_")[1]) for p in killed.glob("checkpoint_*.pt"))
    assert saved and max(saved) < ITERS
    resume_at = max(saved)
    assert resume_at % 5 != 0, "the checkpoint should land mid-epoch"

    run_cli([*_train_args(data, killed), "--resume", "auto"], timeout=300)

    log = (killed / "train.log").read_text()
    assert f"resumed from {killed / f'checkpoint_{resume_at}.pt'} at iteration {resume_at}" in log
    after = log.split(f"at iteration {resume_at}", 1)[1]
    ref_lines, resumed_lines = log_iterations(ref / "train.log"), {}
    for line in after.splitlines():
        if line.startswith("[iter "):
            resumed_lines[int(line[6 : line.index("]")])] = line
    assert sorted(resumed_lines) == list(range(resume_at + 1, ITERS + 1))
    assert all(resumed_lines[i] == ref_lines[i] for i in resumed_lines)

    expected = torch.load(ref / f"checkpoint_{ITERS}.pt", map_location="cpu", weights_only=True)
    got = torch.load(killed / f"checkpoint_{ITERS}.pt", map_location="cpu", weights_only=True)
    assert expected["model"].keys() == got["model"].keys()
    for name, tensor in expected["model"].items():
        assert torch.equal(tensor, got["model"][name]), name
    for a, b in zip(expected["optimizer"]["state"].values(), got["optimizer"]["state"].values()):
        assert torch.equal(a["momentum_buffer"], b["momentum_buffer"])
