"""``export --format onnx --for rembg``: rembg runs the file as its own ``u2net_custom`` model and cuts out what
``predict --cutout --size 320`` cuts out; ``--for rembg`` with another format is one line.

rembg resizes every photo to 320x320, normalises it itself and min-max scales the model's first output; the
photo here is 320x320 with a white pixel, so that neither rembg's resize (LANCZOS) nor ours (bilinear) changes
it and rembg's division by the largest value is predict's division by 255: what is left to differ is the
graph's contract (input, normalisation, output) and the 8-bit rounding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from PIL import Image

from ignite_r3net import cli

rembg = pytest.importorskip("rembg", reason="rembg is in the test extra: pip install -e '.[test]'")

SIDE = 320


def _photo(path: Path) -> None:
    """A 320x320 photo: an orange ellipse on a noisy blue ground, one white pixel (its largest value is 255)."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:SIDE, 0:SIDE]
    image = np.array([40, 90, 160]) + rng.integers(0, 30, (SIDE, SIDE, 3))
    image[(yy - 150) ** 2 / 90**2 + (xx - 170) ** 2 / 70**2 < 1] = [250, 200, 30]
    image[0, 0] = 255
    Image.fromarray(image.astype(np.uint8)).save(path)


@pytest.mark.slow
def test_rembg_cuts_out_what_predict_cuts_out(
    tmp_path: Path, spread_checkpoint: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    # rembg >= 2.0.75 takes a model_path only inside U2NET_HOME; nothing may be fetched into it
    home = tmp_path / "u2net"
    model = home / "r3net-rembg.onnx"
    args = ["export", "--checkpoint", str(spread_checkpoint), "--format", "onnx", "--for", "rembg"]
    assert cli.main([*args, "--output", str(model)]) == 0, capsys.readouterr().err
    assert "for rembg: float32 (1, 3, 320, 320)" in capsys.readouterr().out
    graph = onnx.load(str(model)).graph
    dims = [[d.dim_value for d in v.type.tensor_type.shape.dim] for v in (graph.input[0], graph.output[0])]
    assert len(graph.input) == 1 and graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert dims == [[1, 3, SIDE, SIDE], [1, 1, SIDE, SIDE]]

    photos = tmp_path / "photos"
    photos.mkdir()
    _photo(photos / "photo.png")
    out = tmp_path / "cutouts"
    predict = ["predict", "--checkpoint", str(spread_checkpoint), "--input", str(photos), "--output", str(out)]
    assert cli.main([*predict, "--cutout", "--size", str(SIDE), "--workers", "0"]) == 0
    with Image.open(out / "photo.png") as im:
        ours = np.asarray(im)[..., 3].astype(np.float64)

    monkeypatch.setenv("U2NET_HOME", str(home))
    monkeypatch.setattr("pooch.retrieve", lambda *a, **k: pytest.fail("rembg tried to download a model"))
    session = rembg.new_session("u2net_custom", model_path=str(model))
    with Image.open(photos / "photo.png") as photo:
        cutout = rembg.remove(photo, session=session)
    assert cutout.mode == "RGBA" and cutout.size == (SIDE, SIDE)
    theirs = np.asarray(cutout)[..., 3].astype(np.float64)
    assert sorted(p.name for p in home.iterdir()) == ["r3net-rembg.onnx"]

    # rembg stretches the map to 0..255 (min-max), then truncates; ours is rounded before the same stretch, so
    # each of our gray levels becomes 255 / range of theirs: two of them (the pixel's and the minimum's
    # rounding) and one for the truncation bound the difference
    spread = ours.max() - ours.min()
    assert spread > 100, spread  # a map with structure, where a wrong contract shows
    stretched = (ours - ours.min()) / spread * 255
    difference = np.abs(theirs - stretched)
    assert difference.max() <= 1 + 2 * 255 / spread, difference.max()
    assert difference.mean() <= 1, difference.mean()


def test_for_rembg_is_refused_for_other_formats(
    tmp_path: Path, spread_checkpoint: Path, capsys: pytest.CaptureFixture
) -> None:
    for fmt, output in (("torchscript", "r3net.pt"), ("hub", "r3net-hub")):
        args = ["export", "--checkpoint", str(spread_checkpoint), "--format", fmt, "--for", "rembg"]
        assert cli.main([*args, "--output", str(tmp_path / output)]) == 2
        err = capsys.readouterr().err.strip()
        assert err == "error: --for rembg applies to --format onnx only (rembg runs ONNX files)", err
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["export", "--checkpoint", "m.pt", "--format", "onnx", "--for", "u2net", "--output", "m.onnx"])
    assert exit_info.value.code == 2 and "invalid choice: 'u2net'" in capsys.readouterr().err
