"""--amp, --channels-last and --workers train, are recorded in config.json, and the fp16 GradScaler
is checkpointed and restored."""

from __future__ import annotations

import json

import pytest
from helpers import TINY_TRAIN, log_iterations, make_tiny_dataset

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


def test_bf16_with_dataloader_workers(data, tmp_path):
    args = ["--data", str(data), "--output-dir", str(tmp_path), "--iters", "2", "--checkpoint-every", "2"]
    assert main([*args, "--amp", "bf16", *TINY_TRAIN, "--workers", "2"]) == 0
    assert "scaler" not in load_checkpoint(tmp_path / "checkpoint_2.pt")
    assert json.loads((tmp_path / "config.json").read_text())["workers"] == 2
