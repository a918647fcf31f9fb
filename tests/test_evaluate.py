"""``evaluate``: maps vs PySODMetrics, checkpoints on 1 and 2 processes, backbone resolution."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import blob_mask, pysod_reference
from PIL import Image

from ignite_r3net import cli
from ignite_r3net.errors import OptionError
from ignite_r3net.evaluation.maps import dataset_names
from ignite_r3net.metrics.keys import METRIC_KEYS
from ignite_r3net.model.backbones import BACKBONES
from ignite_r3net.model.r3net import R3Net
from ignite_r3net.model.trained_model import infer_backbone, read_trained_weights

REPO = Path(__file__).resolve().parents[1]
SIZES = [(64, 80), (70, 50), (48, 64), (66, 66), (40, 72)]  # (H, W); odd count on purpose


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five image/mask pairs of different sizes in the MSRA10K layout."""
    root = tmp_path_factory.mktemp("data") / "setA"
    root.mkdir()
    rng = np.random.default_rng(3)
    for i, (h, w) in enumerate(SIZES):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(root / f"img{i}.jpg")
        Image.fromarray(blob_mask(rng, h, w)).save(root / f"img{i}.png")
    return root


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A resnet18 R3Net with random weights as a training checkpoint and as a plain state_dict."""
    folder = tmp_path_factory.mktemp("ckpt")
    torch.manual_seed(0)
    state = R3Net("resnet18").state_dict()
    training, plain = folder / "checkpoint_10.pt", folder / "best_model_10_maxF=0.5000.pt"
    torch.save({"model": state, "trainer": {"iteration": 10}}, training)
    torch.save(state, plain)
    return training, plain


def test_maps_equal_pysodmetrics_and_unmatched_listed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rng = np.random.default_rng(7)
    maps, gts = tmp_path / "method" / "ECSSD", tmp_path / "ECSSD" / "GT"
    maps.mkdir(parents=True)
    gts.mkdir(parents=True)
    reference = []
    for i, (h, w) in enumerate(SIZES[:4]):
        gt = blob_mask(rng, h, w)
        noisy = np.clip(gt * 0.7 + rng.normal(60, 40, (h, w)), 0, 255).astype(np.uint8)
        Image.fromarray(gt).save(gts / f"s{i}.png")
        if i == 1:  # a colour map: read as gray, as the toolboxes do
            rgb = np.stack([noisy, np.roll(noisy, 3, 1), noisy // 2], -1)
            Image.fromarray(rgb).save(maps / f"s{i}.png")
            noisy = np.asarray(Image.fromarray(rgb).convert("L"))
        elif i == 2:
            Image.fromarray(noisy).save(maps / f"s{i}.bmp")
        else:
            Image.fromarray(noisy).save(maps / f"s{i}.png")
        reference.append((noisy, gt))
    Image.fromarray(reference[0][0]).save(maps / "only_map.png")
    Image.fromarray(reference[0][1]).save(gts / "only_mask.png")
    out = tmp_path / "scores.json"

    assert cli.main(["evaluate", "--maps", str(maps), "--gt", str(gts), "--json", str(out)]) == 0
    captured = capsys.readouterr()
    assert "only_map.png" in captured.err and "only_mask.png" in captured.err
    got = json.loads(out.read_text())["ECSSD"]  # a generic GT folder is named after its parent
    assert got["images"] == 4
    expected = pysod_reference(reference)
    for key in METRIC_KEYS:
        assert got[key] == pytest.approx(float(expected[key]), rel=1e-9, abs=1e-12), key
    assert "ECSSD" in captured.out and "maxF" in captured.out


def test_r3net_protocol_marks_the_columns_it_changes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    maps, gts = tmp_path / "maps", tmp_path / "gt"
    maps.mkdir()
    gts.mkdir()
    rng = np.random.default_rng(2)
    gt = blob_mask(rng, 40, 60)
    Image.fromarray(gt).save(gts / "a.png")
    Image.fromarray(np.clip(gt * 0.8 + rng.normal(30, 20, gt.shape), 0, 255).astype(np.uint8)).save(maps / "a.png")
    for protocol in ("standard", "r3net"):
        out = tmp_path / f"{protocol}.json"
        args = ["evaluate", "--maps", str(maps), "--gt", str(gts), "--protocol", protocol, "--json", str(out)]
        assert cli.main(args) == 0
        printed = capsys.readouterr().out.splitlines()
        (row,) = json.loads(out.read_text()).values()
        if protocol == "standard":
            assert "†" not in "".join(printed) and "protocol" not in row
            continue
        header = printed[0].split()
        assert header[2:] == ["mae†", "maxF†", "meanF", "adpF", "Sm", "maxE", "meanE", "adpE", "wF"]
        assert printed[-1].startswith("† --protocol r3net: mae and maxF as the original R3Net code computes them")
        assert row["protocol"] == "r3net" and row["protocol_metrics"] == ["mae", "maxF"]


def test_maps_resized_and_user_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    maps, gts = tmp_path / "maps", tmp_path / "gt"
    maps.mkdir()
    gts.mkdir()
    gt = np.zeros((40, 60), np.uint8)
    gt[10:30, 20:40] = 255
    Image.fromarray(gt).save(gts / "a.png")
    Image.fromarray(gt[::2, ::2]).save(maps / "a.png")  # half size
    assert cli.main(["evaluate", "--maps", str(maps), "--gt", str(gts)]) == 0
    assert "1 map(s) resized" in capsys.readouterr().err

    (maps / "a.png").rename(maps / "b.png")
    assert cli.main(["evaluate", "--maps", str(maps), "--gt", str(gts)]) == 2
    assert "no map in" in capsys.readouterr().err
    assert cli.main(["evaluate", "--maps", str(maps)]) == 2
    assert "--maps needs --gt" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: --maps and --checkpoint exclude each other
        cli.main(["evaluate", "--maps", str(maps), "--checkpoint", "x.pt", "--gt", str(gts)])


# one torch thread per process, as the suite's child processes have (conftest.one_thread)
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.slow
def test_checkpoint_one_and_two_processes_identical(
    tmp_path: Path, dataset: Path, checkpoints: tuple[Path, Path], capfd: pytest.CaptureFixture
) -> None:
    training, plain = checkpoints
    one, two, saved = tmp_path / "one.json", tmp_path / "two.json", tmp_path / "maps"
    assert (
        cli.main(
            [
                "evaluate",
                "--checkpoint",
                str(training),
                "--data",
                str(dataset),
                "--workers",
                "0",
                "--backbone",
                "resnet18",
                "--json",
                str(one),
                "--per-image",
                str(tmp_path / "one.csv"),
                "--save-maps",
                str(saved),
            ]
        )
        == 0
    )

    capfd.readouterr()
    # the plain state_dict: no --backbone, no config.json, so the backbone is inferred
    args = ["evaluate", "--checkpoint", str(plain), "--data", str(dataset), "--workers", "0", "--json", str(two)]
    assert cli.main([*args, "--nproc", "2", "--backend", "gloo", "--per-image", str(tmp_path / "two.csv")]) == 0
    printed, said = capfd.readouterr()
    # ignite's launcher messages ("Spawn function '<function ...>' in 2 processes") need --verbose
    assert "ignite.distributed" not in said and "<function" not in said, said
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert a == b  # exactly: the sums are made in data set order whatever the sharding
    assert (tmp_path / "one.csv").read_text() == (tmp_path / "two.csv").read_text()  # rows sorted by stem
    assert a["setA"]["images"] == 5 and set(METRIC_KEYS) <= set(a["setA"])
    assert "setA" in printed

    written = sorted(p.name for p in (saved / "setA").iterdir())
    assert written == [f"img{i}.png" for i in range(5)]
    for i, (h, w) in enumerate(SIZES):
        with Image.open(saved / "setA" / f"img{i}.png") as im:
            assert im.mode == "L" and im.size == (w, h)


def test_named_data_set_and_per_image_scores(
    tmp_path: Path, dataset: Path, checkpoints: tuple[Path, Path], capsys: pytest.CaptureFixture
) -> None:
    training, _ = checkpoints
    scores, per_image = tmp_path / "scores.json", tmp_path / "per_image.csv"
    args = ["evaluate", "--checkpoint", str(training), "--data", f"Mine={dataset}", "--workers", "0"]
    assert cli.main([*args, "--json", str(scores), "--per-image", str(per_image)]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("Mine ")  # the row's name
    row = json.loads(scores.read_text())["Mine"]
    with per_image.open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["dataset", "image", *METRIC_KEYS]
    assert [(r["dataset"], r["image"]) for r in rows] == [("Mine", f"img{i}") for i in range(len(SIZES))]
    for key in ("mae", "meanF", "adpF", "Sm", "meanE", "adpE", "wF"):  # means of per-image values
        assert np.mean([float(r[key]) for r in rows]) == pytest.approx(row[key], abs=1e-12), key


def test_per_image_scores_of_maps_and_the_r3net_columns(tmp_path: Path) -> None:
    maps, gts = tmp_path / "maps", tmp_path / "gt"
    maps.mkdir()
    gts.mkdir()
    rng = np.random.default_rng(4)
    pairs = []
    for stem in ("b", "a"):
        gt = blob_mask(rng, 30, 40)
        pred = np.clip(gt * 0.7 + rng.normal(40, 30, gt.shape), 0, 255).astype(np.uint8)
        Image.fromarray(gt).save(gts / f"{stem}.png")
        Image.fromarray(pred).save(maps / f"{stem}.png")
        pairs.append((stem, pred, gt))
    out = tmp_path / "r.csv"
    assert cli.main(["evaluate", "--maps", str(maps), "--gt", str(gts), "--per-image", str(out)]) == 0
    with out.open() as f:
        rows = {r["image"]: r for r in csv.DictReader(f)}
    for stem, pred, gt in pairs:  # each row is the image alone, as PySODMetrics scores it
        expected = pysod_reference([(pred, gt)])
        for key in METRIC_KEYS:
            assert float(rows[stem][key]) == pytest.approx(expected[key], abs=1e-6), (stem, key)
    assert (
        cli.main(["evaluate", "--maps", str(maps), "--gt", str(gts), "--per-image", str(out), "--protocol", "r3net"])
        == 0
    )
    assert out.read_text().splitlines()[0] == "dataset,image,mae (r3net),maxF (r3net),meanF,adpF,Sm,maxE,meanE,adpE,wF"


def test_backbone_inferred_for_every_backbone() -> None:
    for name in BACKBONES:
        with torch.device("meta"):
            state = R3Net(name).state_dict()
        assert infer_backbone(state) == name
        assert infer_backbone({f"module.{k}": v for k, v in state.items()}) == name


def test_backbone_from_config_and_errors(
    tmp_path: Path, dataset: Path, checkpoints: tuple[Path, Path], capsys: pytest.CaptureFixture
) -> None:
    training, plain = checkpoints
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"backbone": "resnet34"}))
    (run / "ckpt.pt").write_bytes(plain.read_bytes())  # a resnet18 model beside a config naming resnet34
    with pytest.raises(OptionError, match="does not fit backbone resnet34"):
        read_trained_weights(run / "ckpt.pt")
    assert read_trained_weights(run / "ckpt.pt", "resnet18").backbone == "resnet18"  # --backbone wins
    odd = tmp_path / "odd.pt"
    torch.save({"w": torch.zeros(1)}, odd)
    with pytest.raises(OptionError, match="--backbone"):
        read_trained_weights(odd)

    assert cli.main(["evaluate", "--checkpoint", str(training), "--data", str(dataset), "--backbone", "resnet34"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: checkpoint") and "resnet34" in err and len(err.strip().splitlines()) == 1
    assert cli.main(["evaluate", "--checkpoint", str(tmp_path / "nope.pt"), "--data", str(dataset)]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_dataset_names_are_distinct(tmp_path: Path) -> None:
    names = dataset_names([tmp_path / "a" / "test", tmp_path / "b" / "test", tmp_path / "DUTS" / "masks"])
    assert names == ["a_test", "b_test", "DUTS"]
    assert len(set(dataset_names([tmp_path / "x", tmp_path / "x"]))) == 2
