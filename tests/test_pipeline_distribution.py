"""Our augmentation draws from the same distribution as the reference DDP script's pipeline.

The reference side is the baseline of ``benchmarks/bench_pipeline.py`` (a re-implementation of
the reference DDP script's ``joint_transforms`` with ``random``); ours is read back from what
``SaliencyTrainSet`` really returns for a coordinate image (crop offsets, flips) and its angles.
The two samples are compared with two-sample tests (Kolmogorov-Smirnov on offsets and angles, a
two-proportion test on flips); ``tests/test_data_transforms.py`` already checks ours alone against
the ideal distributions. Seeds are fixed, so the tests are deterministic.
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ignite_r3net.data.loader import SaliencyTrainSet
from ignite_r3net.data.sampler import sample_seed
from ignite_r3net.data.transforms import DeviceAugment

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_pipeline import ReferenceImageFolder, ReferenceJointTransform  # noqa: E402

H, W, CROP, ROTATE, N = 40, 56, 24, 10.0, 3000


def _ks_2samp(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Two-sample Kolmogorov-Smirnov statistic and its asymptotic p-value (ties allowed)."""
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    d = float(np.max(np.abs(np.searchsorted(a, grid, "right") / len(a) - np.searchsorted(b, grid, "right") / len(b))))
    en = math.sqrt(len(a) * len(b) / (len(a) + len(b)))
    lam = (en + 0.12 + 0.11 / en) * d
    p = 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))
    return d, min(1.0, max(0.0, p))


@pytest.fixture(scope="module")
def coord_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One lossless pair whose red channel is the column and green the row of each pixel."""
    root = tmp_path_factory.mktemp("coords")
    (root / "images").mkdir()
    (root / "masks").mkdir()
    xx, yy = np.meshgrid(np.arange(W, dtype=np.uint8), np.arange(H, dtype=np.uint8))
    Image.fromarray(np.stack([xx, yy, np.full_like(xx, 7)], -1)).save(root / "images" / "c.png")
    Image.fromarray((xx > W // 2).astype(np.uint8) * 255).save(root / "masks" / "c.png")
    return root


@pytest.fixture(scope="module")
def draws(coord_folder: Path) -> dict[str, dict[str, np.ndarray]]:
    ours = SaliencyTrainSet(coord_folder, crop=CROP, rotate=ROTATE)
    o = {"x": [], "y": [], "flip": [], "angle": []}
    for i in range(N):
        item = ours[(0, sample_seed(11, 0, i))]
        red, green = item["image"][0].int(), item["image"][1].int()
        o["flip"].append(bool(red[0, 0] > red[0, -1]))
        o["x"].append(int(red.min()))
        o["y"].append(int(green.min()))
        o["angle"].append(float(item["angle"]))
    reference = ReferenceJointTransform(CROP, ROTATE, random.Random(5))
    s = {"x": [], "y": [], "flip": [], "angle": []}
    for _ in range(N):
        (x, y), flip, angle = reference.draw(W, H)
        s["x"].append(x)
        s["y"].append(y)
        s["flip"].append(flip)
        s["angle"].append(angle)
    return {"ours": {k: np.array(v) for k, v in o.items()}, "reference": {k: np.array(v) for k, v in s.items()}}


@pytest.mark.parametrize("key, span", [("x", W - CROP), ("y", H - CROP)])
def test_crop_offsets_same_uniform_range(draws: dict, key: str, span: int) -> None:
    ours, reference = draws["ours"][key], draws["reference"][key]
    # same support: every offset 0..span reached by both, nothing outside it
    assert set(ours.tolist()) == set(reference.tolist()) == set(range(span + 1))
    d, p = _ks_2samp(ours.astype(float), reference.astype(float))
    assert p > 0.001, (key, d, p)
    # and the same per-offset frequencies (chi-square homogeneity, 2 x (span+1) table)
    counts = np.stack([np.bincount(ours, minlength=span + 1), np.bincount(reference, minlength=span + 1)])
    expected = counts.sum(0, keepdims=True) * counts.sum(1, keepdims=True) / counts.sum()
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    dof = span
    assert chi2 < dof + 4.5 * math.sqrt(2 * dof), (key, chi2, dof)  # ~ p > 0.001 (normal approximation)


def test_flip_rate_same(draws: dict) -> None:
    a, b = draws["ours"]["flip"].mean(), draws["reference"]["flip"].mean()
    pooled = (a + b) / 2
    z = (a - b) / math.sqrt(pooled * (1 - pooled) * 2 / N)
    assert abs(z) < 3.3, (a, b, z)
    assert abs(a - 0.5) < 3.3 * math.sqrt(0.25 / N)


def test_angles_same_uniform_distribution(draws: dict) -> None:
    ours, reference = draws["ours"]["angle"], draws["reference"]["angle"]
    assert ours.min() >= -ROTATE and ours.max() < ROTATE
    assert reference.min() >= -ROTATE and reference.max() < ROTATE
    assert ours.min() < -ROTATE + 0.05 and ours.max() > ROTATE - 0.05  # both ends of the range reached
    d, p = _ks_2samp(ours, reference)
    assert p > 0.001, (d, p)


def test_small_images_resized_by_both(coord_folder: Path, tmp_path: Path) -> None:
    """Sides smaller than the crop: both pipelines resize to crop x crop, no offset is drawn."""
    ours = SaliencyTrainSet(coord_folder, crop=64, rotate=0)
    item = ours[(0, 3)]
    assert item["image"].shape == (3, 64, 64)
    reference = ReferenceJointTransform(64, 0.0, random.Random(0))
    crop, _, _ = reference.draw(W, H)
    assert crop is None


def test_same_draws_give_same_sample(coord_folder: Path) -> None:
    """Given our draws, the reference DDP script's pipeline produces the same tensors (up to
    interpolation details)."""
    ours = SaliencyTrainSet(coord_folder, crop=CROP, rotate=ROTATE)
    baseline = ReferenceImageFolder(ours.pairs, ReferenceJointTransform(CROP, ROTATE))
    for i in range(20):
        key = (0, sample_seed(3, 0, i))
        item = ours[key]
        red, green = item["image"][0].int(), item["image"][1].int()
        params = ((int(red.min()), int(green.min())), bool(red[0, 0] > red[0, -1]), float(item["angle"]))
        img = Image.open(ours.pairs[0][0]).convert("RGB")
        mask = Image.open(ours.pairs[0][1]).convert("L")
        img, mask = baseline.joint_transform.apply(img, mask, params)
        x_ref, y_ref = baseline.transform(img), baseline.target_transform(mask)
        x, y = DeviceAugment()(item["image"][None], item["mask"][None], item["angle"][None])
        inner = (slice(4, -4), slice(4, -4))  # the rotated border differs by sub-pixel filtering
        assert (x[0][(slice(None), *inner)] - x_ref[(slice(None), *inner)]).abs().mean() < 0.05, i
        assert (y[0][(slice(None), *inner)] == y_ref[(slice(None), *inner)]).float().mean() > 0.97, i
