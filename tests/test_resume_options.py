"""``--resume`` with other options than the run's: each option that would change the run is refused
with the checkpoint's value, and the options the README lets change are accepted and leave the run
as it was. In-process (``check_resume_compatible``) for every option, plus one refusal and one
accepted resume through ``cli.main`` on a real checkpoint."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
import torch
from helpers import TINY_TRAIN, log_iterations, make_tiny_dataset

from ignite_r3net import cli
from ignite_r3net.checkpoint_io import load_checkpoint
from ignite_r3net.config import TrainConfig
from ignite_r3net.errors import OptionError
from ignite_r3net.training.recipe_config import batch_layout
from ignite_r3net.training.resume import check_resume_compatible

pytestmark = pytest.mark.timeout(240)

RUN = TrainConfig(
    iters=12, batch_size=2, crop=32, rotate=10.0, backbone="resnet18", resume="out/checkpoint_5.pt", nproc=2
)
WORLD, PAIRS = 2, 12
# what a checkpoint of RUN records (written out, not taken from the code that writes it)
CHECKPOINT = {
    "recipe": {
        "iters": 12,
        "lr": 1e-3,
        "lr_power": 0.9,
        "momentum": 0.9,
        "weight_decay": 5e-4,
        "batch_size": 2,
        "crop": 32,
        "rotate": 10.0,
        "backbone": "resnet18",
        "seed": 2018,
        "amp": "off",
        "tf32": "on",
        "deterministic": False,
        "world_size": 2,
        "pairs": 12,
    },
    "trainer": {"iteration": 5, "epoch_length": 3, "max_iters": 12},
}


def _refusal(config: TrainConfig, world: int = WORLD, pairs: int = PAIRS) -> str:
    with pytest.raises(OptionError) as refused:
        check_resume_compatible(config, batch_layout(config, world), CHECKPOINT, pairs)
    return str(refused.value)


@pytest.mark.parametrize(
    "field, value, listed",
    [
        ("iters", 20, "--iters 20 (checkpoint: 12)"),
        ("lr", 0.01, "--lr 0.01 (checkpoint: 0.001)"),
        ("lr_power", 1.0, "--lr-power 1.0 (checkpoint: 0.9)"),
        ("momentum", 0.8, "--momentum 0.8 (checkpoint: 0.9)"),
        ("weight_decay", 1e-4, "--weight-decay 0.0001 (checkpoint: 0.0005)"),
        ("batch_size", 3, "--batch-size 3 (checkpoint: 2)"),
        ("crop", 64, "--crop 64 (checkpoint: 32)"),
        ("rotate", 0.0, "--rotate 0.0 (checkpoint: 10.0)"),
        ("backbone", "resnet34", "--backbone resnet34 (checkpoint: resnet18)"),
        ("seed", 7, "--seed 7 (checkpoint: 2018)"),
        ("amp", "bf16", "--amp bf16 (checkpoint: off)"),
        ("tf32", "off", "--tf32 off (checkpoint: on)"),
        ("deterministic", True, "--deterministic True (checkpoint: False)"),
    ],
)
def test_a_changed_recipe_option_is_refused_with_the_checkpoints_value(field, value, listed):
    message = _refusal(dataclasses.replace(RUN, **{field: value}))
    assert message.startswith("--resume out/checkpoint_5.pt: this run differs") and listed in message, message
    assert len(message.splitlines()) == 1


def test_another_world_size_without_the_global_batch_kept_is_refused():
    """3 processes x 2 is a global batch of 6 where the checkpoint trained 4 (another count that keeps the global
    batch is accepted: tests/test_clusters.py)."""
    message = _refusal(dataclasses.replace(RUN, nproc=3), world=3)
    assert "world size (--nproc x --nnodes) 3 (checkpoint: 2)" in message


def test_another_number_of_training_pairs_is_refused():
    # 13 pairs on 2 ranks is still 3 batches of 2 per epoch: only the recipe's count tells
    message = _refusal(RUN, pairs=13)
    assert "training pairs in --data 13 (checkpoint: 12)" in message
    assert "iterations per epoch" not in message


def test_every_changed_option_is_listed_at_once():
    message = _refusal(dataclasses.replace(RUN, crop=64, seed=1, amp="bf16"))
    for listed in ("--crop 64 (checkpoint: 32)", "--seed 1 (checkpoint: 2018)", "--amp bf16 (checkpoint: off)"):
        assert listed in message


@pytest.mark.parametrize(
    "field, value",
    [
        ("keep", 1),
        ("workers", 0),
        ("log_every", 5),
        ("val_every", 2),
        ("val_data", "elsewhere/val"),
        ("checkpoint_every", 4),
    ],
)
def test_run_control_options_may_change(field, value):
    changed = dataclasses.replace(RUN, **{field: value})
    check_resume_compatible(changed, batch_layout(changed, WORLD), CHECKPOINT, PAIRS)


# ------------------------------------------------------------------------- through the command


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory):
    """A 2-iteration run in this process (checkpoints at 1 and 2): its data, validation data, options
    and output folder."""
    root = tmp_path_factory.mktemp("resume-options")
    train, val = make_tiny_dataset(root / "data", n=4, n_val=1)
    args = ["--data", str(train), "--iters", "2", "--checkpoint-every", "1", *TINY_TRAIN]
    out = root / "first"
    assert cli.main([*args, "--output-dir", str(out)]) == 0
    return args, val, out


def _from_first_checkpoint(finished, folder):
    folder.mkdir()
    shutil.copy(finished[2] / "checkpoint_1.pt", folder)
    return folder


def test_a_changed_option_is_refused_before_any_work(finished, tmp_path, capsys):
    args, _, _ = finished
    out = _from_first_checkpoint(finished, tmp_path / "refused")
    capsys.readouterr()
    assert cli.main([*args, "--output-dir", str(out), "--resume", "auto", "--crop", "48"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --resume ") and "--crop 48 (checkpoint: 32)" in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint_1.pt"], "nothing written"


def test_deterministic_and_tf32_cannot_change_on_resume(finished, tmp_path, capsys):
    args, _, first = finished
    assert "tf32" in (first / "config.json").read_text()
    out = _from_first_checkpoint(finished, tmp_path / "refused")
    capsys.readouterr()
    assert cli.main([*args, "--output-dir", str(out), "--resume", "auto", "--deterministic", "--tf32", "off"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--deterministic True (checkpoint: False)" in err and "--tf32 off (checkpoint: on)" in err, err


@pytest.mark.slow  # over 1 s: beyond the fast tier's budget (docs/development.md#tests)
def test_a_resume_with_other_run_control_options_continues_the_same_run(finished, tmp_path):
    """Fewer checkpoints kept, a DataLoader worker, a log line every 2 iterations, checkpoints every
    2 and validation every iteration on data the first run did not validate on: the options take
    effect, and the run ends with the weights of the run that was not interrupted."""
    args, val, first = finished
    out = _from_first_checkpoint(finished, tmp_path / "resumed")
    changed = ["--keep", "1", "--workers", "1", "--log-every", "2", "--checkpoint-every", "2"]
    changed += ["--val-every", "1", "--val-data", str(val)]
    assert cli.main([*args, "--output-dir", str(out), "--resume", "auto", *changed]) == 0
    assert sorted(p.name for p in out.glob("checkpoint_*.pt")) == ["checkpoint_2.pt"]  # --keep 1
    log = (out / "train.log").read_text()
    assert "resumed from" in log and "[val iter 2]" in log
    assert sorted(log_iterations(out / "train.log")) == [2]
    resumed = load_checkpoint(out / "checkpoint_2.pt")["model"]
    uninterrupted = load_checkpoint(first / "checkpoint_2.pt")["model"]
    assert resumed.keys() == uninterrupted.keys()
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in resumed)
