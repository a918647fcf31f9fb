"""--amp, --channels-last and --workers reach the training step through the command line, are
recorded in config.json, and the fp16 GradScaler is checkpointed and restored."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import TINY_TRAIN, log_iterations, make_tiny_dataset, training_conv_outputs

from ignite_r3net.checkpoint_io import load_checkpoint
from ignite_r3net.cli import main

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    train, _ = make_tiny_dataset(tmp_path_factory.mktemp("data"), n=6)
    return train


@pytest.mark.slow
def test_fp16_scaler_is_checkpointed_and_resumed(data, tmp_path):
    # three steps in all: CPU fp16 is emulated, ~5 s a step whatever the crop
    args = ["--data", str(data), "--output-dir", str(tmp_path), "--iters", "2", "--checkpoint-every", "1"]
    args += ["--amp", "fp16", "--channels-last", *TINY_TRAIN]
    assert main(args) == 0
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["amp"] == "fp16" and config["channels_last"] is True
    state = load_checkpoint(tmp_path / "checkpoint_1.pt")
    assert state["scaler"]["scale"] > 0
    final = load_checkpoint(tmp_path / "checkpoint_2.pt")

    (tmp_path / "checkpoint_2.pt").unlink()
    assert main([*args, "--resume", "auto"]) == 0
    resumed = load_checkpoint(tmp_path / "checkpoint_2.pt")
    assert resumed["scaler"] == final["scaler"]
    assert sorted(log_iterations(tmp_path / "train.log")) == [1, 2]
    assert "resumed from" in (tmp_path / "train.log").read_text()
    assert "note: --amp fp16 on the CPU is emulated" in (tmp_path / "train.log").read_text()


@pytest.mark.slow  # over 1 s: beyond the fast tier's budget (docs/development.md#tests)
def test_bf16_and_channels_last_reach_the_training_step_with_dataloader_workers(data, tmp_path):
    """Through the command line (this process, as ``--nproc 1`` runs): every convolution of the
    training step computes in bf16 and writes channels-last, the model's layers as well as the stem
    (test_training_step.py checks the step alone, each option on and off)."""
    args = ["--data", str(data), "--output-dir", str(tmp_path), "--iters", "2", "--checkpoint-every", "2"]
    with training_conv_outputs() as outputs:
        assert main([*args, "--amp", "bf16", "--channels-last", *TINY_TRAIN, "--workers", "2"]) == 0
    # more than one channel and pixel: a 1x1 map or a single channel is in every layout at once
    outputs = [o for o in outputs if o.shape[1] > 1 and o.shape[2] * o.shape[3] > 1]
    assert len(outputs) > 2 * 20  # two iterations
    assert {o.dtype for o in outputs} == {torch.bfloat16}
    assert all(o.is_contiguous(memory_format=torch.channels_last) and not o.is_contiguous() for o in outputs)
    assert "scaler" not in load_checkpoint(tmp_path / "checkpoint_2.pt")
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["amp"], config["channels_last"], config["workers"]) == ("bf16", True, 2)
