"""A small, deterministic, learnable salient-object data set (MSRA10K layout) for smoke tests and demos: one or
two saturated, textured objects of varied shapes and edges near the centre on a cluttered, desaturated background."""

from __future__ import annotations

import colorsys
import json
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ..atomic_files import atomic_output, read_json_object, write_text

_FORMAT = 1  # bump when the generator changes so old sets are regenerated
_MANIFEST = "manifest.json"
_SPLITS = {"train": 0, "val": 1}


# Signed distance fields in pixels (negative inside), vectorised over the whole image
def _sdf_polygon(u: np.ndarray, v: np.ndarray, a: float, b: float, rng: np.random.Generator) -> np.ndarray:
    # Points on an ellipse are in convex position, so the max of edge half-plane distances is the SDF inside.
    n = int(rng.integers(3, 8))
    # Jittered, evenly spread angles avoid degenerate slivers.
    ang = np.sort((np.arange(n) + rng.uniform(0, 0.7, n)) * 2 * np.pi / n)
    px, py = a * np.cos(ang), b * np.sin(ang)
    d = np.full(u.shape, -np.inf, dtype=np.float32)
    for i in range(n):  # loop over edges (<= 7), not pixels
        x0, y0, x1, y1 = px[i], py[i], px[(i + 1) % n], py[(i + 1) % n]
        ex, ey = x1 - x0, y1 - y0
        length = np.hypot(ex, ey) + 1e-9
        nx, ny = ey / length, -ex / length  # outward normal for counter-clockwise vertices
        d = np.maximum(d, nx * (u - x0) + ny * (v - y0))
    return d


def _sdf_radial(u: np.ndarray, v: np.ndarray, a: float, b: float, rng: np.random.Generator, star: bool) -> np.ndarray:
    su, sv = u / a, v / b
    rho = np.sqrt(su**2 + sv**2)
    theta = np.arctan2(sv, su)
    if star:
        k = int(rng.integers(4, 8))
        radius = 1.0 + rng.uniform(0.25, 0.45) * np.sin(k * theta + rng.uniform(0, 2 * np.pi))
    else:
        radius = np.ones_like(theta)
        for j in range(2, 5):
            radius = radius + rng.uniform(0.05, 0.18) * np.sin(j * theta + rng.uniform(0, 2 * np.pi))
    return (rho - radius) * min(a, b)


def _shape_sdf(xx, yy, cx, cy, a, b, rng: np.random.Generator) -> np.ndarray:
    kind = str(rng.choice(["ellipse", "polygon", "star", "blob"]))
    phi = rng.uniform(0, np.pi)
    c, s = np.cos(phi), np.sin(phi)
    dx, dy = xx - cx, yy - cy
    u, v = c * dx + s * dy, -s * dx + c * dy  # rotated about the centre
    if kind == "ellipse":
        return (np.sqrt((u / a) ** 2 + (v / b) ** 2) - 1.0) * min(a, b)
    if kind == "polygon":
        return _sdf_polygon(u, v, a, b, rng)
    return _sdf_radial(u, v, a, b, rng, star=kind == "star")


def _smooth_noise(h: int, w: int, cells: int, rng: np.random.Generator) -> np.ndarray:
    """Bilinearly upsampled Gaussian noise in [-1, 1]-ish, shape (h, w)."""
    gh, gw = cells + 1, max(2, int(round(cells * w / h)) + 1)
    grid = rng.standard_normal((gh, gw)).astype(np.float32)
    ys = np.linspace(0, gh - 1, h, dtype=np.float32)
    xs = np.linspace(0, gw - 1, w, dtype=np.float32)
    y0 = np.minimum(ys.astype(np.int64), gh - 2)
    x0 = np.minimum(xs.astype(np.int64), gw - 2)
    fy, fx = (ys - y0)[:, None], (xs - x0)[None, :]
    g00, g01 = grid[y0][:, x0], grid[y0][:, x0 + 1]
    g10, g11 = grid[y0 + 1][:, x0], grid[y0 + 1][:, x0 + 1]
    return (g00 * (1 - fy) * (1 - fx) + g01 * (1 - fy) * fx + g10 * fy * (1 - fx) + g11 * fy * fx) / 1.5


def _stripes(xx, yy, rng: np.random.Generator) -> np.ndarray:
    """Stripes in [0, 1] with random direction and period."""
    phi = rng.uniform(0, np.pi)
    period = rng.uniform(5, 18)
    s = np.sin(2 * np.pi * (xx * np.cos(phi) + yy * np.sin(phi)) / period)
    return (0.5 + 0.5 * (np.sign(s) if rng.random() < 0.5 else s)).astype(np.float32)


def _gradient(xx, yy, h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    phi = rng.uniform(0, 2 * np.pi)
    t = (xx - w / 2) * np.cos(phi) + (yy - h / 2) * np.sin(phi)
    return np.clip(0.5 + t / max(h, w), 0, 1).astype(np.float32)


def _vivid(rng: np.random.Generator) -> np.ndarray:
    r, g, b = colorsys.hsv_to_rgb(rng.uniform(0, 1), rng.uniform(0.7, 1.0), rng.uniform(0.65, 1.0))
    return np.array([r, g, b], dtype=np.float32) * 255


def _muted(rng: np.random.Generator) -> np.ndarray:
    return np.clip(rng.uniform(60, 200) + rng.uniform(-18, 18, 3), 0, 255).astype(np.float32)


def _background(xx, yy, h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    t = _gradient(xx, yy, h, w, rng)[..., None]
    bg = _muted(rng) * (1 - t) + _muted(rng) * t
    grey_noise = _smooth_noise(h, w, int(rng.integers(2, 7)), rng)[..., None] * rng.uniform(10, 30)
    tint_noise = np.stack([_smooth_noise(h, w, 3, rng) for _ in range(3)], -1) * 6
    bg = bg + grey_noise + tint_noise
    for _ in range(int(rng.integers(2, 6))):  # muted distractor shapes and textured patches
        a, b = rng.uniform(0.06, 0.25) * min(h, w), rng.uniform(0.06, 0.25) * min(h, w)
        sdf = _shape_sdf(xx, yy, rng.uniform(0, w), rng.uniform(0, h), a, b, rng)
        alpha = np.clip(0.5 - sdf, 0, 1)[..., None] * rng.uniform(0.5, 0.9)
        fill = _muted(rng)
        if rng.random() < 0.5:
            fill = fill + (_stripes(xx, yy, rng)[..., None] - 0.5) * rng.uniform(15, 40)
        bg = bg * (1 - alpha) + fill * alpha
    return bg


def _object_fill(xx, yy, h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    c1 = _vivid(rng)
    kind = rng.integers(0, 4)
    if kind == 0:  # flat
        return np.broadcast_to(c1, (h, w, 3)).astype(np.float32)
    if kind in (1, 2):  # two vivid colours in stripes or a gradient
        t = (_stripes(xx, yy, rng) if kind == 1 else _gradient(xx, yy, h, w, rng))[..., None]
        return c1 * (1 - t) + _vivid(rng) * t
    return c1 + _smooth_noise(h, w, int(rng.integers(6, 14)), rng)[..., None] * 30


def _render(rng: np.random.Generator, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """One (image uint8 (h, w, 3), mask uint8 (h, w)) sample."""
    h, w = (int(v) for v in rng.integers(size[0], size[1] + 1, 2))
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32) + 0.5
    image = _background(xx, yy, h, w, rng)
    alpha_total = np.zeros((h, w), np.float32)
    n_objects = 2 if rng.random() < 0.2 else 1
    for k in range(n_objects):
        # The main object sits near the centre (a prior real saliency sets share); a second is off-centre.
        spread = 0.15 if k == 0 else 0.3
        cx = w * (0.5 + rng.uniform(-spread, spread))
        cy = h * (0.5 + rng.uniform(-spread, spread))
        scale = rng.uniform(0.15, 0.32) if k == 0 else rng.uniform(0.08, 0.16)
        aspect = np.exp(rng.uniform(-0.6, 0.6))
        r = scale * min(h, w)
        sdf = _shape_sdf(xx, yy, cx, cy, r * np.sqrt(aspect), r / np.sqrt(aspect), rng)
        if rng.random() < 0.3:
            alpha = np.clip(0.5 - sdf / rng.uniform(3, 8), 0, 1)  # soft edge, kept soft in the mask
        else:
            alpha = (sdf <= 0).astype(np.float32)
        fill = _object_fill(xx, yy, h, w, rng)
        image = image * (1 - alpha[..., None]) + fill * alpha[..., None]
        alpha_total = np.maximum(alpha_total, alpha)
    image = image + rng.standard_normal(image.shape, dtype=np.float32) * np.float32(rng.uniform(1, 5))
    image = np.clip(np.rint(image), 0, 255).astype(np.uint8)
    mask = np.clip(np.rint(alpha_total * 255), 0, 255).astype(np.uint8)
    return image, mask


def _names(n: int) -> list[str]:
    return [f"syn_{i:05d}{ext}" for i in range(n) for ext in (".jpg", ".png")]


def _write_image(path: Path, array: np.ndarray, **save: Any) -> None:
    # Atomic, so concurrent writers of the same (deterministic) bytes do not corrupt each other; not durable (fsyncs
    # cost milliseconds per file): the manifest, written durably last, decides whether a set is complete
    with atomic_output(path, durable=False) as tmp:
        Image.fromarray(array).save(tmp, **save)


def _complete(out_dir: Path, params: dict) -> bool:
    manifest = read_json_object(out_dir / _MANIFEST) or {}
    return manifest.get("params") == params and all(
        (out_dir / split / name).is_file() for split in _SPLITS for name in _names(params[f"n_{split}"])
    )


def make_synthetic_dataset(
    out_dir: str | Path, n_train: int = 400, n_val: int = 60, size: tuple[int, int] = (120, 200), seed: int = 2018
) -> tuple[Path, Path]:
    """Write ``out_dir/train`` and ``out_dir/val`` (``syn_00000.jpg`` + ``.png`` pairs, byte-identical for the same
    arguments, a complete set reused) and return them; ``size``: (min, max) of the height and of the width."""
    out_dir = Path(out_dir)
    lo, hi = int(size[0]), int(size[1])
    if not 8 <= lo <= hi:
        raise ValueError(f"size must be (min, max) with 8 <= min <= max, got {size}")
    params = {"format": _FORMAT, "seed": int(seed), "n_train": int(n_train), "n_val": int(n_val), "size": [lo, hi]}
    train_dir, val_dir = out_dir / "train", out_dir / "val"
    if _complete(out_dir, params):
        return train_dir, val_dir
    (out_dir / _MANIFEST).unlink(missing_ok=True)
    for split, n in (("train", n_train), ("val", n_val)):
        folder = out_dir / split
        folder.mkdir(parents=True, exist_ok=True)
        expected = set(_names(n))
        for stale in folder.glob("syn_*"):  # leftovers of a bigger earlier set would join the listing
            if stale.name not in expected:
                stale.unlink(missing_ok=True)
        for i in range(n):
            # One generator per sample: any sample can be regenerated alone, and n does not shift others.
            rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, _SPLITS[split], i])
            image, mask = _render(rng, (lo, hi))
            _write_image(folder / f"syn_{i:05d}.jpg", image, format="JPEG", quality=90)
            _write_image(folder / f"syn_{i:05d}.png", mask, format="PNG")
    write_text(json.dumps({"params": params}, indent=1), out_dir / _MANIFEST)
    return train_dir, val_dir


def synthetic_paths(output_dir: str | Path) -> tuple[Path, Path]:
    """Where a run keeps its synthetic data: ``<output_dir>/synthetic/{train,val}``."""
    root = Path(output_dir) / "synthetic"
    return root / "train", root / "val"


def ensure_synthetic(
    output_dir: str | Path, seed: int = 2018, n_train: int = 400, n_val: int = 60
) -> tuple[Path, Path]:
    """``make_synthetic_dataset`` in ``<output_dir>/synthetic``: safe from several ranks at once (atomic renames)."""
    return make_synthetic_dataset(Path(output_dir) / "synthetic", n_train=n_train, n_val=n_val, seed=seed)
