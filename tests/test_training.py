"""End-to-end training: what ``python run.py --nproc 2`` writes (the log, checkpoints, TensorBoard,
poly LR, validation), resume refusals, and two nodes on loopback.

Most tests read the shared reference run (conftest.py); the exact resume after a kill and the
torchrun launch are in test_resume_exact.py, the SLURM launches in test_slurm.py."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys

import pytest
import torch
from helpers import (
    LOG_TIMESTAMP,
    REFERENCE_EVERY,
    REFERENCE_ITERS,
    REPO,
    TINY_TRAIN,
    cpu_env,
    free_port,
    log_iterations,
    log_lines,
    read_scalars,
    reference_args,
)
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from ignite_r3net import cli

pytestmark = pytest.mark.timeout(300)

ITERS = REFERENCE_ITERS
SAVED = [REFERENCE_EVERY, 2 * REFERENCE_EVERY, ITERS]  # 5, 10 and the last iteration


def poly_lr(base_lr: float, iteration: int, iters: int, power: float) -> float:
    """The reference DDP script's poly LR for 1-based ``iteration``: what the scheduler must give."""
    return base_lr * (1 - (iteration - 1) / iters) ** power


def test_log_has_config_and_one_line_per_iteration(reference_run):
    out, proc = reference_run.out, reference_run.proc
    log = "\n".join(log_lines(out / "train.log"))  # every line starts with its time (checked there)
    assert log.startswith("configuration: {")
    assert "world size 2, 2 images per process, global batch 4" in log
    assert "note: backbone from random weights" in log  # --pretrained none: the log says so
    lines = log_iterations(out / "train.log")
    assert sorted(lines) == list(range(1, ITERS + 1))
    # rank 0 alone writes: each iteration appears exactly once
    assert sum(line.startswith("[iter ") for line in log.splitlines()) == ITERS
    assert f"[iter {ITERS}]" in proc.stdout
    config = json.loads((out / "config.json").read_text())
    assert config["nproc"] == 2 and config["iters"] == ITERS and config["workers"] == 2


def test_log_lines_start_with_the_local_time_and_its_offset(reference_run):
    started = datetime.datetime.fromtimestamp((reference_run.out / "config.json").stat().st_mtime).astimezone()
    # a file's mtime is the kernel's coarse clock, up to a tick behind the clock the log reads (7 ms seen here):
    # the last line, stamped 20:20:41, had been written at an mtime of 20:20:40.995
    modified = (reference_run.out / "train.log").stat().st_mtime + 0.1
    ended = datetime.datetime.fromtimestamp(modified).astimezone()
    lines = (reference_run.out / "train.log").read_text().splitlines()
    times = [datetime.datetime.fromisoformat(LOG_TIMESTAMP.match(line).group(1)) for line in lines]
    assert all(t.tzinfo is not None and t.utcoffset() == started.utcoffset() for t in times)
    # to the second, in the order written, within the run
    assert times == sorted(times) and started.replace(microsecond=0) <= times[0] and times[-1] <= ended


def test_the_console_shows_one_summary_line_not_the_configuration(reference_run):
    """The configuration is in config.json and train.log; the console gets one line about the run,
    then the iterations and validations, and none of ignite's messages about its internals."""
    out, proc = reference_run.out, reference_run.proc
    lines = proc.stdout.splitlines()
    assert lines[0] == (
        f"training R3Net (resnet18) on 12 pairs ({reference_run.train}): world size 2, global batch 4, "
        f"{ITERS} iterations, output {out}"
    )
    assert "configuration" not in proc.stdout and "world size 2, 2 images per process" not in proc.stdout
    assert lines[-1].startswith("final validation: MAE ")
    for internal in ("Spawn function", "ignite.distributed", "Apply torch DistributedDataParallel", "End of run"):
        assert internal not in proc.stdout + proc.stderr, internal


def test_checkpoints_exactly_at_chosen_iterations(reference_run):
    out = reference_run.out
    assert sorted(p.name for p in out.glob("checkpoint_*.pt")) == sorted(f"checkpoint_{i}.pt" for i in SAVED)
    assert not list(out.glob(".tmp-*"))
    state = torch.load(out / "checkpoint_10.pt", map_location="cpu", weights_only=True)
    assert set(state) >= {"trainer", "model", "optimizer", "lr_scheduler", "loss_meter"}
    assert state["trainer"]["iteration"] == 10
    assert not any(k.startswith("module.") for k in state["model"])


def test_tensorboard_has_losses_and_poly_lr_for_both_groups(reference_run):
    out = reference_run.out
    scalars = read_scalars(out / "tb")
    for tag in ["train/total", "train/loss0", "train/loss6", "train/images_per_s"]:
        assert sorted(scalars[tag]) == list(range(1, ITERS + 1)), tag
    assert all(v > 0 for v in scalars["train/images_per_s"].values())
    for it in range(1, ITERS + 1):
        assert scalars["lr/biases"][it] == pytest.approx(poly_lr(2e-3, it, ITERS, 0.9), rel=1e-6)
        assert scalars["lr/weights"][it] == pytest.approx(poly_lr(1e-3, it, ITERS, 0.9), rel=1e-6)
    assert not any(tag.startswith("lr/group") for tag in scalars)
    validated = [0, *SAVED]  # before training, at checkpoints, at the end
    assert sorted(scalars["val/maxF"]) == validated and sorted(scalars["val/mae"]) == validated
    acc = EventAccumulator(str(out / "tb"), size_guidance={"images": 0, "tensors": 0})
    acc.Reload()
    assert [e.step for e in acc.Images("val/side_outputs")] == validated
    assert [e.step for e in acc.Tensors("val/pr_curve")] == validated
    # the best checkpoint holds the model of the best validation after training started
    best_it = max(SAVED, key=lambda it: scalars["val/maxF"][it])
    [best] = out.glob("best_model_*.pt")
    assert best.name == f"best_model_{best_it}_maxF={scalars['val/maxF'][best_it]:.4f}.pt"


def test_log_lr_column_is_the_poly_formula(reference_run):
    for it, line in log_iterations(reference_run.out / "train.log").items():
        lr = float(line.rsplit("[lr ", 1)[1].rstrip("]"))
        assert lr == pytest.approx(poly_lr(1e-3, it, ITERS, 0.9), abs=1e-13)


def _validation_line(log_path, iteration: int) -> dict[str, str]:
    line = next(line for line in log_lines(log_path) if line.startswith(f"[val iter {iteration}] "))
    words = line.split("] ", 1)[1].split()
    return dict(zip(words[::2], words[1::2]))


def test_validation_scores_the_model_the_checkpoint_holds(reference_run, tmp_path):
    """The logged score is that of the saved model, as `evaluate` computes it. The run's one
    validation image is rank 0's; test_validation.py gives each rank an image of its own and checks
    that rank 1 scores with rank 0's BatchNorm statistics."""
    out = reference_run.out
    logged = _validation_line(out / "train.log", ITERS)
    result = tmp_path / "eval.json"
    checkpoint = out / f"checkpoint_{ITERS}.pt"
    args = ["evaluate", "--checkpoint", str(checkpoint), "--data", str(reference_run.val), "--workers", "0"]
    assert cli.main([*args, "--json", str(result)]) == 0
    [values] = json.loads(result.read_text()).values()
    for key in ("mae", "maxF", "Sm", "maxE", "wF"):
        assert f"{values[key]:.4f}" == logged[key], key


def _resume_args(run, out) -> list[str]:
    return [*reference_args(run.train, run.val, out), "--resume", "auto"]


@pytest.mark.parametrize(
    "change, expected",
    [
        (["--iters", str(ITERS + 8)], f"--iters {ITERS + 8} (checkpoint: {ITERS})"),
        (["--nproc", "1"], "world size (--nproc x --nnodes) 1 (checkpoint: 2)"),
        (["--lr", "0.01"], "--lr 0.01 (checkpoint: 0.001)"),
    ],
)
def test_resume_with_a_changed_recipe_is_refused_before_any_work(reference_run, tmp_path, capsys, change, expected):
    """ignite would keep the checkpoint's schedule and epoch length (a finished run resumed with more
    iterations would restart at learning rate 0): the options must match the run's."""
    (tmp_path / f"checkpoint_{ITERS}.pt").write_bytes((reference_run.out / f"checkpoint_{ITERS}.pt").read_bytes())
    assert cli.main([*_resume_args(reference_run, tmp_path), *change]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --resume ") and expected in err and len(err.splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"checkpoint_{ITERS}.pt"], "nothing written"


def test_resuming_a_finished_run_does_nothing(reference_run, tmp_path, capfd):
    (tmp_path / f"checkpoint_{ITERS}.pt").write_bytes((reference_run.out / f"checkpoint_{ITERS}.pt").read_bytes())
    assert cli.main(_resume_args(reference_run, tmp_path)) == 0
    out, err = capfd.readouterr()
    assert f"is at iteration {ITERS} of {ITERS}; nothing to do" in out
    assert "Spawn function" not in err, "no worker was started"
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"checkpoint_{ITERS}.pt"]


@pytest.mark.slow
def test_two_nodes_on_loopback(reference_data, tmp_path):
    """Node 0 is a process of its own, as a user starts it; node 1 is this process (each spawns its rank)."""
    port = str(free_port())
    outs = [tmp_path / "node0", tmp_path / "node1"]
    node = ["--nnodes", "2", "--nproc", "1", "--master-addr", "127.0.0.1", "--master-port", port]
    train = ["--data", str(reference_data[0]), "--iters", "2", "--checkpoint-every", "1", *TINY_TRAIN]
    # node 1 waits at most 120 s for node 0 (not --dist-timeout's default of 600 s)
    train += ["--dist-timeout", "120"]
    node0 = subprocess.Popen(
        [sys.executable, str(REPO / "run.py"), *node, "--node-rank", "0", "--output-dir", str(outs[0]), *train],
        cwd=REPO,
        env=cpu_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        node1 = cli.main([*node, "--node-rank", "1", "--output-dir", str(outs[1]), *train])
        _, err = node0.communicate(timeout=240)
    finally:
        node0.kill()
    assert node0.returncode == 0 and node1 == 0, err[-3000:]
    assert "world size 2" in (outs[0] / "train.log").read_text()
    assert sorted(p.name for p in outs[0].glob("checkpoint_*.pt")) == ["checkpoint_1.pt", "checkpoint_2.pt"]
    # rank 1 writes nothing: no log, no checkpoints, no TensorBoard
    assert not list(outs[1].glob("checkpoint_*")) and not (outs[1] / "train.log").exists()
    assert not (outs[1] / "tb").exists()
