"""``--device`` and the GPUs of a node, with CUDA faked (``fake_gpus``): one process computes on one
device, a node never runs more processes than it has GPUs (refused before any worker starts), a
rank that sees one GPU uses it, and ``--device cpu`` keeps everything on the CPU of a GPU host."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import fake_gpus
import pytest
import torch
from helpers import REPO, TINY_TRAIN, free_port, make_tiny_dataset, plan_of
from test_slurm import _free_port_for_slurm, srun_env

from ignite_r3net import cli
from ignite_r3net.config import TrainConfig
from ignite_r3net.distributed.process_setup import tasks_on_this_node

pytestmark = pytest.mark.timeout(240)

LAUNCHER_VARS = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "MASTER_ADDR")


@pytest.fixture
def gpus(monkeypatch):
    """A host with GPUs: ``gpus(8)`` makes torch report 8 (CUDA_VISIBLE_DEVICES unset, no launcher)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for key in LAUNCHER_VARS:
        monkeypatch.delenv(key, raising=False)

    def install(count: int) -> None:
        fake_gpus.install(count, monkeypatch.setattr)

    return install


@pytest.fixture
def no_worker_starts(monkeypatch):
    """Fail the test if any worker process is spawned (ignite's Parallel starts them through
    ``torch.multiprocessing.start_processes``)."""

    def refuse(*args, **kwargs):
        raise AssertionError("a worker was started")

    monkeypatch.setattr(torch.multiprocessing, "start_processes", refuse)
    monkeypatch.setattr(torch.multiprocessing, "spawn", refuse)


def test_one_process_builds_no_data_parallel(gpus, monkeypatch):
    """ignite's auto_model would wrap a lone process on an 8-GPU host in nn.DataParallel."""
    from ignite_r3net.training import worker

    gpus(8)
    wrapped = []

    class Recorder(torch.nn.Module):  # stands for nn.DataParallel, which needs real GPUs
        def __init__(self, module, **kwargs):
            super().__init__()
            wrapped.append(module)
            self.module = module

    class OnTheGpu(torch.nn.Linear):  # a model whose copy to the (fake) GPU is itself
        def to(self, *args, **kwargs):
            return self

    monkeypatch.setattr(torch.nn.parallel, "DataParallel", Recorder)
    monkeypatch.setattr(torch.nn, "DataParallel", Recorder)
    monkeypatch.setattr(worker, "R3Net", lambda backbone, head_width=1.0: OnTheGpu(2, 2))
    model = worker._build_model(plan_of(TrainConfig(pretrained="none")), torch.device("cuda"))
    assert isinstance(model, OnTheGpu) and not wrapped


def _evaluate(tmp_path: Path, *extra: str) -> list[str]:
    return ["evaluate", "--checkpoint", str(tmp_path / "m.pt"), "--data", str(tmp_path), *extra]


def _predict(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "predict",
        "--checkpoint",
        str(tmp_path / "m.pt"),
        "--output",
        str(tmp_path / "maps"),
        "--input",
        str(tmp_path),
        *extra,
    ]


def _compare(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "compare",
        "--datasets",
        f"D={tmp_path}",
        "--methods",
        f"M={tmp_path}",
        "--out",
        str(tmp_path / "c"),
        *extra,
    ]


def _train(tmp_path: Path, *extra: str) -> list[str]:
    return ["train", "--data", str(tmp_path), "--output-dir", str(tmp_path / "run"), *TINY_TRAIN, *extra]


COMMANDS = {"evaluate": _evaluate, "predict": _predict, "compare": _compare, "train": _train}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("backend", [None, "gloo"])
def test_more_processes_than_gpus_is_refused_before_any_worker(
    command, backend, gpus, no_worker_starts, tmp_path, capsys
):
    gpus(2)
    extra = ["--nproc", "3"] + (["--backend", backend] if backend else [])
    assert cli.main(COMMANDS[command](tmp_path, *extra)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --nproc 3 is more than the 2 GPU(s) visible"), err
    assert not (tmp_path / "run").exists() and not (tmp_path / "maps").exists()


def test_cpu_processes_are_not_counted_against_the_gpus(gpus, no_worker_starts, tmp_path, capsys):
    gpus(2)
    assert cli.main(_evaluate(tmp_path, "--nproc", "3", "--device", "cpu")) == 2
    assert capsys.readouterr().err.startswith("error: --data: no images")  # the next check: the GPUs passed


def test_torchrun_with_more_ranks_than_gpus_is_refused(gpus, monkeypatch, tmp_path, capsys):
    gpus(2)
    for key, value in dict(
        TORCHELASTIC_RUN_ID="x", RANK="3", LOCAL_RANK="3", WORLD_SIZE="4", LOCAL_WORLD_SIZE="4"
    ).items():
        monkeypatch.setenv(key, value)
    assert cli.main(_evaluate(tmp_path)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: torchrun starts 4 ranks on this node and it has 2 GPU(s)"), err


def test_srun_with_more_tasks_per_node_than_gpus_is_refused(gpus, monkeypatch, tmp_path, capsys):
    """Every task of the node is refused, the first ones too: none waits for the others."""
    gpus(2)
    env = srun_env(0, 4, 1, 25000) | {"SLURM_TASKS_PER_NODE": "4", "SLURM_NODEID": "0"}
    for key, value in env.items():
        if key.startswith("SLURM_"):
            monkeypatch.setenv(key, value)
    assert cli.main(_train(tmp_path)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: srun starts 4 tasks on this node and it has 2 GPU(s)"), err


@pytest.mark.parametrize(("tasks", "node", "count"), [("4", "0", 4), ("2(x3),1", "2", 2), ("2(x3),1", "3", 1)])
def test_tasks_on_this_node(monkeypatch, tasks, node, count):
    monkeypatch.setenv("SLURM_TASKS_PER_NODE", tasks)
    monkeypatch.setenv("SLURM_NODEID", node)
    assert tasks_on_this_node() == count


def test_a_launched_rank_that_sees_one_gpu_uses_it(gpus, monkeypatch):
    """A launcher that binds one GPU to each rank and sets torch's variables (local rank 1 of 2):
    the rank joins its group (here alone) on cuda:0 instead of failing with "invalid device ordinal"."""
    import ignite.distributed as idist

    from ignite_r3net.distributed.launch import launch
    from ignite_r3net.distributed.topology import LaunchSpec

    gpus(1)
    env = dict(RANK="0", LOCAL_RANK="1", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    seen = []
    launch(lambda local_rank, arg: seen.append(str(idist.device())), None, LaunchSpec(backend="gloo"))
    assert seen == ["cuda:0"]


@pytest.mark.slow
def test_srun_tasks_that_each_see_one_gpu_use_it(tmp_path):
    """srun --gpus-per-task 1: each task sees only cuda:0, while its SLURM_LOCALID is 0 or 1."""
    port = _free_port_for_slurm()
    ranks = []
    for rank in (0, 1):
        env = srun_env(rank, 2, 1, port)
        env.pop("CUDA_VISIBLE_DEVICES")  # the fake shows one GPU
        env["PYTHONPATH"] = f"{REPO}:{REPO / 'tests'}"
        ranks.append(
            subprocess.Popen(
                [sys.executable, str(REPO / "tests" / "fake_gpus.py"), "1"],
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = [rank.communicate(timeout=120) for rank in ranks]
    for rank, (_, err) in zip(ranks, results):
        assert rank.returncode == 0, err[-2000:]
    assert [out.strip().splitlines()[-1] for out, _ in results] == [
        "rank 0: device cuda:0, ignite local rank 0",
        "rank 1: device cuda:0, ignite local rank 0",
    ]


def test_device_cuda_without_a_gpu_is_refused(tmp_path, capsys):
    assert cli.main(_evaluate(tmp_path, "--device", "cuda")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --device cuda: no CUDA GPU is visible on this host; use --device cpu (or auto)"]


def test_device_cpu_with_nccl_is_refused(gpus, tmp_path, capsys):
    gpus(2)
    assert cli.main(_train(tmp_path, "--device", "cpu", "--backend", "nccl")) == 2
    assert capsys.readouterr().err.startswith("error: --backend nccl needs --device cuda")


def test_device_cpu_on_a_gpu_host_trains_and_evaluates_on_the_cpu(gpus, monkeypatch, tmp_path, capsys):
    """The model's parameters stay on the CPU, and config.json records it."""
    from ignite_r3net.evaluation import evaluate
    from ignite_r3net.training import worker

    gpus(1)
    train, _ = make_tiny_dataset(tmp_path / "data", n=4, n_val=0)
    devices = []

    def recording(build):
        def build_and_record(*args):
            model = build(*args)
            devices.append({p.device.type for p in model.parameters()})
            return model

        return build_and_record

    monkeypatch.setattr(worker, "_build_model", recording(worker._build_model))
    monkeypatch.setattr(evaluate, "build_model", recording(evaluate.build_model))
    out = tmp_path / "run"
    args = ["--data", str(train), "--output-dir", str(out), "--iters", "1", "--checkpoint-every", "1", *TINY_TRAIN]
    assert cli.main([*args, "--device", "cpu"]) == 0
    assert json.loads((out / "config.json").read_text())["resolved"]["device"] == "cpu"
    evaluate_args = ["--checkpoint", str(out / "checkpoint_1.pt"), "--data", str(train), "--workers", "0"]
    assert cli.main(["evaluate", *evaluate_args, "--device", "cpu"]) == 0
    assert devices == [{"cpu"}, {"cpu"}]
