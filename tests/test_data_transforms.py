"""Augmentation: same distribution and semantics as the reference DDP script's PIL pipeline, image
and mask aligned."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from ignite_r3net.data.loader import SaliencyTrainSet
from ignite_r3net.data.sampler import sample_seed
from ignite_r3net.data.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    DeviceAugment,
    JointCropFlip,
    draw_angle,
    normalize_image,
)


def _gen(i: int) -> torch.Generator:
    return torch.Generator().manual_seed(sample_seed(7, 0, i))


def _l_shape(h: int, w: int) -> np.ndarray:
    """An asymmetric L: any flip or rotation mismatch between image and mask shows up."""
    m = np.zeros((h, w), np.uint8)
    m[h // 8 : 7 * h // 8, w // 8 : w // 8 + w // 4] = 255
    m[7 * h // 8 - h // 4 : 7 * h // 8, w // 8 : 7 * w // 8] = 255
    m[h // 8 : h // 8 + h // 5, 5 * w // 8 : 7 * w // 8] = 255  # a detached tab breaks remaining symmetry
    return m


def _unnormalize(x: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    return x * std + mean


def _iou(a: torch.Tensor, b: torch.Tensor) -> float:
    inter = (a & b).sum().item()
    union = (a | b).sum().item()
    return inter / max(union, 1)


# ------------------------------------------------------------------------------------ alignment


def test_mask_stays_aligned_through_crop_flip_and_rotation(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    (tmp_path / "masks").mkdir()
    # One pair larger than the crop, one smaller (exercises the resize path).
    for stem, (h, w) in {"big": (90, 110), "small": (50, 70)}.items():
        m = _l_shape(h, w)
        image = np.stack([m, 255 - m, np.full_like(m, 90)], -1)
        Image.fromarray(image).save(folder / f"{stem}.png")
        Image.fromarray(m).save(tmp_path / "masks" / f"{stem}.png")
    dataset = SaliencyTrainSet(tmp_path, crop=64, rotate=10)
    keys = [(i % 2, sample_seed(3, 0, i)) for i in range(64)]
    items = [dataset[k] for k in keys]
    images = torch.stack([it["image"] for it in items])
    masks = torch.stack([it["mask"] for it in items])
    angles = torch.stack([it["angle"] for it in items])
    assert images.shape == (64, 3, 64, 64) and images.dtype == torch.uint8
    assert angles.abs().max() > 5  # the rotation path is really exercised

    x, y = DeviceAugment()(images, masks, angles)
    assert x.dtype == torch.float32 and y.dtype == torch.float32
    red = _unnormalize(x)[:, 0] > 0.5
    fg = y[:, 0] > 0.5
    for k in range(64):
        assert fg[k].any()
        assert _iou(red[k], fg[k]) > 0.95, (k, keys[k], _iou(red[k], fg[k]))
    # A flip or a wrong-way rotation of the mask alone would be caught: check the test has teeth.
    assert np.mean([_iou(red[k], fg[k].flip(-1)) for k in range(64)]) < 0.8


# --------------------------------------------------------------------------- seed semantics


def test_small_images_are_resized_to_crop() -> None:
    ramp = torch.arange(30, dtype=torch.uint8).repeat(3, 20, 1) * 8  # (3, 20, 30)
    mask = torch.zeros(1, 20, 30, dtype=torch.uint8)
    mask[..., 5:15, 10:20] = 255
    image, out_mask = JointCropFlip(24)(ramp, mask, _gen(0))
    assert image.shape == (3, 24, 24) and out_mask.shape == (1, 24, 24)
    assert image.dtype == torch.uint8 and out_mask.dtype == torch.uint8
    # Like the reference DDP script: both resized to crop x crop (PIL bilinear / nearest), then the
    # crop is the whole.
    pil = np.asarray(Image.fromarray(ramp.permute(1, 2, 0).numpy()).resize((24, 24), Image.BILINEAR))
    ours = image.permute(1, 2, 0).numpy()
    if not np.array_equal(ours, pil):
        ours = ours[:, ::-1]  # the flip may have fired
    assert np.abs(ours.astype(int) - pil.astype(int)).mean() < 3
    pil_mask = np.asarray(Image.fromarray(mask[0].numpy()).resize((24, 24), Image.NEAREST))
    assert (out_mask[0].numpy() == pil_mask).mean() > 0.95 or (out_mask[0].numpy()[:, ::-1] == pil_mask).mean() > 0.95
    # Exactly the crop size: no resize, no shift, only an optional flip.
    exact = torch.randint(0, 255, (3, 24, 24), dtype=torch.uint8)
    out, _ = JointCropFlip(24)(exact, torch.zeros(1, 24, 24, dtype=torch.uint8), _gen(1))
    assert torch.equal(out, exact) or torch.equal(out, exact.flip(-1))


def test_crop_flip_angle_distribution() -> None:
    h, w, c, n = 21, 27, 16, 4000
    cols = torch.arange(w, dtype=torch.uint8).view(1, 1, w).expand(1, h, w)
    rows = torch.arange(h, dtype=torch.uint8).view(1, h, 1).expand(1, h, w)
    image = torch.cat([cols, rows, cols], 0).contiguous()
    mask = torch.zeros(1, h, w, dtype=torch.uint8)
    crop_flip = JointCropFlip(c)
    xs, ys, flips, angles = [], [], [], []
    for i in range(n):
        g = _gen(i)
        out, _ = crop_flip(image, mask, g)
        angles.append(draw_angle(g, 10))
        flipped = bool(out[0, 0, 0] > out[0, 0, -1])
        flips.append(flipped)
        xs.append(int(out[0].min()))
        ys.append(int(out[1].min()))
    # Flip rate 0.5 within 4 binomial standard deviations.
    assert abs(np.mean(flips) - 0.5) < 4 * math.sqrt(0.25 / n)
    # Offsets: every valid value reached (both ends), roughly equal counts.
    for values, span in ((xs, w - c + 1), (ys, h - c + 1)):
        counts = np.bincount(values, minlength=span)
        assert len(counts) == span and counts.min() > 0
        expected = n / span
        assert np.abs(counts - expected).max() < 5 * math.sqrt(expected)
    # Angles uniform in [-10, 10): range, mean and a Kolmogorov-Smirnov distance at the 1% level.
    a = np.sort(np.array(angles))
    assert a.min() >= -10 and a.max() < 10
    assert abs(a.mean()) < 4 * (20 / math.sqrt(12)) / math.sqrt(n)
    ecdf = np.arange(1, n + 1) / n
    ks = np.max(np.abs(ecdf - (a + 10) / 20))
    assert ks < 1.63 / math.sqrt(n)


def test_rotation_matches_pil_rotate() -> None:
    size = 96
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    smooth = (
        np.stack(
            [
                127 + 100 * np.sin(xx / 9.0) * np.cos(yy / 13.0),
                127 + 100 * np.cos((xx + 2 * yy) / 17.0),
                xx * 2.5,
            ],
            -1,
        )
        .clip(0, 255)
        .astype(np.uint8)
    )
    mask = (((xx - 40) / 25) ** 2 + ((yy - 55) / 15) ** 2 < 1) | ((xx > 60) & (yy < 30) & (xx < 85))
    mask = (mask * 255).astype(np.uint8)
    images = torch.from_numpy(smooth).permute(2, 0, 1).unsqueeze(0).repeat(4, 1, 1, 1)
    masks = torch.from_numpy(mask).view(1, 1, size, size).repeat(4, 1, 1, 1)
    angles = torch.tensor([7.3, -9.1, 3.0, 30.0])
    x, y = DeviceAugment()(images, masks, angles)
    x = _unnormalize(x)
    interior = (xx - size / 2) ** 2 + (yy - size / 2) ** 2 < (0.4 * size) ** 2
    for k, angle in enumerate(angles.tolist()):
        pil_img = np.asarray(Image.fromarray(smooth).rotate(angle, Image.BILINEAR)) / 255.0
        pil_mask = np.asarray(Image.fromarray(mask).rotate(angle, Image.NEAREST)) / 255.0
        ours = x[k].permute(1, 2, 0).numpy()
        diff = np.abs(ours - pil_img)[interior].mean()
        assert diff < 3 / 255, (angle, diff * 255)
        assert (np.round(y[k, 0].numpy()) == pil_mask).mean() > 0.98
        # Black fill in the corners like PIL (zero before normalisation).
        assert np.abs(ours[0, 0]).max() < 1e-6 and pil_img[0, 0].max() == 0
    # The opposite sign would not pass: the comparison can tell the conventions apart.
    wrong = np.asarray(Image.fromarray(smooth).rotate(-30.0, Image.BILINEAR)) / 255.0
    assert np.abs(x[3].permute(1, 2, 0).numpy() - wrong)[interior].mean() > 10 / 255


def test_no_rotation_is_plain_normalisation() -> None:
    images = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
    masks = torch.tensor([0, 128, 255], dtype=torch.uint8).repeat(2, 1, 8, 3)[..., :8]
    x, y = DeviceAugment()(images, masks, torch.zeros(2))
    assert torch.allclose(x, normalize_image(images))
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    assert torch.allclose(x, (images.float() / 255 - mean) / std, atol=1e-6)
    # Soft masks stay soft: value / 255 like the reference DDP script's ToTensor.
    assert torch.allclose(y, masks.float() / 255)
    assert normalize_image(images[0]).shape == (3, 8, 8)


def test_same_key_same_sample() -> None:
    image = torch.randint(0, 256, (3, 40, 50), dtype=torch.uint8)
    mask = torch.randint(0, 256, (1, 40, 50), dtype=torch.uint8)
    t = JointCropFlip(32)
    a = t(image, mask, _gen(5))
    b = t(image, mask, _gen(5))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
