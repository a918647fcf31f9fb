"""``compare``'s visual comparison: which images it shows (by the methods' per-image MAE, or by
name), its columns, its print geometry (7.16 in at 300 dpi, one row height, aspect kept), missing
maps, data sets without images, and the cache that keeps an unchanged figure."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from ignite_r3net import cli
from ignite_r3net.evaluation.figures import GAP_IN, HEADER_IN, MISSING_FACE, WIDTH_IN

SIZES = {"a": (40, 60), "b": (60, 40), "c": (50, 50), "d": (36, 72), "e": (48, 64)}  # stem: (H, W)
PNG_WIDTH = round(WIDTH_IN * 300)
BELOW_HEADER = round(HEADER_IN * 300)  # the first pixel row below the column names


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def _mask(h: int, w: int) -> np.ndarray:
    """A white box in the left part of the middle rows: the outer rows and the middle column are black."""
    mask = np.zeros((h, w), np.uint8)
    mask[int(0.4 * h) : int(0.6 * h), int(0.1 * w) : int(0.4 * w)] = 255
    return mask


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Data set ``Set`` (name.jpg beside name.png), and maps of ``M1`` (close to the masks) and ``M2``
    (noisier, with a different amount per image, and no map of ``e``)."""
    root = tmp_path_factory.mktemp("visual")
    rng = np.random.default_rng(4)
    (root / "Set").mkdir()
    for i, (stem, (h, w)) in enumerate(SIZES.items()):
        mask = _mask(h, w)
        Image.fromarray(mask).save(root / "Set" / f"{stem}.png")
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(root / "Set" / f"{stem}.jpg")
        for method, noise in (("M1", 10.0), ("M2", 20.0 + 25.0 * i)):
            if method == "M2" and stem == "e":
                continue
            folder = root / "methods" / method / "Set"
            folder.mkdir(parents=True, exist_ok=True)
            saliency = np.clip(mask * 0.8 + np.abs(rng.normal(0, noise, (h, w))), 0, 255).astype(np.uint8)
            Image.fromarray(saliency).save(folder / f"{stem}.png")
    return root


def _compare(bench: Path, out: Path, *extra: str, methods: tuple[str, ...] = ("M1", "M2"), data: str = "Set") -> int:
    args = ["compare", "--datasets", f"Set={bench / data}", "--methods"]
    args += [f"{m}={bench / 'methods' / m}" for m in methods]
    return cli.main([*args, "--out", str(out), "--allow-missing", *extra])


def _mae(bench: Path, method: str, stem: str) -> float:
    """The table's MAE of one map (PySODMetrics' ``MAE``): the map min-max normalised, the mask
    binarised at 128."""
    saliency = np.asarray(Image.open(bench / "methods" / method / "Set" / f"{stem}.png"), dtype=np.float64) / 255
    saliency = (saliency - saliency.min()) / (saliency.max() - saliency.min())
    mask = np.asarray(Image.open(bench / "Set" / f"{stem}.png")) > 128
    return float(np.abs(saliency - mask).mean())


def _runs(line: np.ndarray, start: int = 0) -> list[tuple[int, int]]:
    """(start, length) of each run of dark pixels (a mask's black) along a line of gray values, from ``start``."""
    line = line[start:]
    dark = np.concatenate([[False], line < 60, [False]])
    edges = np.flatnonzero(np.diff(dark.astype(int)))
    return [(start + int(s), int(e - s)) for s, e in zip(edges[::2], edges[1::2])]


def test_the_figure_shows_where_the_methods_differ_most_at_print_size(
    bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    assert _compare(bench, out, "--show", "3") == 0
    record = json.loads((out / "figures" / "visual_Set.json").read_text())
    assert record["columns"] == ["Image", "GT", "M1", "M2"]  # the image, the truth, methods in order
    spread = {s: abs(_mae(bench, "M2", s) - _mae(bench, "M1", s)) for s in SIZES if s != "e"} | {"e": 0.0}
    expected = sorted(SIZES, key=lambda s: (-spread[s], s))[:3]
    assert record["stems"] == expected
    per_image = {row["image"]: row for row in csv.DictReader((out / "per_image" / "Set.csv").open())}
    for stem in expected:
        assert record["mae"][stem]["M1"] == pytest.approx(_mae(bench, "M1", stem), abs=1e-9)
        assert record["mae"][stem]["M1"] == float(per_image[stem]["M1/mae"])  # the CSV's and the table's MAE

    png = np.asarray(Image.open(out / "figures" / "visual_Set.png").convert("L"))
    assert png.shape[1] == PNG_WIDTH  # a two-column paper's width at 300 dpi
    pdf = (out / "figures" / "visual_Set.pdf").read_bytes()
    assert re.search(rb"/MediaBox \[ *0 0 515\.52 ", pdf)  # 7.16 in, in points
    assert len(re.findall(rb"/Subtype */Image", pdf)) == 3 * 4  # raster cells under vector text

    # the GT column: rows of one height, each cell with its mask's aspect
    column = (WIDTH_IN - 3 * GAP_IN) / 4
    gt_centre = round((column + GAP_IN + column / 2) * 300)
    rows = _runs(png[:, gt_centre], BELOW_HEADER)  # the masks' middle column is black from top to bottom
    assert len(rows) == 3 and max(h for _, h in rows) - min(h for _, h in rows) <= 1
    for (top, height), stem in zip(rows, expected):
        slot = png[top + height // 10, round((column + GAP_IN) * 300) : round((2 * column + GAP_IN) * 300)]
        (_, width), *others = _runs(slot)
        assert not others  # one cell of dark pixels in the column's slot
        h, w = SIZES[stem]
        assert width == pytest.approx(height * w / h, abs=2)


def test_show_stems_picks_by_hand_and_marks_a_missing_map(bench: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert _compare(bench, out, "--show-stems", "e", "a") == 0
    record = json.loads((out / "figures" / "visual_Set.json").read_text())
    assert record["stems"] == ["e", "a"]  # as given
    png = np.asarray(Image.open(out / "figures" / "visual_Set.png").convert("RGB"))
    column = (WIDTH_IN - 3 * GAP_IN) / 4
    m2_centre = round((3 * (column + GAP_IN) + column / 2) * 300)
    gt_centre = round((column + GAP_IN + column / 2) * 300)
    top, height = _runs(png[:, gt_centre, 0], BELOW_HEADER)[0]  # the first row: e, whose M2 map is missing
    grey = tuple(int(MISSING_FACE[i : i + 2], 16) for i in (1, 3, 5))
    assert tuple(png[top + height // 6, m2_centre]) == grey  # the empty cell's face, away from its cross

    assert _compare(bench, tmp_path / "x", "--show-stems", "a", "zz", "yy") == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines()[-1].startswith("error: --show-stems: no mask of Set is named zz, yy")
    assert not (tmp_path / "x").exists()  # refused before any work


@pytest.mark.slow  # over 1 s: beyond the fast tier's budget (docs/development.md#tests)
def test_an_unchanged_figure_is_kept_and_a_changed_one_redrawn(bench: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    figure = out / "figures" / "visual_Set.png"
    assert _compare(bench, out, "--show", "2") == 0
    drawn = figure.stat().st_mtime_ns
    capsys.readouterr()
    assert _compare(bench, out, "--show", "2") == 0
    assert "figure of Set: kept" in capsys.readouterr().out and figure.stat().st_mtime_ns == drawn
    assert _compare(bench, out, "--show", "2", methods=("M2", "M1")) == 0  # another column order
    assert "figure of Set: 2 image(s) drawn" in capsys.readouterr().out
    assert json.loads((out / "figures" / "visual_Set.json").read_text())["columns"] == ["Image", "GT", "M2", "M1"]
    assert _compare(bench, out, "--show", "0") == 0
    assert "figure of Set" not in capsys.readouterr().out


def test_a_masks_folder_gives_a_figure_without_images(bench: Path, tmp_path: Path, capsys) -> None:
    masks = tmp_path / "masks"
    masks.mkdir()
    for stem in SIZES:
        (masks / f"{stem}.png").write_bytes((bench / "Set" / f"{stem}.png").read_bytes())
    args = ["compare", "--datasets", f"Set={masks}", "--methods", f"M1={bench / 'methods' / 'M1'}"]
    assert cli.main([*args, "--out", str(tmp_path / "out"), "--show", "2"]) == 0
    assert "figure of Set: no image column" in capsys.readouterr().err
    record = json.loads((tmp_path / "out" / "figures" / "visual_Set.json").read_text())
    assert record["columns"] == ["GT", "M1"]
    # one method: the images where its MAE is largest
    assert record["stems"] == sorted(SIZES, key=lambda s: (-_mae(bench, "M1", s), s))[:2]
