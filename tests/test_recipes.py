"""``--recipe``: the values each named recipe sets (against the numbers of the scripts they cite),
options given on the command line replacing them, the global batch of ``r3net-paper`` shared
among processes, the name in config.json, and ``--resume`` refusing another recipe. In-process:
the command line is parsed by the real parser, no worker starts."""

from __future__ import annotations

import json

import pytest

from ignite_r3net import cli
from ignite_r3net.batch_layout import BatchLayout
from ignite_r3net.config import TrainConfig
from ignite_r3net.errors import OptionError
from ignite_r3net.training.recipe_config import batch_layout, config_from_options, layout_note
from ignite_r3net.training.resume import RunRecipe, check_resume_compatible

# zijundeng/R3Net train.py (commit 93b8a34): args = {'iter_num': 6000, 'train_batch_size': 14,
# 'lr': 1e-3, 'lr_decay': 0.9, 'weight_decay': 5e-4, 'momentum': 0.9}, RandomCrop(300),
# RandomRotate(10), torch.manual_seed(2018), one GPU; written out here, not read from the code
ORIGINAL_TRAIN_PY = {
    "iters": 6000,
    "global_batch": 14,  # its batch of 14 on its one GPU
    "lr": 1e-3,
    "lr_power": 0.9,
    "weight_decay": 5e-4,
    "momentum": 0.9,
    "crop": 300,
    "rotate": 10.0,
    "seed": 2018,
    "backbone": "resnext101_32x4d",
    "pretrained": "imagenet",
}


def _config(*argv: str) -> TrainConfig:
    return cli.train_config(cli.build_parser().parse_args(["train", *argv]))


def test_r3net_paper_sets_the_values_of_the_original_train_py():
    config = _config("--recipe", "r3net-paper")
    assert {k: getattr(config, k) for k in ORIGINAL_TRAIN_PY} == ORIGINAL_TRAIN_PY
    assert config.recipe == "r3net-paper" and config.nproc == 1


def test_the_default_recipe_is_the_reference_ddp_scripts():
    config = _config()
    assert config.recipe == "reference-ddp"
    assert (config.iters, config.batch_size) == (8000, 12)
    assert config == TrainConfig()


def test_options_given_replace_the_recipes_values():
    config = _config("--recipe", "r3net-paper", "--iters", "20", "--crop", "64", "--batch-size", "3")
    assert (config.iters, config.crop, config.batch_size) == (20, 64, 3)
    assert (config.lr, config.seed, config.recipe) == (1e-3, 2018, "r3net-paper")


def test_the_recipe_name_and_every_value_land_in_config_json():
    saved = json.loads(_config("--recipe", "r3net-paper", "--iters", "20").to_json())
    assert saved["recipe"] == "r3net-paper"
    assert {k: saved[k] for k in ORIGINAL_TRAIN_PY} == {**ORIGINAL_TRAIN_PY, "iters": 20}
    assert saved["global_batch"] == 14  # shared among the processes at start-up


def _shared(*argv: str, world_size: int) -> int:
    """The images per process start-up chooses once the launch layout is known (``planned_run``)."""
    return batch_layout(_config(*argv), world_size).batch


def test_the_global_batch_of_14_is_split_among_processes():
    assert _shared("--recipe", "r3net-paper", world_size=1) == 14
    assert _shared("--recipe", "r3net-paper", "--nproc", "2", world_size=2) == 7
    paper = _config("--recipe", "r3net-paper", "--nproc", "2")
    said = layout_note(paper, batch_layout(paper, 2))
    assert said is not None and "--recipe r3net-paper: the global batch of 14 images split as 2 processes x 7" in said
    assert _shared("--recipe", "r3net-paper", "--nproc", "7", world_size=7) == 2


def test_a_split_that_cannot_keep_the_global_batch_is_refused_in_one_line():
    with pytest.raises(OptionError) as refused:
        _shared("--recipe", "r3net-paper", "--nproc", "4", world_size=4)
    message = str(refused.value)
    assert len(message.splitlines()) == 1
    assert "global batch of 14" in message and "possible: 1, 2, 7 processes" in message
    assert _shared("--recipe", "r3net-paper", "--nproc", "4", "--batch-size", "4", world_size=4) == 4


def test_train_shares_the_global_batch_among_the_launch_layouts_processes(tmp_path, capsys):
    """``train`` itself splits by the world size of its launch (two nodes of 2 here), after the options are
    checked: a wrong option is named before the split is refused. Nothing starts either time."""
    two_nodes = ["train", "--recipe", "r3net-paper", "--nproc", "2", "--nnodes", "2", "--output-dir", str(tmp_path)]
    assert cli.main([*two_nodes, "--device", "cpu", "--pretrained", "none"]) == 2
    assert "14 images, which 4 processes cannot share equally" in capsys.readouterr().err
    assert cli.main([*two_nodes, "--node-rank", "5"]) == 2
    assert "--node-rank must be in [0, 1], got 5" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_help_lists_what_each_recipe_sets(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "r3net-paper: the original R3Net code's train.py (one GPU); batch 14 over all processes, iters 6000" in text
    assert "reference-ddp: the reference DDP script (the defaults); batch 12 per process, iters 8000" in text


def test_resume_refuses_another_recipe():
    paper = _config("--recipe", "r3net-paper", "--iters", "12", "--batch-size", "2", "--resume", "ckpt.pt")
    checkpoint = {
        "recipe": RunRecipe.of(paper, batch_layout(paper, 1), 12).state_dict(),
        "trainer": {"iteration": 5, "epoch_length": 6, "max_iters": 12},
    }
    check_resume_compatible(paper, batch_layout(paper, 1), checkpoint, 12)
    other = _config("--iters", "12", "--batch-size", "2", "--resume", "ckpt.pt")
    with pytest.raises(OptionError, match=r"--recipe reference-ddp \(checkpoint: r3net-paper\)"):
        check_resume_compatible(other, batch_layout(other, 1), checkpoint, 12)


def test_a_saved_recipe_keeps_its_batch_size_unless_the_recipe_is_given_anew():
    saved = json.loads(_config("--recipe", "r3net-paper", "--nproc", "4", "--batch-size", "4").to_json())
    assert batch_layout(config_from_options({}, base=saved), 2).batch == 4
    anew = config_from_options({"recipe": "r3net-paper", "nproc": 2}, base=saved)
    assert batch_layout(anew, 2).batch == 7
    # a run on 2 processes saved 7 per process beside the global 14: read back, the global batch is kept (on 1
    # process: 14 at once, or 7 x 2 accumulated within --max-batch-per-device 7, as train --config does)
    split = json.loads(_config("--recipe", "r3net-paper", "--nproc", "2", "--batch-size", "7").to_json())
    split["global_batch"] = 14
    split["given"] = []  # a config.json written before it recorded which options were given
    assert batch_layout(config_from_options({"nproc": 1}, base=split), 1).batch == 14
    split["max_batch_per_device"] = 7
    assert batch_layout(config_from_options({"nproc": 1}, base=split), 1) == BatchLayout(1, 7, 2)
