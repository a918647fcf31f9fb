"""Runs that survive crashes: a 2-process run killed with SIGKILL mid-epoch and resumed with
``--resume auto``, and a torchrun run whose rank 1 dies once and is restarted by torchrun, both end
with exactly the model of the shared reference run, never interrupted (DataLoader workers and
augmentation on; see conftest.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from helpers import (
    REFERENCE_EVERY,
    REFERENCE_ITERS,
    REPO,
    cpu_env,
    log_iterations,
    log_lines,
    reference_args,
    without_timing,
)

from ignite_r3net import cli

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ITERS = REFERENCE_ITERS


def _assert_same_final_model(ref, out) -> None:
    expected = torch.load(ref / f"checkpoint_{ITERS}.pt", map_location="cpu", weights_only=True)
    got = torch.load(out / f"checkpoint_{ITERS}.pt", map_location="cpu", weights_only=True)
    assert expected["model"].keys() == got["model"].keys()
    for name, tensor in expected["model"].items():
        assert torch.equal(tensor, got["model"][name]), name
    assert expected["optimizer"]["state"].keys() == got["optimizer"]["state"].keys()  # zip checks them all
    for a, b in zip(expected["optimizer"]["state"].values(), got["optimizer"]["state"].values()):
        assert torch.equal(a["momentum_buffer"], b["momentum_buffer"])


def _without(args: list[str], *options: str) -> list[str]:
    """``args`` less the given options and their values."""
    kept = list(args)
    for option in options:
        at = kept.index(option)
        del kept[at : at + 2]
    return kept


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


def test_sigkill_mid_epoch_then_resume_auto_equals_uninterrupted(reference_run, tmp_path, capfd):
    ref, killed = reference_run.out, tmp_path / "killed"
    args = reference_args(reference_run.train, reference_run.val, killed)
    _start_and_kill_after(args, killed / "train.log", iteration=REFERENCE_EVERY + 2)
    saved = sorted(int(p.stem.split("_")[1]) for p in killed.glob("checkpoint_*.pt"))
    assert saved == [REFERENCE_EVERY], saved
    resume_at = REFERENCE_EVERY
    assert resume_at % 3 != 0, "the checkpoint should land mid-epoch (3 iterations per epoch)"

    # the resumed run: this process launches it (its ranks are spawned processes, as always)
    assert cli.main([*args, "--resume", "auto"]) == 0
    _, err = capfd.readouterr()
    # the killed run left its lock; it is gone, so the resume takes it over and says so
    assert "taking over the lock of run" in err and "which no longer exists" in err
    # stderr is no terminal here: plain progress lines over the whole run, from the resumed iteration on
    progress = [line for line in err.splitlines() if line.startswith("train: ")]
    assert progress[0].startswith(f"train: {resume_at + 1}/{ITERS} iterations (50%), "), progress
    assert progress[-1].startswith(f"train: {ITERS}/{ITERS} iterations (100%), "), progress
    assert "\r" not in err

    log = "\n".join(log_lines(killed / "train.log"))
    replayed = f"iterations {resume_at + 1} to {resume_at + 2} above are trained again below"
    assert f"resumed from {killed / f'checkpoint_{resume_at}.pt'} at iteration {resume_at}: {replayed}" in log
    after = log.split(f"at iteration {resume_at}", 1)[1]
    ref_lines, resumed_lines = log_iterations(ref / "train.log"), {}
    for line in after.splitlines():
        if line.startswith("[iter "):
            resumed_lines[int(line[6 : line.index("]")])] = without_timing(line)
            # the time left, from the resumed run's own speed (none at the last iteration)
            assert ("[eta " in line) == (int(line[6 : line.index("]")]) < ITERS), line
    assert sorted(resumed_lines) == list(range(resume_at + 1, ITERS + 1))
    # the same learning rate and the same losses: the same samples with the same augmentation
    assert all(resumed_lines[i] == ref_lines[i] for i in resumed_lines)
    assert sorted(p.name for p in killed.glob("checkpoint_*.pt")) == sorted(p.name for p in ref.glob("checkpoint_*.pt"))
    _assert_same_final_model(ref, killed)


def test_torchrun_restarts_a_failed_rank_and_the_run_ends_as_if_uninterrupted(reference_run, tmp_path):
    """``torchrun --max-restarts 1`` with ``--resume auto`` (examples/torchrun_elastic.sh): rank 1
    is SIGKILLed once after the first checkpoint; torchrun restarts every worker, which resume.
    The ranks join torchrun's group (nothing is spawned) and nothing is written outside the run's
    folder."""
    out, marker, cwd = tmp_path / "elastic", tmp_path / "rank1-died", tmp_path / "cwd"
    cwd.mkdir()
    # torchrun gives the ranks and the port
    args = _without(reference_args(reference_run.train, reference_run.val, out), "--nproc", "--master-port")
    args.extend(["--resume", "auto"])
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
        cwd=cwd,
        # as examples/torchrun_elastic.sh: each attempt its own rendezvous store (distributed/topology.py says why)
        env=cpu_env(FAULT_MARKER=str(marker), FAULT_OUTPUT=str(out), TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert marker.exists(), "rank 1 never died: the test proved nothing"
    assert not list(cwd.iterdir()), "nothing is written outside the output directory"
    assert "Spawn function" not in proc.stderr
    # rank 0 is stopped by torchrun's SIGTERM, which also ends its DataLoader workers (no failure of
    # theirs is reported), or sees rank 1 go first and says, in words, that it lost a peer
    assert "DataLoader worker" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr[-4000:]
    assert "pair.cc" not in proc.stderr, proc.stderr[-4000:]
    log = (out / "train.log").read_text()
    assert "world size 2" in log and "resumed from" in log and f"[iter {ITERS}]" in log
    assert f"[val iter {ITERS}] mae " in log  # rank 1's validation shard is empty
    _assert_same_final_model(reference_run.out, out)
