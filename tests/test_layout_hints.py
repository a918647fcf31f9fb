"""Layout mistakes get an error that points to the fix, and the folders ``compare`` accepts are
accepted by ``evaluate`` too: the halves of a data set folder, data set folders given for masks or
images, exported models given as checkpoints, and ``NAME=DIR``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import blob_mask
from PIL import Image

from ignite_r3net import cli
from ignite_r3net.errors import OptionError
from ignite_r3net.evaluation.maps import locate_dataset, named_folders


@pytest.fixture(scope="module")
def duts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DUTS-layout data set folder (DUTS-TE-Image/ + DUTS-TE-Mask/) of four pairs."""
    root = tmp_path_factory.mktemp("sets") / "DUTS-TE"
    (root / "DUTS-TE-Image").mkdir(parents=True)
    (root / "DUTS-TE-Mask").mkdir()
    rng = np.random.default_rng(0)
    for i in range(4):
        Image.fromarray(rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)).save(root / "DUTS-TE-Image" / f"s{i}.jpg")
        Image.fromarray(blob_mask(rng, 40, 56)).save(root / "DUTS-TE-Mask" / f"s{i}.png")
    return root


@pytest.fixture
def checkpoint(spread_checkpoint: Path) -> Path:
    return spread_checkpoint


def _error(args: list[str], capsys: pytest.CaptureFixture) -> str:
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    return err


def test_half_of_a_data_set_names_the_data_set_folder(
    duts: Path, checkpoint: Path, capsys: pytest.CaptureFixture
) -> None:
    for half, side in (("DUTS-TE-Image", "images"), ("DUTS-TE-Mask", "masks")):
        err = _error(["evaluate", "--checkpoint", str(checkpoint), "--data", str(duts / half)], capsys)
        assert err.startswith(f"error: --data: {duts / half} is the {side} folder of the data set {duts}: ")
        assert f"give the data set folder {duts}" in err
    assert cli.main(["check-data", str(duts / "DUTS-TE-Image")]) == 1
    printed = capsys.readouterr().out
    assert "give the data set folder" in printed and "image without mask" not in printed


def test_predict_on_a_data_set_folder_names_its_images(
    duts: Path, checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    args = ["predict", "--checkpoint", str(checkpoint), "--input", str(duts), "--output", str(tmp_path / "o")]
    err = _error(args, capsys)
    assert f"--input {duts} is a data set folder" in err and f"give its images folder {duts / 'DUTS-TE-Image'}" in err


def test_maps_scored_against_a_data_set_folder_as_against_its_masks(
    duts: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    maps = tmp_path / "maps"
    maps.mkdir()
    rng = np.random.default_rng(1)
    for mask in (duts / "DUTS-TE-Mask").iterdir():
        Image.fromarray(rng.integers(0, 256, (40, 56), dtype=np.uint8)).save(maps / mask.name)
    results = {}
    for gt in (duts, duts / "DUTS-TE-Mask"):
        out = tmp_path / f"{gt.name}.json"
        assert cli.main(["evaluate", "--maps", str(maps), "--gt", str(gt), "--json", str(out)]) == 0
        results[gt.name] = json.loads(out.read_text())
    assert results["DUTS-TE"] == {"DUTS-TE": results["DUTS-TE"]["DUTS-TE"]}
    assert results["DUTS-TE"]["DUTS-TE"] == results["DUTS-TE-Mask"][next(iter(results["DUTS-TE-Mask"]))]
    assert results["DUTS-TE"]["DUTS-TE"]["images"] == 4


def test_the_images_half_of_a_data_set_is_never_scored_as_masks(
    duts: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Photos given where masks go would score (as anything decodes as a mask): refused, naming the
    option as typed and the folder to give."""
    maps = tmp_path / "maps"
    (maps / "V").mkdir(parents=True)
    for mask in (duts / "DUTS-TE-Mask").iterdir():
        (maps / "V" / mask.name).write_bytes(mask.read_bytes())
    images = duts / "DUTS-TE-Image"
    err = _error(["evaluate", "--maps", str(maps / "V"), "--gt", str(images)], capsys)
    assert f"--gt {images} is the images folder of the data set {duts}: give the data set folder {duts}" in err
    args = ["compare", "--datasets", f"V={images}", "--methods", f"M={maps}", "--out", str(tmp_path / "c")]
    err = _error(args, capsys)
    assert f"--datasets V={images} is the images folder of the data set {duts}" in err
    assert not (tmp_path / "c").exists()


def test_predict_on_the_masks_half_names_the_images_folder(
    duts: Path, checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    masks = duts / "DUTS-TE-Mask"
    args = ["predict", "--checkpoint", str(checkpoint), "--input", str(masks), "--output", str(tmp_path / "o")]
    err = _error(args, capsys)
    expected = f"--input {masks} is the masks folder of the data set {duts}: give its images folder"
    assert f"{expected} {duts / 'DUTS-TE-Image'}" in err


def test_predict_says_which_pngs_it_takes_for_masks(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from ignite_r3net.evaluation.predict import collect_inputs

    for name in ("a.jpg", "a.png", "b.png"):
        Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / name)
    assert collect_inputs([str(tmp_path)]) == [tmp_path / "a.jpg", tmp_path / "b.png"]
    assert "1 .png file(s) beside an image of the same name taken for masks" in capsys.readouterr().err


def test_locate_dataset_is_what_compare_reads(duts: Path, tmp_path: Path) -> None:
    masks = duts / "DUTS-TE-Mask"
    assert locate_dataset(duts, "--gt DIR") == locate_dataset(masks, "--gt DIR")
    assert (locate_dataset(duts, "--gt DIR").masks, locate_dataset(duts, "--gt DIR").data) == (masks, duts)
    alone = tmp_path / "GT"
    alone.mkdir()
    Image.fromarray(np.zeros((4, 4), np.uint8)).save(alone / "a.png")
    assert (locate_dataset(alone, "--gt DIR").masks, locate_dataset(alone, "--gt DIR").data) == (alone, None)


def test_an_exported_model_given_as_checkpoint_says_which_command_takes_it(
    duts: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    torchscript = tmp_path / "r3net.pt"
    torch.jit.save(torch.jit.trace(torch.nn.Conv2d(3, 1, 1), torch.zeros(1, 3, 8, 8)), str(torchscript))
    onnx = tmp_path / "r3net.onnx"
    onnx.write_bytes(b"\x08\x08\x12\x07pytorch")  # the start of an ONNX protobuf; never parsed
    for path, kind in ((torchscript, "TorchScript"), (onnx, "ONNX")):
        for args in (
            ["evaluate", "--checkpoint", str(path), "--data", str(duts)],
            ["export", "--checkpoint", str(path), "--format", "torchscript", "--output", str(tmp_path / "x.pt")],
        ):
            err = _error(args, capsys)
            assert f"{path} is a model written by 'export' ({kind})" in err and f"predict --model {path}" in err
            assert "weights_only" not in err
        compare = ["compare", "--datasets", f"V={duts}", "--methods", f"M={path}", "--out", str(tmp_path / "c")]
        err = _error(compare, capsys)
        assert err.startswith(f"error: --methods M: checkpoint {path} is a model written by 'export' ({kind})"), err


def test_named_folders(tmp_path: Path) -> None:
    (tmp_path / "a=b").mkdir()  # an existing folder whose name holds '=' is a folder, not NAME=DIR
    named = named_folders(["ECSSD=/data/x/GT", str(tmp_path / "a=b"), "/data/HKU-IS/masks"], "--data")
    assert named == [("ECSSD", "/data/x/GT"), ("a=b", str(tmp_path / "a=b")), ("HKU-IS", "/data/HKU-IS/masks")]
    with pytest.raises(OptionError, match="the name 'ECSSD' is given twice; name the folders with NAME=DIR"):
        named_folders(["ECSSD=/a", "/b/ECSSD"], "--data")
    with pytest.raises(OptionError, match="NAME must not start with"):
        named_folders([".hidden=/a"], "--data")


def test_torch_advice_to_load_unsafely_never_reaches_the_user() -> None:
    from ignite_r3net.errors import load_error_reason

    advice = "Weights only load failed. Re-running `torch.load` with `weights_only` set to `False` will likely succeed"
    for error in (RuntimeError(advice), RuntimeError("Cannot use ``weights_only=True`` with TorchScript archives")):
        assert "weights_only" not in load_error_reason(error)


def test_a_file_that_is_no_checkpoint_gets_a_reason_a_user_can_act_on(tmp_path: Path) -> None:
    """torch's unpickler says ``101`` for a text file, ``EOFError`` for an empty one and ``[Errno 22]``
    for a cut one: the user reads what the file is instead."""
    from ignite_r3net.checkpoint_io import load_checkpoint
    from ignite_r3net.errors import CheckpointError

    whole = tmp_path / "whole.pt"
    torch.save({"weight": torch.zeros(4000)}, whole)
    contents = {"notes.pth": b"this is not a checkpoint\n", "empty.pt": b"", "cut.pt": whole.read_bytes()[:5000]}
    for name, content in contents.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(CheckpointError) as refused:
            load_checkpoint(tmp_path / name)
        assert str(refused.value) == (
            f"cannot load checkpoint {tmp_path / name}: it is not a readable PyTorch file (corrupt, truncated, "
            "or another format)"
        )
