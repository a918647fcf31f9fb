"""SLURM: tasks started with srun's variables join one process group (one task per GPU), or each
spawn their workers (one task per node with --nproc). Two tasks are two processes on loopback."""

from __future__ import annotations

import random
import socket
import subprocess
import sys

import pytest
from helpers import REPO, TINY_TRAIN, cpu_env, log_iterations, make_tiny_dataset

from ignite_r3net.cli import main
from ignite_r3net.distributed.topology import first_host

pytestmark = pytest.mark.timeout(240)


def srun_env(procid: int, ntasks: int, nodes: int, port: int) -> dict[str, str]:
    """The variables srun gives a task (the job id chosen so that the derived port is ``port``)."""
    return cpu_env(
        SLURM_JOB_ID=str(port - 15000),
        SLURM_STEP_ID="0",
        SLURM_PROCID=str(procid),
        SLURM_LOCALID=str(procid),
        SLURM_NTASKS=str(ntasks),
        SLURM_JOB_NUM_NODES=str(nodes),
        SLURM_JOB_NODELIST="localhost",
    )


def _free_port_for_slurm() -> int:
    """A free port that a SLURM job id can map to (15000 + its last 4 digits)."""
    rng = random.Random()
    while True:
        port = rng.randrange(15000, 25000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_tiny_dataset(tmp_path_factory.mktemp("data"), n=8, n_val=0)[0]


def _train(data, out, *extra) -> list[str]:
    return [
        "--data",
        str(data),
        "--output-dir",
        str(out),
        "--iters",
        "2",
        "--checkpoint-every",
        "1",
        *TINY_TRAIN,
        *extra,
    ]


@pytest.mark.slow
def test_one_task_per_gpu_joins_one_group(data, tmp_path):
    out, port = tmp_path / "run", _free_port_for_slurm()
    tasks = [
        subprocess.Popen(
            [sys.executable, str(REPO / "run.py"), *_train(data, out)],
            cwd=REPO,
            env=srun_env(rank, 2, 1, port),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    results = [task.communicate(timeout=200) for task in tasks]
    for task, (_, err) in zip(tasks, results):
        assert task.returncode == 0, err[-3000:]
    log = (out / "train.log").read_text()
    assert log.count("world size 2,") == 1 and log.count("configuration:") == 1  # one header, by rank 0
    assert sorted(log_iterations(out / "train.log")) == [1, 2]
    assert sorted(p.name for p in out.glob("checkpoint_*.pt")) == ["checkpoint_1.pt", "checkpoint_2.pt"]
    assert "[iter 2]" in results[0][0] and "[iter" not in results[1][0]  # only rank 0 writes the log


@pytest.mark.slow
def test_one_task_per_node_spawns_its_workers(data, tmp_path, monkeypatch):
    """The task is this process, with srun's variables; it spawns two ranks."""
    for key, value in srun_env(0, 1, 1, _free_port_for_slurm()).items():
        if key.startswith("SLURM_"):
            monkeypatch.setenv(key, value)
    out = tmp_path / "run"
    assert main(_train(data, out, "--nproc", "2")) == 0
    assert "world size 2," in (out / "train.log").read_text()
    assert sorted(log_iterations(out / "train.log")) == [1, 2]


def test_srun_options_that_cannot_work_are_refused(data, tmp_path, monkeypatch, capsys):
    for key, value in srun_env(0, 4, 2, _free_port_for_slurm()).items():  # two tasks per node
        if key.startswith("SLURM_"):
            monkeypatch.setenv(key, value)
    args = ["--data", str(data), *TINY_TRAIN]
    assert main([*args, "--output-dir", str(tmp_path / "a"), "--nproc", "2"]) == 2
    assert "needs one task per node (this step has 4 tasks on 2 node(s))" in capsys.readouterr().err
    assert main([*args, "--output-dir", str(tmp_path / "b"), "--nnodes", "2"]) == 2
    assert "--nnodes and --node-rank come from SLURM under srun" in capsys.readouterr().err


def test_ports_when_none_is_given():
    """One node: a free port each time (two runs on one host must not both take torch's 29500);
    nodes started by hand share 29500; under srun the port comes from the job id."""
    from ignite_r3net.distributed.launch import parallel_for
    from ignite_r3net.distributed.topology import LaunchSpec

    one_node = [parallel_for(LaunchSpec(nproc=2, backend="gloo"))._spawn_params["master_port"] for _ in range(2)]
    assert 29500 not in one_node and all(1024 < port < 65536 for port in one_node)
    two_nodes = parallel_for(LaunchSpec(nproc=1, nnodes=2, backend="gloo"))._spawn_params["master_port"]
    assert two_nodes == 29500


@pytest.mark.parametrize(
    "nodelist, first",
    [("node7", "node7"), ("gpu[03-05,9],cpu1", "gpu03"), ("a1,b[2-3]", "a1"), ("rack1-n[12,14]-ib", "rack1-n12-ib")],
)
def test_first_host_of_a_node_list(nodelist, first):
    assert first_host(nodelist) == first


RENDEZVOUS_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def _as_srun_task(monkeypatch, procid: int, ntasks: int, nodes: int) -> None:
    """This process as task ``procid`` of an srun step on nodes ``gpu[07-08]`` of job 123456, without
    torch's rendezvous variables; all of them are as before once the test ends."""
    for key in RENDEZVOUS_VARS:
        # set first, so that the test's end also removes any the code sets (delenv of an absent
        # variable records nothing): a leftover LOCAL_RANK would make later runs join a group
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    env = srun_env(procid, ntasks, nodes, port=15000 + 3456)
    for key, value in env.items():
        if key.startswith("SLURM_"):
            monkeypatch.setenv(key, value)
    monkeypatch.setenv("SLURM_JOB_ID", "123456")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[07-08]")


def test_one_task_per_node_spawns_towards_the_flags_address(monkeypatch):
    """The README: under srun the master address and port come from SLURM's variables unless
    --master-addr / --master-port are given (test_rendezvous.py checks the same for tasks that
    join one group, and that the flags also win over MASTER_ADDR / MASTER_PORT)."""
    from ignite_r3net.distributed.launch import parallel_for
    from ignite_r3net.distributed.topology import LaunchSpec

    _as_srun_task(monkeypatch, procid=1, ntasks=2, nodes=2)
    derived = parallel_for(LaunchSpec(nproc=2, backend="gloo"))._spawn_params
    assert (derived["master_addr"], derived["master_port"]) == ("gpu07", 18456)
    assert (derived["nnodes"], derived["node_rank"], derived["nproc_per_node"]) == (2, 1, 2)
    flags = parallel_for(LaunchSpec(nproc=2, backend="gloo", master_addr="node-by-flag", master_port=23456))
    assert (flags._spawn_params["master_addr"], flags._spawn_params["master_port"]) == ("node-by-flag", 23456)
