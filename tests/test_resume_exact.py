"""A 2-process run killed with SIGKILL mid-epoch and resumed with --resume auto, and a torchrun
run whose rank 1 dies once and is restarted by torchrun, both end with exactly the model of the
same run never interrupted (DataLoader workers and augmentation on)."""

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
    "--pretrained",
    "none",
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
    return [*COMMON, "--nproc", "2", "--data", str(data), "--output-dir", str(out), "--master-port", str(free_port())]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    # 20 images / (2 ranks x 2) = 5 iterations per epoch
    return make_tiny_dataset(tmp_path_factory.mktemp("data"), n=20)[0]


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    """The uninterrupted run: its final checkpoint and its log."""
    ref = tmp_path_factory.mktemp("ref")
    run_cli(_train_args(data, ref), timeout=300)
    return ref


def _assert_same_final_model(ref, out) -> None:
    expected = torch.load(ref / f"checkpoint_{ITERS}.pt", map_location="cpu", weights_only=True)
    got = torch.load(out / f"checkpoint_{ITERS}.pt", map_location="cpu", weights_only=True)
    assert expected["model"].keys() == got["model"].keys()
    for name, tensor in expected["model"].items():
        assert torch.equal(tensor, got["model"][name]), name
    for a, b in zip(expected["optimizer"]["state"].values(), got["optimizer"]["state"].values()):
        assert torch.equal(a["momentum_buffer"], b["momentum_buffer"])


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


def test_sigkill_mid_epoch_then_resume_auto_equals_uninterrupted(data, reference, tmp_path):
    ref, killed = reference, tmp_path / "killed"
    _start_and_kill_after(_train_args(data, killed), killed / "train.log", iteration=10)
    saved = sorted(int(p.stem.split("_")[1]) for p in killed.glob("checkpoint_*.pt"))
    assert saved and max(saved) < ITERS
    resume_at = max(saved)
    assert resume_at % 5 != 0, "the checkpoint should land mid-epoch"

    resumed = run_cli([*_train_args(data, killed), "--resume", "auto"], timeout=300)
    # the killed run left its lock; it is gone, so the resume takes it over and says so
    assert "taking over the lock of run" in resumed.stderr and "which no longer exists" in resumed.stderr

    log = (killed / "train.log").read_text()
    assert f"resumed from {killed / f'checkpoint_{resume_at}.pt'} at iteration {resume_at}" in log
    after = log.split(f"at iteration {resume_at}", 1)[1]
    ref_lines, resumed_lines = log_iterations(ref / "train.log"), {}
    for line in after.splitlines():
        if line.startswith("[iter "):
            resumed_lines[int(line[6 : line.index("]")])] = line
    assert sorted(resumed_lines) == list(range(resume_at + 1, ITERS + 1))
    assert all(resumed_lines[i] == ref_lines[i] for i in resumed_lines)
    _assert_same_final_model(ref, killed)


def test_torchrun_restarts_a_failed_rank_and_the_run_ends_as_if_uninterrupted(data, reference, tmp_path):
    """``torchrun --max-restarts 1`` with ``--resume auto`` (examples/torchrun_elastic.sh): rank 1
    is SIGKILLed once after the first checkpoint; torchrun restarts every worker, which resume."""
    out, marker = tmp_path / "elastic", tmp_path / "rank1-died"
    args = [*COMMON, "--data", str(data), "--output-dir", str(out), "--resume", "auto"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "--max-restarts",
            "1",
            str(REPO / "tests" / "fault_once.py"),
            *args,
        ],
        cwd=REPO,
        # as examples/torchrun_elastic.sh: each attempt its own rendezvous store (distributed.py says why)
        env=cpu_env(FAULT_MARKER=str(marker), FAULT_OUTPUT=str(out), TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert marker.exists(), "rank 1 never died: the test proved nothing"
    log = (out / "train.log").read_text()
    assert "resumed from" in log and f"[iter {ITERS}]" in log
    _assert_same_final_model(reference, out)
