"""Cluster launches that explain themselves: every process that meets others started separately
(torchrun-style ranks, srun tasks, the nodes of a multi-node launch) says where it meets, waits at
most --dist-timeout, ends with one line naming who is missing, obeys SIGTERM while it waits, and
refuses peers started with other options."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from helpers import REPO, TINY_TRAIN, cpu_env, free_port, make_tiny_dataset

from ignite_r3net import cli
from ignite_r3net.distributed import rendezvous
from ignite_r3net.distributed.ranks import disagreement
from ignite_r3net.distributed.rendezvous import Meeting, meet
from ignite_r3net.distributed.topology import Endpoint, LaunchSpec, rendezvous_endpoint
from ignite_r3net.errors import RanksDisagree, RendezvousFailed

# serial: rendezvous timeouts of 1-7 s, a fixed port (29321), and a SIGTERM that must end a process within 5 s
pytestmark = [pytest.mark.timeout(120), pytest.mark.serial]

SLURM_TASK_1_OF_2 = {
    "SLURM_JOB_ID": "12345",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "1",
    "SLURM_NTASKS": "2",
    "SLURM_JOB_NUM_NODES": "1",
    "SLURM_JOB_NODELIST": "localhost",
}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_tiny_dataset(tmp_path_factory.mktemp("data"), n=8, n_val=0)[0]


# ------------------------------------------------------------------ where the ranks meet


@pytest.mark.parametrize(
    "flags, environment, expected",
    [
        # SLURM alone: its first node, 15000 + the job id's last 4 digits
        ({}, {}, ("localhost", 15000 + 2345, "the first node of SLURM_JOB_NODELIST, 15000 + the last 4 digits")),
        # what an sbatch script exports wins over what SLURM's variables give
        (
            {},
            {"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29411"},
            ("10.1.2.3", 29411, "MASTER_ADDR and MASTER_PORT from the environment"),
        ),
        # and the options win over both
        (
            {"master_addr": "node9", "master_port": 29999},
            {"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29411"},
            ("node9", 29999, "--master-addr, --master-port"),
        ),
        ({}, {"MASTER_PORT": "29411"}, ("localhost", 29411, "SLURM_JOB_NODELIST, MASTER_PORT from the environment")),
    ],
)
def test_under_slurm_the_environment_s_rendezvous_wins_and_the_options_win_over_both(
    monkeypatch, flags, environment, expected
):
    for key in ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "WORLD_SIZE", "RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    for key, value in {**SLURM_TASK_1_OF_2, **environment}.items():
        monkeypatch.setenv(key, value)
    spec = LaunchSpec(nproc=1, backend="gloo", **flags)
    assert spec.joins()
    endpoint = rendezvous_endpoint(spec)
    addr, port, source = expected
    assert (endpoint.addr, endpoint.port) == (addr, port)
    assert source in endpoint.source


def test_c10d_forms_the_group_where_the_ranks_met(monkeypatch):
    """--master-port wins over MASTER_PORT for the meeting, and c10d (which reads the environment)
    must then connect to the same store, as a client of it."""
    from ignite_r3net.distributed import launch

    for key, value in _rank_env(1, 1).items():
        monkeypatch.setenv(key, value)  # MASTER_PORT=1: the environment's port, overridden below
    met, seen = [], {}
    monkeypatch.setattr(launch, "meet", lambda meeting: met.append(meeting))
    monkeypatch.setattr(launch.idist, "initialize", lambda backend, timeout: seen.update(os.environ))
    monkeypatch.setattr(launch.idist, "finalize", lambda: None)
    with launch.joined_group(LaunchSpec(backend="gloo", master_port=29321, dist_timeout=7)):
        pass
    assert (met[0].endpoint.port, met[0].endpoint.source) == (29321, "MASTER_ADDR from the environment, --master-port")
    assert seen["MASTER_PORT"] == "29321" and seen["TORCHELASTIC_USE_AGENT_STORE"] == "True"
    assert os.environ["MASTER_PORT"] == "1" and "TORCHELASTIC_USE_AGENT_STORE" not in os.environ


def test_torchrun_s_rendezvous_is_not_overridden_by_the_options(tmp_path, monkeypatch, capsys, data):
    """Under torchrun the ranks meet at torchrun's store: another --master-port could not be honoured."""
    for key, value in {"TORCHELASTIC_RUN_ID": "r", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29400")
    assert cli.main(["--data", str(data), "--output-dir", str(tmp_path / "o"), "--master-port", "29500"]) == 2
    err = capsys.readouterr().err
    assert "error: --master-port 29500: under torchrun the ranks meet where torchrun says (MASTER_PORT=29400)" in err


# ------------------------------------------------------------------ the meeting, in this process


def _meeting(index: int, port: int, timeout: int = 1, **alike: str) -> Meeting:
    endpoint = Endpoint("127.0.0.1", port, ("--master-addr", ""), ("--master-port", ""))
    return Meeting("node", index, 2, endpoint, "gloo", 4, timeout, alike)


@pytest.mark.slow  # over 1 s: beyond the fast tier's budget (docs/development.md#tests)
def test_a_node_whose_host_never_comes_reports_while_waiting_and_stops_at_the_timeout(monkeypatch, capsys):
    monkeypatch.setattr(rendezvous, "REPORT_EVERY_S", 0.3)
    port = free_port()
    started = time.monotonic()
    with pytest.raises(RendezvousFailed) as failure:
        meet(_meeting(1, port, timeout=2))
    assert time.monotonic() - started < 10
    assert str(failure.value) == (
        f"node 1 waited 2 s for the rendezvous at 127.0.0.1:{port} (world size 4): node 0 is not running, or "
        "the address or port is wrong (--master-addr, --master-port), or a firewall blocks the port"
    )
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == (
        f"rendezvous: node 1 of 2 joins the gloo group of 4 process(es) at 127.0.0.1:{port} (--master-addr, "
        "--master-port); waiting up to 2 s (--dist-timeout)"
    )
    waiting = [line for line in lines[1:] if line.startswith("rendezvous: node 1 waited ")]
    assert waiting and all(f"for node 0 to open 127.0.0.1:{port}" in line for line in waiting), lines


def test_the_host_names_the_node_that_did_not_come(capsys):
    port = free_port()
    with pytest.raises(RendezvousFailed) as failure:
        meet(_meeting(0, port, timeout=1))
    assert str(failure.value).startswith(
        f"node 0 waited 1 s at 127.0.0.1:{port} for node 1 (world size 4): it is not running, or started with "
        "another address or port than this one's (--master-addr, --master-port)"
    )
    assert (
        f"rendezvous: node 0 of 2 hosts the gloo group of 4 process(es) at 127.0.0.1:{port}" in capsys.readouterr().err
    )


@pytest.mark.slow  # over 1 s: beyond the fast tier's budget (docs/development.md#tests)
@pytest.mark.parametrize("nproc_of_node_1, refusal", [("2", None), ("1", "--nproc 2 on node 0, 1 on node 1")])
def test_nodes_meet_and_are_refused_when_started_differently(nproc_of_node_1, refusal):
    """Node 0 (in a thread) serves the store and judges; both sides get the same verdict. A refused
    node 0 closes its store at once, as its process ends (only the message is kept, not the frame
    that holds the store), and node 1 still reads the verdict rather than a lost connection."""
    port, outcome = free_port(), {}

    def node_0() -> None:
        try:
            outcome[0] = meet(_meeting(0, port, timeout=30, **{"--nproc": "2"}))
        except RanksDisagree as e:
            outcome[0] = RanksDisagree(str(e))

    host = threading.Thread(target=node_0)
    host.start()
    try:
        outcome[1] = meet(_meeting(1, port, timeout=30, **{"--nproc": nproc_of_node_1}))
    except RanksDisagree as e:
        outcome[1] = e
    host.join()
    for side in (0, 1):
        if refusal is None:
            assert not isinstance(outcome[side], Exception), outcome[side]
        else:
            assert str(outcome[side]) == (
                f"the nodes were started with different options: {refusal}; start every node with the same command"
            )


def test_the_line_naming_what_differs():
    first = ("rank 0", {"--lr": "0.001", "--iters": "10"}, {"torch": "2.14.1"})
    assert disagreement("ranks", first, ("rank 1 (node 1)", dict(first[1]), dict(first[2]))) is None
    other = ("rank 1 (node 1)", {"--lr": "0.01", "--iters": "10"}, {"torch": "2.13.0"})
    assert disagreement("ranks", first, other) == (
        "the ranks were started with different options: --lr 0.001 on rank 0, 0.01 on rank 1 (node 1); and run "
        "different software: torch 2.14.1 on rank 0, 2.13.0 on rank 1 (node 1); start every node with the same "
        "command and the same installation"
    )


# ------------------------------------------------------------------ real processes, as a cluster starts them


def _train_args(data, out, *extra: str) -> list[str]:
    return [sys.executable, str(REPO / "run.py"), "--data", str(data), "--output-dir", str(out), "--iters", "2",
            *TINY_TRAIN, *extra]  # fmt: skip


def _rank_env(rank: int, port: int) -> dict[str, str]:
    """What torchrun, or a launcher like it, gives a rank (without torchrun's agent)."""
    return cpu_env(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


@pytest.mark.slow
@pytest.mark.parametrize("rank, missing", [(1, "rank 0 is not running"), (0, "for rank 1 (world size 2): it is not")])
def test_a_rank_whose_peer_never_comes_stops_at_the_timeout_and_leaves_nothing(data, tmp_path, rank, missing):
    """About 8 s each on a busy 2-core machine (start-up and the 1 s wait). The peer never comes, so the
    wait's length decides nothing but the test's time: the shortest --dist-timeout there is."""
    out, port = tmp_path / "out", free_port()
    proc = subprocess.run(
        _train_args(data, out, "--dist-timeout", "1"), env=_rank_env(rank, port), capture_output=True, text=True,
        timeout=90, cwd=REPO,
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert lines[0].startswith(f"rendezvous: rank {rank} of 2 ") and f"127.0.0.1:{port}" in lines[0]
    assert "(MASTER_ADDR and MASTER_PORT from the environment); waiting up to 1 s (--dist-timeout)" in lines[0]
    assert lines[-1].startswith(f"error: rank {rank} waited 1 s ") and missing in lines[-1], lines[-1]
    assert "c10d" not in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists(), "the run lock and the folder it made are gone: a correct relaunch starts cleanly"


def _wait_for_line(proc: subprocess.Popen, start: str) -> list[str]:
    lines = []
    for line in proc.stderr:
        lines.append(line.rstrip("\n"))
        if line.startswith(start):
            return lines
    raise AssertionError(f"the process ended without printing {start!r}: {lines}")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["torchrun-style rank", "srun task", "spawning node 1 of 2"])
def test_sigterm_while_waiting_for_the_rendezvous_ends_the_process_at_once(data, tmp_path, how):
    """How scancel, torchrun and systemd stop a process: SIGTERM, which c10d's own wait (a C++ loop
    that retries on EINTR) would not let Python handle. About 8 s each on a busy 2-core machine."""
    port = free_port()
    extra, env = {
        "torchrun-style rank": ([], _rank_env(1, port)),
        # the port comes from MASTER_PORT in the environment, not from the job id
        "srun task": ([], cpu_env(**SLURM_TASK_1_OF_2, MASTER_PORT=str(port))),
        "spawning node 1 of 2": (["--nnodes", "2", "--node-rank", "1", "--master-port", str(port)], cpu_env()),
    }[how]
    proc = subprocess.Popen(
        _train_args(data, tmp_path / "out", *extra), env=env, cwd=REPO, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        announced = _wait_for_line(proc, "rendezvous: ")[-1]
        time.sleep(1)  # well into the wait
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=30)[1]
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, rest
    assert rest.strip().splitlines()[-1] == "terminated" and "Traceback" not in rest and "c10d" not in rest, rest
    assert took < 5, f"{how} took {took:.1f} s to stop"
    if how == "srun task":
        assert announced.startswith(
            f"rendezvous: rank 1 of 2 joins the gloo group of 2 process(es) at localhost:{port}"
        )
        assert "(the first node of SLURM_JOB_NODELIST, MASTER_PORT from the environment)" in announced
    if how == "spawning node 1 of 2":
        assert announced.startswith(
            f"rendezvous: node 1 of 2 joins the gloo group of 2 process(es) at 127.0.0.1:{port}"
        )


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_nodes_started_with_different_learning_rates_are_refused_before_any_work(data, tmp_path):
    """Both "nodes" on loopback, one output folder (node 0 holds its lock): each stops with the line
    naming --lr and both values, and nothing is written. About 30 s on a busy 2-core machine."""
    out, port = tmp_path / "out", str(free_port())
    node = ["--nnodes", "2", "--nproc", "1", "--master-addr", "127.0.0.1", "--master-port", port]
    procs = [
        subprocess.Popen(
            _train_args(data, out, *node, "--node-rank", str(rank), "--lr", lr),
            env=cpu_env(),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for rank, lr in ((0, "0.001"), (1, "0.01"))
    ]
    try:
        results = [p.communicate(timeout=200) for p in procs]
    finally:
        for p in procs:
            p.kill()
    expected = (
        "error: the ranks were started with different options: --lr 0.001 on rank 0, 0.01 on rank 1 (node 1); "
        "start every node with the same command"
    )
    for p, (_, err) in zip(procs, results):
        assert p.returncode == 2, err[-3000:]
        assert err.strip().splitlines()[-1] == expected, err[-3000:]
    assert not out.exists() or not list(out.iterdir()), "no config.json, train.log, checkpoint or lock"
