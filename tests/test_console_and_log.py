"""The console is optional and quiet, train.log is complete: a closed stdout or stderr pipe
(``| head``, ``2>&1 | head``) or a stdout closed from the start (``>&-``) never ends a run; ignite's
messages about its internals and the configuration stay off the console unless ``--verbose``."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import ignite.distributed as idist
import pytest
import torch
from helpers import (
    REPO,
    TINY_TRAIN,
    cpu_env,
    free_port,
    log_iterations,
    log_lines,
    make_tiny_dataset,
    plan_of,
    start_cli,
)

from ignite_r3net.config import TrainConfig
from ignite_r3net.console import echo, quiet_library_logs, tolerate_closed_console
from ignite_r3net.training.train_log import TrainLog, header_lines

pytestmark = pytest.mark.timeout(240)


def test_a_closed_console_pipe_ends_the_echo_not_the_log(tmp_path, monkeypatch):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader went away, as `head` does after its lines
    console = os.fdopen(write_end, "w")
    monkeypatch.setattr(sys, "stdout", console)
    log = TrainLog(tmp_path / "train.log")
    log.open(["configuration: {}"], ["training R3Net ..."])
    log.write("[iter 1]")
    log.close()
    console.close()  # its unwritten text goes nowhere, without a second BrokenPipeError
    assert log_lines(tmp_path / "train.log") == [
        "configuration: {}",
        "note: the console was closed; this log goes on here",
        "[iter 1]",
    ]


def test_a_closed_stderr_pipe_is_no_error_either(monkeypatch):
    """Progress lines and warnings go to stderr: with ``2>&1 | head`` its pipe closes too."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    monkeypatch.setattr(sys, "stdout", sys.stdout)  # restored after the test, as stderr is
    monkeypatch.setattr(sys, "stderr", os.fdopen(write_end, "w"))
    tolerate_closed_console()
    print("predict: 1/4 images (25%)", file=sys.stderr, flush=True)  # raised BrokenPipeError before
    assert not echo("warning: ...", sys.stderr)  # and whoever asks learns that nobody reads it
    sys.stderr.close()


@pytest.mark.slow
@pytest.mark.parametrize("piped", ["stdout", "stdout and stderr"])
def test_training_piped_into_head_goes_on_to_the_end(tmp_path, piped):
    """``python run.py --nproc 2 ... | head -1`` and ``... 2>&1 | head -1``: rank 0 (a spawned
    process) meets the closed pipe, and with ``2>&1`` the progress lines meet it too."""
    train, _ = make_tiny_dataset(tmp_path / "data", n=8, n_val=1)
    out = tmp_path / "out"
    # 2 iterations, both after the pipe closed (the first line comes before any): the run goes on to its end
    args = ["--nproc", "2", "--data", str(train), "--output-dir", str(out), "--iters", "2"]
    args += ["--checkpoint-every", "2", "--master-port", str(free_port()), *TINY_TRAIN]
    proc = start_cli(args, stderr_to_stdout=piped == "stdout and stderr")
    try:
        first = proc.stdout.readline()
        proc.stdout.close()  # what `head -1` does after its line
        err = proc.stderr.read() if proc.stderr else ""
        proc.wait(timeout=200)
    finally:
        proc.kill()
    assert first.startswith("training R3Net (resnet18) on 8 pairs")
    assert proc.returncode == 0, (err or (out / "train.log").read_text())[-3000:]
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err[-3000:]
    assert sorted(log_iterations(out / "train.log")) == [1, 2]
    assert "note: the console was closed; this log goes on here" in log_lines(out / "train.log")
    assert (out / "checkpoint_2.pt").is_file()


@pytest.mark.slow
def test_a_stdout_closed_from_the_start_is_no_error(tmp_path):
    """``python run.py --nproc 2 ... >&-`` then ``predict ... >&-``: Python starts with ``sys.stdout`` None, and the
    spawned ranks inherit the launcher's descriptor 1. The run trains to the end and train.log says the console
    was closed; predict writes every map; neither prints a traceback."""
    train, val = make_tiny_dataset(tmp_path / "data", n=8, n_val=2)
    out = tmp_path / "out"

    def closed_stdout(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(REPO / "run.py"), *args],
            preexec_fn=lambda: os.close(1),  # what `>&-` does
            stderr=subprocess.PIPE,
            cwd=tmp_path,
            env=cpu_env(),
            text=True,
            timeout=200,
        )

    trained = closed_stdout("--nproc", "2", "--data", str(train), "--output-dir", str(out), "--iters", "2",
                            "--master-port", str(free_port()), "--no-progress", *TINY_TRAIN)  # fmt: skip
    assert trained.returncode == 0 and "Traceback" not in trained.stderr, trained.stderr[-3000:]
    assert sorted(log_iterations(out / "train.log")) == [1, 2]
    assert "note: the console was closed; this log goes on here" in log_lines(out / "train.log")
    maps = tmp_path / "maps"
    predicted = closed_stdout("predict", "--checkpoint", str(out / "checkpoint_2.pt"), "--input", str(val),
                              "--output", str(maps), "--workers", "0")  # fmt: skip
    assert predicted.returncode == 0 and "Traceback" not in predicted.stderr, predicted.stderr[-3000:]
    assert len(list(maps.glob("*.png"))) == len(list(val.glob("*.jpg"))) == 2


def _launcher_messages(capfd) -> str:
    with idist.Parallel(backend=None) as parallel:
        parallel.run(lambda local_rank: None)
    return capfd.readouterr().err


def test_ignite_launcher_messages_only_with_verbose(capfd):
    quiet_library_logs(verbose=False)
    assert _launcher_messages(capfd) == ""
    quiet_library_logs(verbose=True)
    said = _launcher_messages(capfd)
    assert "ignite.distributed.launcher.Parallel INFO: - Run '<function" in said and "End of run" in said
    quiet_library_logs(verbose=False)


def test_the_console_gets_the_configuration_only_with_verbose():
    config = TrainConfig(data=["/data/a"])
    data_sets = [{"folder": "/data/a", "pairs": 12, "listing": ""}]
    header, console = header_lines(plan_of(config, 2, data_sets=data_sets), None, 0, torch.device("cpu"))
    assert header[0].startswith("configuration: {") and len(header[0].splitlines()) == 1
    assert console[0] == (
        "training R3Net (resnext101_32x4d) on 12 pairs (/data/a): world size 2, global batch 24, "
        "8000 iterations, output runs/r3net"
    )
    assert not any(line.startswith(("configuration", "world size")) for line in console)
    verbose = plan_of(dataclasses.replace(config, verbose=True), 2, data_sets=data_sets)
    verbose_header, verbose_console = header_lines(verbose, None, 0, torch.device("cpu"))
    assert verbose_console == [console[0], *verbose_header]  # the summary line, then the detail
