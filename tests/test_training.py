"""End-to-end training in real processes (CPU, gloo): the log, checkpoints, TensorBoard, poly LR,
resume, and the three ways to launch (spawn, torchrun, two nodes on loopback)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from helpers import REPO, TINY_TRAIN, cpu_env, free_port, log_iterations, make_tiny_dataset, read_scalars, run_cli
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from ignite_r3net.training.optim import poly_lr

pytestmark = pytest.mark.timeout(300)

ITERS = 12


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    train, _ = make_tiny_dataset(root, n=10)
    return train


@pytest.fixture(scope="module")
def two_proc_run(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("run2")
    proc = run_cli(
        [
            "--nproc",
            "2",
            "--data",
            str(data),
            "--val-data",
            str(data.parent / "val"),
            "--output-dir",
            str(out),
            "--iters",
            str(ITERS),
            "--checkpoint-every",
            "5",
            "--keep",
            "5",
            "--master-port",
            str(free_port()),
            *TINY_TRAIN,
        ]
    )
    return out, proc


def test_log_has_config_and_one_line_per_iteration(two_proc_run):
    out, proc = two_proc_run
    log = (out / "train.log").read_text()
    assert log.startswith("configuration: {")
    assert "world size 2, 2 images per process, global batch 4" in log
    assert "note: backbone from random weights" in log  # no --pretrained: the log says so
    lines = log_iterations(out / "train.log")
    assert sorted(lines) == list(range(1, ITERS + 1))
    # rank 0 alone writes: each iteration appears exactly once
    assert sum(line.startswith("[iter ") for line in log.splitlines()) == ITERS
    assert "[iter 12]" in proc.stdout
    cfg = (out / "config.json").read_text()
    assert '"nproc": 2' in cfg and '"iters": 12' in cfg


def test_checkpoints_exactly_at_chosen_iterations(two_proc_run):
    out, _ = two_proc_run
    names = sorted(p.name for p in out.glob("checkpoint_*.pt"))
    assert names == ["checkpoint_10.pt", "checkpoint_12.pt", "checkpoint_5.pt"]
    assert not list(out.glob(".tmp-*"))
    state = torch.load(out / "checkpoint_10.pt", map_location="cpu", weights_only=True)
    assert set(state) >= {"trainer", "model", "optimizer", "lr_scheduler", "loss_meter"}
    assert state["trainer"]["iteration"] == 10
    assert not any(k.startswith("module.") for k in state["model"])


def test_tensorboard_has_losses_and_poly_lr_for_both_groups(two_proc_run):
    out, _ = two_proc_run
    scalars = read_scalars(out / "tb")
    for tag in ["train/total", "train/loss0", "train/loss6", "train/images_per_s"]:
        assert sorted(scalars[tag]) == list(range(1, ITERS + 1)), tag
    assert all(v > 0 for v in scalars["train/images_per_s"].values())
    for it in range(1, ITERS + 1):
        assert scalars["lr/group_0"][it] == pytest.approx(poly_lr(2e-3, it, ITERS, 0.9), rel=1e-6)
        assert scalars["lr/group_1"][it] == pytest.approx(poly_lr(1e-3, it, ITERS, 0.9), rel=1e-6)
    assert sorted(scalars["val/maxF"]) == [0, 5, 10, 12]  # before training, at checkpoints, at the end
    assert set(scalars["val/mae"]) == {0, 5, 10, 12}
    acc = EventAccumulator(str(out / "tb"), size_guidance={"images": 0, "tensors": 0})
    acc.Reload()
    assert [e.step for e in acc.Images("val/side_outputs")] == [0, 5, 10, 12]
    assert [e.step for e in acc.Tensors("val/pr_curve")] == [0, 5, 10, 12]
    # the best checkpoint holds the model of the best validation after training started
    best_it = max((it for it in (5, 10, 12)), key=lambda it: scalars["val/maxF"][it])
    [best] = out.glob("best_model_*.pt")
    assert best.name == f"best_model_{best_it}_maxF={scalars['val/maxF'][best_it]:.4f}.pt"


def test_log_lr_column_is_the_poly_formula(two_proc_run):
    out, _ = two_proc_run
    for it, line in log_iterations(out / "train.log").items():
        lr = float(line.rsplit("[lr ", 1)[1].rstrip("]"))
        assert lr == pytest.approx(poly_lr(1e-3, it, ITERS, 0.9), abs=1e-13)


def test_resume_continues_at_the_right_iteration_with_the_same_lr(two_proc_run, data, tmp_path):
    ref_out, _ = two_proc_run
    # a copy of the run as it stood at iteration 5
    (tmp_path / "checkpoint_5.pt").write_bytes((ref_out / "checkpoint_5.pt").read_bytes())
    run_cli(
        [
            "--nproc",
            "2",
            "--data",
            str(data),
            "--output-dir",
            str(tmp_path),
            "--iters",
            str(ITERS),
            "--checkpoint-every",
            "5",
            "--keep",
            "5",
            "--resume",
            "auto",
            "--master-port",
            str(free_port()),
            *TINY_TRAIN,
        ]
    )
    lines = log_iterations(tmp_path / "train.log")
    assert sorted(lines) == list(range(6, ITERS + 1))
    assert "at iteration 5" in (tmp_path / "train.log").read_text()
    ref = log_iterations(ref_out / "train.log")
    for it in lines:  # same lr, and the same losses: the same samples with the same augmentation
        assert lines[it] == ref[it]
    assert sorted(p.name for p in tmp_path.glob("checkpoint_*.pt")) == [
        "checkpoint_10.pt",
        "checkpoint_12.pt",
        "checkpoint_5.pt",
    ]


def _validation_line(log_path, iteration: int) -> dict[str, str]:
    line = next(line for line in log_path.read_text().splitlines() if line.startswith(f"[val iter {iteration}] "))
    words = line.split("] ", 1)[1].split()
    return dict(zip(words[::2], words[1::2]))


def test_validation_scores_the_model_the_checkpoint_holds(two_proc_run, data, tmp_path):
    """Both ranks validate with rank 0's BatchNorm statistics (each rank's own drift after a step),
    so the logged score is that of the saved model, as `evaluate` computes it."""
    out, _ = two_proc_run
    logged = _validation_line(out / "train.log", ITERS)
    result = tmp_path / "eval.json"
    run_cli(
        [
            "evaluate",
            "--checkpoint",
            str(out / f"checkpoint_{ITERS}.pt"),
            "--data",
            str(data.parent / "val"),
            "--workers",
            "0",
            "--json",
            str(result),
        ]
    )
    [values] = json.loads(result.read_text()).values()
    for key in ("mae", "maxF", "Sm", "maxE", "wF"):
        assert f"{values[key]:.4f}" == logged[key], key


@pytest.mark.parametrize(
    "change, expected",
    [
        (["--iters", str(ITERS + 8)], f"--iters {ITERS + 8} (checkpoint: {ITERS})"),
        (["--nproc", "1"], "world size (--nproc x --nnodes) 1 (checkpoint: 2)"),
        (["--lr", "0.01"], "--lr 0.01 (checkpoint: 0.001)"),
    ],
)
def test_resume_with_a_changed_recipe_is_refused_before_any_work(two_proc_run, data, tmp_path, change, expected):
    """ignite would keep the checkpoint's schedule and epoch length (a finished run resumed with more
    iterations would restart at learning rate 0): the options must match the run's."""
    ref_out, _ = two_proc_run
    (tmp_path / f"checkpoint_{ITERS}.pt").write_bytes((ref_out / f"checkpoint_{ITERS}.pt").read_bytes())
    args = [
        "--nproc",
        "2",
        "--data",
        str(data),
        "--output-dir",
        str(tmp_path),
        "--iters",
        str(ITERS),
        "--checkpoint-every",
        "5",
        "--keep",
        "5",
        "--resume",
        "auto",
        "--master-port",
        str(free_port()),
        *TINY_TRAIN,
        *change,
    ]
    proc = run_cli(args, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    err = proc.stderr.strip()
    assert err.startswith("error: --resume ") and expected in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"checkpoint_{ITERS}.pt"], "nothing written"


def test_resuming_a_finished_run_does_nothing(two_proc_run, data, tmp_path):
    ref_out, _ = two_proc_run
    (tmp_path / f"checkpoint_{ITERS}.pt").write_bytes((ref_out / f"checkpoint_{ITERS}.pt").read_bytes())
    proc = run_cli(
        [
            "--nproc",
            "2",
            "--data",
            str(data),
            "--output-dir",
            str(tmp_path),
            "--iters",
            str(ITERS),
            "--checkpoint-every",
            "5",
            "--keep",
            "5",
            "--resume",
            "auto",
            *TINY_TRAIN,
        ]
    )
    assert f"is at iteration {ITERS} of {ITERS}; nothing to do" in proc.stdout
    assert "Spawn function" not in proc.stderr, "no worker was started"
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"checkpoint_{ITERS}.pt"]


def test_torchrun_launch_joins_the_group_without_spawning(data, tmp_path):
    out = tmp_path / "out"
    one_image = tmp_path / "val1"  # fewer validation images than ranks: rank 1's shard is empty
    one_image.mkdir()
    for suffix in (".jpg", ".png"):
        src = sorted(data.glob("*" + suffix))[0]
        (one_image / src.name).write_bytes(src.read_bytes())
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
        str(REPO / "run.py"),
        "--data",
        str(data),
        "--val-data",
        str(one_image),
        "--output-dir",
        str(out),
        "--iters",
        "4",
        "--checkpoint-every",
        "4",
        *TINY_TRAIN,
    ]
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = subprocess.run(cmd, cwd=cwd, env=cpu_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not list(cwd.iterdir()), "nothing is written outside the output directory"
    assert "Spawn function" not in proc.stderr
    assert "world size 2" in (out / "train.log").read_text()
    assert sorted(log_iterations(out / "train.log")) == [1, 2, 3, 4]
    assert (out / "checkpoint_4.pt").is_file()
    assert "[val iter 4] mae " in (out / "train.log").read_text()


def test_two_nodes_on_loopback(data, tmp_path):
    port = str(free_port())
    outs = [tmp_path / "node0", tmp_path / "node1"]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(REPO / "run.py"),
                "--nnodes",
                "2",
                "--node-rank",
                str(rank),
                "--nproc",
                "1",
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                port,
                "--data",
                str(data),
                "--output-dir",
                str(out),
                "--iters",
                "4",
                "--checkpoint-every",
                "2",
                *TINY_TRAIN,
            ],
            cwd=REPO,
            env=cpu_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank, out in enumerate(outs)
    ]
    try:
        results = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (_, err) in zip(procs, results):
        assert p.returncode == 0, err[-3000:]
    assert "world size 2" in (outs[0] / "train.log").read_text()
    assert sorted(p.name for p in outs[0].glob("checkpoint_*.pt")) == ["checkpoint_2.pt", "checkpoint_4.pt"]
    # rank 1 writes nothing: no log, no checkpoints, no TensorBoard
    assert not list(outs[1].glob("checkpoint_*")) and not (outs[1] / "train.log").exists()
    assert not (outs[1] / "tb").exists()
