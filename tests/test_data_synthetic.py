"""Synthetic data: deterministic bytes, reuse, regeneration, variety, learnable saliency cue."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ignite_r3net.data import synthetic as synthetic_module
from ignite_r3net.data.checks import check_dataset
from ignite_r3net.data.folder import list_pairs
from ignite_r3net.data.synthetic import ensure_synthetic, make_synthetic_dataset, synthetic_paths


def _digest(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_deterministic_bytes(tmp_path: Path) -> None:
    a = make_synthetic_dataset(tmp_path / "a", n_train=6, n_val=2, seed=5)
    b = make_synthetic_dataset(tmp_path / "b", n_train=6, n_val=2, seed=5)
    assert _digest(a[0]) == _digest(b[0]) and _digest(a[1]) == _digest(b[1])
    c = make_synthetic_dataset(tmp_path / "c", n_train=6, n_val=2, seed=6)
    assert _digest(a[0]) != _digest(c[0])
    assert len(list_pairs(a[0])) == 6 and len(list_pairs(a[1])) == 2
    assert check_dataset(a[0]) == [] and check_dataset(a[1]) == []


def test_reuse_and_regenerate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    train, val = make_synthetic_dataset(tmp_path, n_train=4, n_val=2, seed=1)
    before = _digest(train)

    def _fail(*args, **kwargs):
        raise AssertionError("should have reused the existing set")

    with monkeypatch.context() as m:
        m.setattr(synthetic_module, "_render", _fail)
        make_synthetic_dataset(tmp_path, n_train=4, n_val=2, seed=1)

    # A half-written set (no manifest, a damaged file) is regenerated, identically.
    (tmp_path / "manifest.json").unlink()
    (train / "syn_00001.jpg").write_bytes(b"half")
    make_synthetic_dataset(tmp_path, n_train=4, n_val=2, seed=1)
    assert _digest(train) == before and (tmp_path / "manifest.json").is_file()

    # Different parameters regenerate, and leftovers of the larger set disappear.
    make_synthetic_dataset(tmp_path, n_train=3, n_val=2, seed=1)
    assert len(list_pairs(train)) == 3


def test_ensure_synthetic_paths(tmp_path: Path) -> None:
    train, val = ensure_synthetic(tmp_path, seed=3, n_train=3, n_val=1)
    assert (
        (train, val) == synthetic_paths(tmp_path) == (tmp_path / "synthetic" / "train", tmp_path / "synthetic" / "val")
    )
    assert len(list_pairs(train)) == 3 and len(list_pairs(val)) == 1


def _saturation(rgb: np.ndarray) -> np.ndarray:
    rgb = rgb.astype(np.float64) / 255
    mx, mn = rgb.max(-1), rgb.min(-1)
    return np.where(mx > 0, (mx - mn) / np.maximum(mx, 1e-9), 0)


def test_variety_and_learnable_cue(tmp_path: Path) -> None:
    train, _ = make_synthetic_dataset(tmp_path, n_train=40, n_val=1, seed=2018)
    sizes, soft, fg_sat, bg_sat = set(), 0, [], []
    for image_path, mask_path in list_pairs(train):
        image = np.asarray(Image.open(image_path).convert("RGB"))
        mask = np.asarray(Image.open(mask_path))
        assert image.shape[:2] == mask.shape
        sizes.add(image.shape[:2])
        fraction = (mask > 127).mean()
        assert 0.01 < fraction < 0.6, (image_path, fraction)
        soft += ((mask > 10) & (mask < 245)).mean() > 0.02
        s = _saturation(image)
        fg_sat.append(s[mask > 200].mean())
        bg_sat.append(s[mask < 20].mean())
    assert len(sizes) > 30 and any(h % 2 or w % 2 for h, w in sizes)
    assert all(120 <= v <= 200 for hw in sizes for v in hw)
    assert 3 <= soft <= 30  # some soft-edged masks, most hard
    # The salient object is clearly more saturated than its surroundings in every image.
    assert min(f - b for f, b in zip(fg_sat, bg_sat)) > 0.2


def test_make_data_says_which_files_in_its_folders_it_did_not_write(tmp_path: Path, capsys) -> None:
    """An --out that holds a user's own files: they stay, and would be listed with the generated pairs."""
    from ignite_r3net.cli import main

    (tmp_path / "set" / "train").mkdir(parents=True)
    (tmp_path / "set" / "train" / "holiday.jpg").write_bytes(b"mine")
    assert main(["make-data", "--out", str(tmp_path / "set"), "--train", "2", "--val", "1"]) == 0
    printed = capsys.readouterr()
    assert f"note: --out {tmp_path / 'set'}: train/ also holds 1 file(s) make-data did not write (holiday.jpg)" in (
        printed.err
    )
    assert "2 training pairs to" in printed.out and "1 validation pair to" in printed.out
    assert (tmp_path / "set" / "train" / "holiday.jpg").read_bytes() == b"mine"
