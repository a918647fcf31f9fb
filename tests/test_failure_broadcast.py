"""A rank that fails ends every rank of the job, on every node, with its line: its peers may be
blocked in something that never notices a dead peer (NCCL's kernel waiting for a rank on another
node), so the line reaches them through the job's store, not through the collective."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from helpers import REPO, TINY_TRAIN, cpu_env, free_port, group_pids, make_tiny_dataset

from ignite_r3net.distributed import launch
from ignite_r3net.distributed.launch import _job_failure, publish, published, spawn_failure
from ignite_r3net.distributed.topology import LaunchSpec

# serial: every rank must end within a deadline of seconds after the first failure
pytestmark = [pytest.mark.timeout(300), pytest.mark.serial]

FAULTY = REPO / "tests" / "fail_rank_one.py"  # rank 1 raises; rank 0 waits in a store wait of 600 s
ENDS_WITHIN_S = 30.0


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_tiny_dataset(tmp_path_factory.mktemp("data"), n=8, n_val=0)[0]


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("w") as f:  # a file, not a pipe: nobody reads while both run
        return subprocess.Popen(
            [sys.executable, str(FAULTY), *args], env=env, cwd=REPO, stdout=f, stderr=f, start_new_session=True
        )


def _ends(procs: list[subprocess.Popen], within: float = 240) -> list[float]:
    """When each process ended (monotonic seconds); fails past ``within``."""
    ended: dict[int, float] = {}
    deadline = time.monotonic() + within
    while len(ended) < len(procs):
        assert time.monotonic() < deadline, f"still running after {within} s: {sorted(set(range(2)) - set(ended))}"
        for i, p in enumerate(procs):
            if i not in ended and p.poll() is not None:
                ended[i] = time.monotonic()
        time.sleep(0.1)
    return [ended[i] for i in range(len(procs))]


def _kill_all(procs: list[subprocess.Popen]) -> None:
    """Each process runs in a session of its own, which its DataLoader workers share."""
    for p in procs:
        if group_pids(p.pid):
            os.killpg(p.pid, signal.SIGKILL)


def _check_every_process_ends_with_rank_1_s_line(procs, logs, out: Path) -> None:
    try:
        _check_ends(procs, logs, out)
    finally:
        _kill_all(procs)


def _check_ends(procs, logs, out: Path) -> None:
    ended = _ends(procs)
    line = (
        f"error: rank 1 failed on {socket.gethostname()}: OSError: cannot read image /data/broken.jpg "
        f"(traceback in {out / 'error-rank1.log'})"
    )
    for p, log in zip(procs, logs):
        said = log.read_text()
        assert p.returncode == 1, said[-3000:]
        assert said.strip().splitlines()[-1] == line, said[-3000:]
        assert "Traceback" not in said, said[-3000:]
    assert "raise OSError" in (out / "error-rank1.log").read_text()
    assert ended[0] - ended[1] < ENDS_WITHIN_S, f"rank 0 ended {ended[0] - ended[1]:.0f} s after rank 1"
    deadline = time.monotonic() + 10  # helpers such as multiprocessing's resource tracker exit last
    while group_pids(procs[0].pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not group_pids(procs[0].pid), "rank 0's DataLoader worker was left running"


def test_the_job_ends_with_its_first_failure_and_a_restart_starts_clean(monkeypatch):
    """Two ranks failing at once both end with the first one's line; a torchrun restart (whose
    agent keeps its store) does not read the failure that ended the attempt before it."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    assert published(store) is None
    assert publish(store, "rank 1 failed on a: OSError: x", readers=0) == "rank 1 failed on a: OSError: x"
    assert publish(store, "rank 0 failed on b: OSError: y", readers=0) == "rank 1 failed on a: OSError: x"
    assert published(store) == "rank 1 failed on a: OSError: x"
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert published(store) is None


def _killed(local_index: int) -> torch.multiprocessing.ProcessExitedException:
    return torch.multiprocessing.ProcessExitedException(
        f"process {local_index} terminated with signal SIGKILL", local_index, 4242, -9, "SIGKILL"
    )


def test_a_node_s_launcher_ends_with_the_job_s_first_failure(monkeypatch):
    """A worker killed without a word (the out-of-memory killer) is named by its rank and host,
    and its launcher tells the other nodes; a node whose worker ended because another node's rank
    failed reports that rank's line."""
    monkeypatch.setattr(launch, "SEEN_WAIT_S", 0.1)  # nobody reads: no rank runs
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    spec = LaunchSpec(nproc=2, nnodes=2, node_rank=1)
    killed = _job_failure(spawn_failure(_killed(1), first_rank=2), store, spec)
    line = f"rank 3 failed on {socket.gethostname()}: its process exited unexpectedly (process 1 terminated with "
    assert str(killed) == line + "signal SIGKILL)"
    assert published(store) == str(killed)
    assert str(_job_failure(spawn_failure(_killed(0)), store, LaunchSpec(nproc=2, nnodes=2))) == str(killed)


def _train_args(data, out, *extra: str) -> list[str]:
    return ["--data", str(data), "--output-dir", str(out), "--iters", "2", *TINY_TRAIN, *extra]


@pytest.mark.slow
def test_ranks_started_separately_end_with_the_failed_rank_s_line(data, tmp_path):
    """Ranks as torchrun or srun start them, each its own process: no launcher of ours stops the
    survivor, which ends within seconds of rank 1's failure, not at --dist-timeout (600 s)."""
    out, port = tmp_path / "out", free_port()
    logs = [tmp_path / f"rank{rank}.log" for rank in (0, 1)]
    procs = [
        _start(
            _train_args(data, out),
            cpu_env(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)),
            logs[r],
        )
        for r in (0, 1)
    ]
    _check_every_process_ends_with_rank_1_s_line(procs, logs, out)


@pytest.mark.slow
def test_a_rank_failing_on_one_node_ends_the_other_node_with_its_line(data, tmp_path):
    """Two launchers on the loopback, one spawned rank each: node 1's rank fails; node 0's rank
    ends although it does not notice, and node 0's launcher reports rank 1's line (exit code 1)."""
    out, port = tmp_path / "out", str(free_port())
    node = ["--nnodes", "2", "--nproc", "1", "--master-addr", "127.0.0.1", "--master-port", port]
    logs = [tmp_path / f"node{rank}.log" for rank in (0, 1)]
    procs = [_start(_train_args(data, out, *node, "--node-rank", str(r)), cpu_env(), logs[r]) for r in (0, 1)]
    _check_every_process_ends_with_rank_1_s_line(procs, logs, out)
