"""``export --format onnx --quantize int8``: a trained model quantizes, and the figures export prints are those
recomputed here from ``predict``'s maps of the INT8 file and of the checkpoint; predict, serve and profile run
the file; a model made sensitive to INT8 on purpose is refused and nothing is written; a wrong option is one
line before any work.

The trained model is ``conftest.timm_run`` (timm's 82k-parameter EfficientNet at head width 0.25, 24
iterations): calibrated on its 8 training images, checked on its 4 held-out ones."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from conftest import TIMM_ITERS
from helpers import make_tiny_dataset
from PIL import Image

from ignite_r3net import cli
from ignite_r3net.checkpoint_io import load_checkpoint, model_state_dict
from ignite_r3net.data.decode import load_mask
from ignite_r3net.metrics.saliency import SaliencyMetrics

pytestmark = pytest.mark.timeout(300)

FIGURE = r"(-?\d+\.\d{4})"
REPORT = re.compile(
    rf"INT8 against float: max F {FIGURE} INT8, {FIGURE} float \(change ([+-]\d\.\d{{4}})\); MAE {FIGURE} INT8, "
    rf"{FIGURE} float; MAE between the INT8 and float maps {FIGURE}; on (\d+) held-out images of (\S+)$"
)


def _export(checkpoint: Path, output: Path, calibrate: Path, check: Path, *extra: str) -> list[str]:
    args = ["export", "--checkpoint", str(checkpoint), "--format", "onnx", "--output", str(output)]
    return [*args, "--quantize", "int8", "--calibrate", str(calibrate), "--check-data", str(check), *extra]


def _predict(source: str, model: Path, images: Path, out: Path) -> dict[str, np.ndarray]:
    args = ["predict", source, str(model), "--input", str(images), "--output", str(out), "--batch-size", "1"]
    assert cli.main([*args, "--workers", "0", "--no-progress"]) == 0
    return {p.stem: np.array(Image.open(p)) for p in sorted(out.glob("*.png"))}


@pytest.mark.slow  # an ONNX export, its quantization and its check (~10 s)
def test_a_trained_model_quantizes_and_the_figures_are_predicts_maps_scored(timm_run: Path, tmp_path: Path, capsys):
    checkpoint = timm_run / "out" / f"checkpoint_{TIMM_ITERS}.pt"
    train, val = timm_run / "data" / "train", timm_run / "data" / "val"
    int8 = tmp_path / "r3net-int8.onnx"
    capsys.readouterr()
    assert cli.main(_export(checkpoint, int8, train, val)) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    found = REPORT.match(line)
    assert found is not None, line
    int8_maxf, float_maxf, change, int8_mae, float_mae, between = map(float, found.groups()[:6])
    assert found.group(7, 8) == ("4", str(val))

    maps = {
        "float": _predict("--checkpoint", checkpoint, val, tmp_path / "float"),
        "int8": _predict("--model", int8, val, tmp_path / "int8"),
    }
    recomputed = {}
    for side, side_maps in maps.items():
        metric = SaliencyMetrics()
        for stem, saliency in side_maps.items():
            metric.update(([torch.from_numpy(saliency)], [load_mask(val / f"{stem}.png")[0]]))
        recomputed[side] = metric.compute()
    differences = [np.abs(maps["float"][s].astype(int) - m.astype(int)).mean() / 255 for s, m in maps["int8"].items()]
    assert int8_maxf == pytest.approx(recomputed["int8"]["maxF"], abs=1e-4)
    assert float_maxf == pytest.approx(recomputed["float"]["maxF"], abs=1e-4)
    assert int8_mae == pytest.approx(recomputed["int8"]["mae"], abs=1e-4)
    assert float_mae == pytest.approx(recomputed["float"]["mae"], abs=1e-4)
    assert between == pytest.approx(float(np.mean(differences)), abs=1e-4)
    assert change == pytest.approx(int8_maxf - float_maxf, abs=1e-4) and change >= -0.01  # --max-drop's default
    assert float_maxf > 0.7, "a trained model: confident maps"

    metadata = {p.key: p.value for p in onnx.load(str(int8)).metadata_props}
    assert metadata["backbone"] == "timm:test_efficientnet" and metadata["head_width"] == "0.25"
    assert json.loads(metadata["int8_check"])["int8_maxF"] == pytest.approx(int8_maxf, abs=1e-4)
    assert "static INT8" in metadata["quantization"] and "on 8 images" in metadata["quantization"]
    types = {initializer.data_type for initializer in onnx.load(str(int8)).graph.initializer}
    assert onnx.TensorProto.INT8 in types  # the weights are stored as INT8

    pytest.importorskip("fastapi")
    import httpx
    from serve_helpers import serving

    from ignite_r3net.options.serve import ServeOptions
    from ignite_r3net.serve.app import create_app
    from ignite_r3net.serve.model import load_served_model

    options = ServeOptions(model=str(int8))
    with serving(create_app(load_served_model(options, torch.device("cpu")), options)) as url:
        with httpx.Client(base_url=url, timeout=60) as client:
            image = val / "syn_00000.jpg"
            response = client.post("/predict", files={"image": (image.name, image.read_bytes())})
            served = np.asarray(Image.open(io.BytesIO(response.content))).astype(int)
            assert np.abs(served - maps["int8"]["syn_00000"].astype(int)).max() <= 1

    profile = ["profile", "--checkpoint", str(checkpoint), "--onnx", str(int8), "--size", "48", "48"]
    assert cli.main([*profile, "--warmup", "0", "--repeats", "1", "--json", str(tmp_path / "cost.json")]) == 0
    rows = json.loads((tmp_path / "cost.json").read_text())["rows"]
    assert [row["status"] for row in rows if row["mode"] == "onnx"] == ["ok"]


@pytest.mark.slow  # an ONNX export and its quantization (~10 s)
def test_a_model_made_sensitive_to_int8_is_refused_and_nothing_is_written(timm_run: Path, tmp_path: Path, capsys):
    """One channel of the low-level features set to 10^4 and weighed by nothing after it (the refinement
    blocks' weights for it zeroed): the float model predicts without that channel, but its INT8 file quantizes
    the tensor holding it in steps of about 40, and the other channels vanish. Checked on images without
    masks: the MAE between the INT8 and the float maps, against --max-drop."""
    run = timm_run / "out"
    state = model_state_dict(load_checkpoint(run / f"checkpoint_{TIMM_ITERS}.pt"), "trained")
    state["reduce_low.7.bias"][0] = 1e4  # the last BatchNorm of the low-level features, channel 0
    for block in (1, 3, 5):  # the refinement blocks that take the low-level features: prediction, then channel 0
        state[f"predict{block}.0.weight"][:, 1] = 0
    sensitive = tmp_path / "sensitive" / "best_model_24_maxF=0.8000.pt"
    sensitive.parent.mkdir()
    torch.save(state, sensitive)
    shutil.copy(run / "config.json", sensitive.parent)  # the backbone

    images = tmp_path / "images"  # without masks
    images.mkdir()
    for photo in (timm_run / "data" / "val").glob("*.jpg"):
        shutil.copy(photo, images)
    out = tmp_path / "models" / "int8.onnx"
    capsys.readouterr()
    assert cli.main(_export(sensitive, out, timm_run / "data" / "train", images, "--max-drop", "0.01")) == 1
    err = capsys.readouterr().err.strip()
    found = re.fullmatch(
        rf"error: the INT8 file loses more than --max-drop 0\.01: MAE between the INT8 and float maps {FIGURE} on 4 "
        rf"held-out images of {re.escape(str(images))} \(no masks\); nothing was written",
        err,
    )
    assert found is not None, err
    assert float(found.group(1)) > 0.01
    assert not out.exists() and list(out.parent.iterdir()) == []  # nor a temporary file


def test_int8_options_are_one_line_before_any_work(tmp_path: Path, capsys) -> None:
    """Before the checkpoint is even read (here there is none)."""
    checkpoint = tmp_path / "checkpoint_1.pt"
    train, val = make_tiny_dataset(tmp_path / "data", n=2, n_val=1)
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "out" / "r3net.onnx"
    cases = [
        (["--quantize", "int8", "--check-data", str(val)], "--quantize int8 needs --calibrate DIR"),
        (["--calibrate", str(train)], "--calibrate goes with --quantize int8"),
        (
            ["--quantize", "int8", "--calibrate", str(val), "--check-data", str(val)],
            f"--check-data {val} is the --calibrate folder: the INT8 file is checked on held-out images",
        ),
        (
            ["--quantize", "int8", "--calibrate", str(empty), "--check-data", str(val)],
            f"--calibrate {empty} holds no images",
        ),
        (
            ["--quantize", "int8", "--calibrate", str(train), "--check-data", str(val / "syn_00000.jpg")],
            f"--check-data {val / 'syn_00000.jpg'} is not a folder",
        ),
    ]
    export = ["export", "--checkpoint", str(checkpoint), "--format", "onnx", "--output", str(out)]
    for extra, expected in cases:
        assert cli.main([*export, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {expected}") and len(err.splitlines()) == 1, err
    args = ["export", "--checkpoint", str(checkpoint), "--format", "torchscript", "--output", str(out)]
    assert cli.main([*args[:-1], str(tmp_path / "r3net.pt"), "--quantize", "int8"]) == 2
    assert "--quantize int8 applies to --format onnx without --for" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
