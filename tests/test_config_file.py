"""``train --config FILE``: a run's saved config.json reruns its recipe; the options given on the
command line win over the file, also when they equal the defaults; a bad file is one error line
naming the key."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from ignite_r3net import cli
from ignite_r3net.config import TrainConfig
from ignite_r3net.model.r3net import build_backbone
from ignite_r3net.training import start
from ignite_r3net.training.start import resolve_initial_weights

WEIGHTS = {"source": "imagenet", "file": "/cache/resnet18.pth", "sha256": "ab" * 32}


class Started(list):
    """The configs ``train`` would have started, and in ``weights`` the starting weights each expected."""

    weights: list


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Started:
    """What ``train`` would have started (the command line is all these tests check)."""
    seen = Started()
    seen.weights = []

    def train(config: TrainConfig, expected_weights: dict | None = None) -> None:
        seen.append(config)
        seen.weights.append(expected_weights)

    monkeypatch.setattr(start, "train", train)
    return seen


def _saved(tmp_path: Path, **values) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(values), encoding="utf-8")
    return path


def test_the_saved_recipe_with_the_given_options_in_its_place(tmp_path: Path, started: list[TrainConfig]) -> None:
    saved = _saved(
        tmp_path,
        **{
            "lr": 0.007,
            "iters": 32,
            "crop": 64,
            "backbone": "resnet18",
            "channels_last": True,
            "output_dir": "runs/a",
            "data": "runs/a/synthetic/train",  # what --data synthetic is saved as
            "val_data": "runs/a/synthetic/val",
            "resume": "runs/a/checkpoint_16.pt",  # that run's start, not its recipe
            "weights": WEIGHTS,
        },
    )
    # --iters 8000 and --crop 300 are the defaults: given, they still replace the saved values
    args = ["--config", str(saved), "--iters", "8000", "--crop", "300", "--no-channels-last", "--output-dir", "b"]
    assert cli.main(["train", *args]) == 0
    given = {"iters", "crop", "channels_last", "output_dir"}  # the saved file says none were given
    expected = TrainConfig(lr=0.007, backbone="resnet18", output_dir="b", given=frozenset(given))
    assert started == [expected] and started.weights == [WEIGHTS]


def test_the_saved_device_is_where_that_run_computed_not_an_order(tmp_path: Path, started: list[TrainConfig]) -> None:
    """A run saved on GPUs reruns with --config on a machine without: the device is chosen anew."""
    saved = _saved(tmp_path, lr=0.007, device="cuda")
    assert cli.main(["train", "--config", str(saved)]) == 0
    assert cli.main(["train", "--config", str(saved), "--device", "cpu"]) == 0
    assert [config.device for config in started] == ["auto", "cpu"]


def test_options_that_choose_the_weights_drop_the_saved_record(tmp_path: Path, started: list[TrainConfig]) -> None:
    saved = _saved(tmp_path, backbone="resnet18", data="mydata", weights=WEIGHTS)
    assert cli.main(["--config", str(saved), "--pretrained", "none"]) == 0
    given = frozenset({"pretrained"})
    assert started == [TrainConfig(backbone="resnet18", data="mydata", pretrained="none", given=given)]
    assert started.weights == [None]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"lr": 0.01, "learning_rate": 0.1}, "unknown key 'learning_rate'"),
        ({"lr": "fast"}, "'lr' must be a number, got \"fast\""),
        ({"iters": 0}, "'iters' must be a positive integer, got 0"),
        ({"iters": 1.5}, "'iters' must be an integer, got 1.5"),
        ({"compile": 1}, "'compile' must be true or false, got 1"),
        ({"amp": "fp8"}, "'amp' must be one of off, bf16, fp16, got 'fp8'"),
        (
            {"backbone": "resnet99"},  # choices of the model package, not of the field
            "'backbone' must be one of resnext101_32x4d, resnext101_32x8d, resnext50_32x4d, resnet101, resnet50, "
            "resnet34, resnet18, or timm:NAME (a timm model), got 'resnet99'",
        ),
        ({"val_data": 3}, "'val_data' must be a string or null, got 3"),
        ([1, 2], "expected a JSON object of options, got list"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture, started: list[TrainConfig], content: object, message: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(content), encoding="utf-8")
    assert cli.main(["--config", str(path)]) == 2
    assert capsys.readouterr().err == f"error: --config {path}: {message}\n"
    assert started == []


def test_a_missing_or_broken_file(tmp_path: Path, capsys: pytest.CaptureFixture, started: list[TrainConfig]) -> None:
    assert cli.main(["--config", str(tmp_path / "nope.json")]) == 2
    assert capsys.readouterr().err.startswith(f"error: --config {tmp_path / 'nope.json'}: cannot read it")
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    assert cli.main(["--config", str(tmp_path / "broken.json")]) == 2
    assert capsys.readouterr().err.startswith(f"error: --config {tmp_path / 'broken.json'}: not JSON")
    assert started == []


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_rerun_of_the_reference_run(reference_run, tmp_path: Path) -> None:
    """The reference run's own config.json, rerun on one process for two iterations into a new folder: the
    options the new run records are the saved ones but for those given, and so is its batch (the --batch-size 2
    the reference run was given, on the one process now)."""
    out = tmp_path / "rerun"
    given = {"output_dir": str(out), "iters": 2, "nproc": 1}
    args = ["--config", str(reference_run.out / "config.json"), "--output-dir", str(out), "--iters", "2"]
    assert cli.main([*args, "--nproc", "1"]) == 0
    assert (out / "checkpoint_2.pt").is_file()
    saved = json.loads((reference_run.out / "config.json").read_text(encoding="utf-8"))
    was = saved.pop("resolved")
    assert (saved["global_batch"], saved["batch_size"], saved["max_batch_per_device"]) == (None, 2, None)
    assert (was["global_batch"], was["batch_size"], was["accumulate"]) == (4, 2, 1)
    rerun = json.loads((out / "config.json").read_text(encoding="utf-8"))
    now = rerun.pop("resolved")
    assert rerun == {**saved, **given, "given": sorted({*saved["given"], *given})}
    assert (now["global_batch"], now["batch_size"], now["accumulate"]) == (2, 2, 1)


def test_changed_starting_weights_are_warned_about(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The saved record is what a rerun expects; the file it fetches now is what it records."""

    file = tmp_path / "resnet18.pth"
    torch.save(build_backbone("resnet18").state_dict(), file)
    sha256 = hashlib.sha256(file.read_bytes()).hexdigest()
    config = TrainConfig(backbone="resnet18", pretrained=str(file))
    assert resolve_initial_weights(config, resumed=False, expected=WEIGHTS)["sha256"] == sha256
    err = capsys.readouterr().err
    assert err.startswith("warning: the starting weights differ") and sha256[:12] in err
    same = dict(WEIGHTS, sha256=sha256)
    assert resolve_initial_weights(config, resumed=False, expected=same)
    assert capsys.readouterr().err == ""
