"""Cutouts without a halo: at a soft edge the refined cutout holds colours at least twice as close to the true
foreground as the photo's, it leaves every pixel where the map is 0 or 255 as the plain cutout has it, and a
composite over a colour or an image is the cutout laid over it."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from helpers import REPO
from PIL import Image

from ignite_r3net.errors import OptionError
from ignite_r3net.inference.cutout import cutout_image, read_background
from ignite_r3net.inference.foreground import refine_foreground, window_sums

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_cutout import colour_errors, composites  # noqa: E402


def test_refined_colours_at_soft_edges_are_at_least_twice_as_close_to_the_foreground() -> None:
    """The benchmark's composites (known foregrounds over backgrounds of other hues, blurred alphas), small."""
    errors = [colour_errors(case) for case in composites(4, (96, 128), seed=5)]
    plain, refined = np.mean(errors, axis=0)
    assert plain > 20  # the halo is there to remove: the photo's colours at the soft pixels are far off
    assert refined <= plain / 2, errors
    assert all(r < p for p, r in errors), errors


def test_where_the_map_is_0_or_255_the_refined_cutout_is_the_plain_one() -> None:
    case = next(composites(1, (60, 90), seed=3))
    plain = np.asarray(cutout_image(case.image, case.alpha))
    refined_image = cutout_image(case.image, case.alpha, refine=True)
    refined = np.asarray(refined_image)
    assert refined_image.mode == "RGBA" and refined_image.size == (90, 60)  # the photo's size
    alpha = case.alpha.numpy()
    assert (alpha == 0).any() and (alpha == 255).any() and ((alpha > 0) & (alpha < 255)).any()
    np.testing.assert_array_equal(refined[..., 3], alpha)
    hard = (alpha == 0) | (alpha == 255)
    np.testing.assert_array_equal(refined[hard], plain[hard])
    assert (refined[~hard] != plain[~hard]).any()  # the soft pixels took other colours


@pytest.mark.parametrize("level", [0, 1, 128, 255])
def test_a_map_of_one_value_works(level: int) -> None:
    """A flat-coloured photo under a flat map: every pixel's foreground is the photo's colour (F = B = I)."""
    image = torch.tensor([30, 160, 90], dtype=torch.uint8).view(3, 1, 1).expand(3, 24, 32).contiguous()
    alpha = torch.full((24, 32), level, dtype=torch.uint8)
    refined = refine_foreground(image, alpha)
    assert refined.shape == image.shape and refined.dtype == torch.uint8
    assert (refined.int() - image.int()).abs().max() <= 1


def test_window_sums_are_the_sums_over_each_window_clipped_to_the_image() -> None:
    x = torch.rand(2, 9, 13, dtype=torch.float64)
    for radius in (0, 1, 3, 6, 20):
        expected = torch.zeros_like(x)
        for i in range(9):
            for j in range(13):
                window = x[:, max(0, i - radius) : i + radius + 1, max(0, j - radius) : j + radius + 1]
                expected[:, i, j] = window.sum((-1, -2))
        torch.testing.assert_close(window_sums(x, radius), expected, atol=1e-12, rtol=0)


def _over(rgb: np.ndarray, alpha: np.ndarray, background: np.ndarray) -> np.ndarray:
    """``rgb`` laid over ``background`` by ``alpha``, rounded as a compositor rounds 8-bit values."""
    a = alpha[..., None].astype(np.int64)
    return ((a * rgb + (255 - a) * background.astype(np.int64) + 127) // 255).astype(np.uint8)


def test_a_composite_is_the_cutout_laid_over_a_colour_or_an_image() -> None:
    case = next(composites(1, (40, 64), seed=7))
    alpha = case.alpha.numpy()
    refined = np.asarray(cutout_image(case.image, case.alpha, refine=True))[..., :3]
    white = cutout_image(case.image, case.alpha, refine=True, background=read_background("white"))
    assert white.mode == "RGB" and white.size == (64, 40)
    np.testing.assert_array_equal(np.asarray(white), _over(refined, alpha, np.full((1, 1, 3), 255)))
    # an image of another size and shape covers the photo: a flat one gives its colour everywhere
    flat = Image.new("RGB", (10, 30), (0, 0, 200))
    over_image = cutout_image(case.image, case.alpha, background=flat)
    assert over_image.size == (64, 40)
    plain = case.image.permute(1, 2, 0).numpy()
    np.testing.assert_array_equal(np.asarray(over_image), _over(plain, alpha, np.array([[[0, 0, 200]]])))


def test_a_background_is_a_colour_or_an_image_file(tmp_path) -> None:
    assert read_background("#00ff00") == (0, 255, 0) == read_background("lime")
    Image.new("RGB", (5, 4), (1, 2, 3)).save(tmp_path / "bg.png")
    image = read_background(str(tmp_path / "bg.png"))
    assert isinstance(image, Image.Image) and image.size == (5, 4)
    with pytest.raises(OptionError, match=r"^--background greenish: neither a colour .* nor an image file$"):
        read_background("greenish")
    (tmp_path / "notes.txt").write_text("not a picture")
    with pytest.raises(OptionError, match=r"^--background .*notes.txt: not a readable image"):
        read_background(str(tmp_path / "notes.txt"))
