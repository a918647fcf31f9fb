"""``--size`` / ``--max-side``: the model sees the image at the inference size, the map comes back
at the image's own size, where it is scored and written; exported models honour it too."""

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
from ignite_r3net.inference.engine import inference_shape, saliency_at_input_size
from ignite_r3net.options import InferenceOptions, PredictOptions

PHOTOS = {"wide": (48, 80), "tall": (72, 40)}  # (H, W)


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Photos with masks beside them (MSRA10K layout)."""
    root = tmp_path_factory.mktemp("photos") / "set"
    root.mkdir()
    rng = np.random.default_rng(5)
    for name, (h, w) in PHOTOS.items():
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(root / f"{name}.jpg")
        Image.fromarray(blob_mask(rng, h, w)).save(root / f"{name}.png")
    return root


def test_inference_shape() -> None:
    assert inference_shape(300, 400) == (300, 400)
    assert inference_shape(300, 400, size=352) == (352, 352)
    assert inference_shape(300, 400, max_side=200) == (150, 200)  # aspect kept
    assert inference_shape(1500, 1000, max_side=512) == (512, 341)  # 1000 * 512 / 1500 = 341.3
    assert inference_shape(120, 90, max_side=200) == (120, 90)  # never scaled up


def test_the_model_sees_the_inference_size_and_the_map_comes_back() -> None:
    seen = []

    def gray(batch: torch.Tensor) -> torch.Tensor:  # stands in for a model: the image's gray level
        seen.append((batch.dtype, tuple(batch.shape[-2:])))
        return batch.float().mean(1, keepdim=True) / 255

    # a horizontal ramp: bilinear resampling down and back up reproduces it away from the borders
    ramp = torch.linspace(0, 255, 90).round().to(torch.uint8).expand(1, 3, 60, 90).contiguous()
    back = saliency_at_input_size(gray, ramp, max_side=45)
    assert seen == [(torch.uint8, (30, 45))] and back.shape == (1, 1, 60, 90)
    expected = ramp[:, :1].float() / 255
    assert (back - expected)[..., 4:-4].abs().max() < 1.5 / 255
    saliency_at_input_size(gray, ramp, size=32)
    assert seen[-1] == (torch.uint8, (32, 32))
    assert torch.equal(saliency_at_input_size(gray, ramp), expected)  # no size: the image itself


def test_size_and_max_side_exclude_each_other(photos: Path, capsys: pytest.CaptureFixture) -> None:
    args = ["predict", "--checkpoint", "c.pt", "--input", str(photos), "--output", "o", "--size", "32"]
    with pytest.raises(SystemExit):
        cli.main([*args, "--max-side", "64"])
    assert "not allowed with argument" in capsys.readouterr().err
    options = PredictOptions(
        checkpoint="c.pt", inputs=["x"], output="o", inference=InferenceOptions(size=32, max_side=9)
    )
    with pytest.raises(OptionError, match="--size and --max-side exclude each other"):
        options.validate()
    assert cli.main(["evaluate", "--maps", str(photos), "--gt", str(photos), "--max-side", "32"]) == 2
    assert "--max-side needs --checkpoint" in capsys.readouterr().err


def _map_arrays(folder: Path) -> dict[str, np.ndarray]:
    return {p.stem: np.asarray(Image.open(p)) for p in sorted(folder.glob("*.png"))}


def _predict(photos: Path, out: Path, source: list[str], *extra: str) -> dict[str, np.ndarray]:
    args = ["predict", *source, "--input", *(str(photos / f"{n}.jpg") for n in PHOTOS), "--workers", "0"]
    assert cli.main([*args, "--output", str(out), *extra]) == 0
    return _map_arrays(out)


def test_predict_at_an_inference_size(photos: Path, spread_checkpoint: Path, tmp_path: Path) -> None:
    checkpoint = ["--checkpoint", str(spread_checkpoint)]
    full = _predict(photos, tmp_path / "full", checkpoint)
    small = _predict(photos, tmp_path / "small", checkpoint, "--max-side", "40")
    same = _predict(photos, tmp_path / "same", checkpoint, "--max-side", "80")  # no side above 80
    for name, (h, w) in PHOTOS.items():
        assert full[name].shape == small[name].shape == (h, w)  # the photo's own size
        assert not np.array_equal(full[name], small[name])
        assert np.array_equal(full[name], same[name])  # every photo at full resolution


@pytest.mark.slow  # the TorchScript export
def test_exported_models_honour_the_inference_size(
    photos: Path, spread_checkpoint: Path, exported_torchscript: Path, tmp_path: Path
) -> None:
    checkpoint = _predict(photos, tmp_path / "ckpt", ["--checkpoint", str(spread_checkpoint)], "--size", "32")
    exported = _predict(photos, tmp_path / "exported", ["--model", str(exported_torchscript)], "--size", "32")
    for name, (h, w) in PHOTOS.items():
        assert exported[name].shape == (h, w)
        assert np.abs(exported[name].astype(int) - checkpoint[name]).max() <= 1


def test_evaluate_scores_at_the_mask_size(
    photos: Path, spread_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    common = ["--checkpoint", str(spread_checkpoint), "--data", str(photos), "--workers", "0"]
    full, small, maps = tmp_path / "full.json", tmp_path / "small.json", tmp_path / "maps"
    assert cli.main(["evaluate", *common, "--json", str(full)]) == 0
    assert cli.main(["evaluate", *common, "--size", "32", "--json", str(small), "--save-maps", str(maps)]) == 0
    written = _map_arrays(maps / "set")
    assert {n: a.shape for n, a in written.items()} == PHOTOS  # maps at the mask's size
    # the numbers are those of the maps written, scored against the masks by evaluate --maps
    rescored = tmp_path / "rescored.json"
    assert cli.main(["evaluate", "--maps", str(maps / "set"), "--gt", str(photos), "--json", str(rescored)]) == 0
    capsys.readouterr()
    got, again = json.loads(small.read_text())["set"], json.loads(rescored.read_text())["set"]
    assert got == again
    assert got["mae"] != json.loads(full.read_text())["set"]["mae"]
