"""Cutouts without a halo: how close a cutout's colours come to the true foreground where its alpha is soft,
plain (the photo's pixels) beside ``--refine-foreground`` (blur-fusion), and what the refinement costs.

Colour error: known foregrounds composited over known, differently coloured backgrounds with soft alphas,
I = alpha F + (1 - alpha) B rounded to 8 bits, then cut out with that (true) alpha. The foregrounds are vivid
textured gradients; each background takes another hue, textured too; the alphas are generated blobs with wavy
edges, and the synthetic data set's masks (``--data``), each blurred by a Gaussian of radius 2 to 8 pixels (hair,
fur and defocus give such edges). The figure is the mean, over the pixels with 0 < alpha < 1, of the mean absolute
RGB difference (0..255) between the cutout's RGB and F, for the plain and the refined cutout.

Cost: the refinement alone (``refine_foreground``) of a ``side`` x ``side`` composite, the median of ``repeats``
runs after one warm-up, with the threads ``predict`` uses on this machine and with one; and its share of a whole
``predict --cutout --refine-foreground`` of one such photo (R3Net ``backbone`` with seeded random weights, full
resolution, in this process): the refinement's median over ``predict``'s own seconds (reading, the model, the
cutout, the PNG; start-up excluded), the plain and refined runs alternating, each keeping its fastest.
"""

from __future__ import annotations

import colorsys
import contextlib
import io
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageFilter

from ignite_r3net.distributed.process_setup import worker_threads
from ignite_r3net.evaluation.predict import predict
from ignite_r3net.inference.foreground import refine_foreground
from ignite_r3net.model.r3net import R3Net
from ignite_r3net.options import InferenceOptions, PredictOptions

__all__ = ["Composite", "bench_cutout", "colour_errors", "composites", "format_cutout"]


@dataclass(frozen=True)
class Composite:
    """A photo made of a known foreground over a known background: uint8 (3, H, W), (H, W) and (3, H, W)."""

    image: torch.Tensor
    alpha: torch.Tensor
    foreground: torch.Tensor


def composites(count: int, size: tuple[int, int], seed: int = 0, masks: Sequence[Path] = ()) -> Iterator[Composite]:
    """``count`` composites of ``size`` (height, width) with generated alphas, then one per mask file of ``masks``
    (at the mask's own size), each mask blurred."""
    rng = np.random.default_rng(seed)
    shapes = [_blob(size, rng) for _ in range(count)]
    for path in masks:
        with Image.open(path) as mask:
            shapes.append(np.asarray(mask.convert("L")))
    for shape in shapes:
        radius = rng.uniform(2, 8)
        alpha = np.asarray(Image.fromarray(shape).filter(ImageFilter.GaussianBlur(radius)), dtype=np.float64) / 255
        foreground = _layer(alpha.shape, rng, hue=None)
        background = _layer(alpha.shape, rng, hue=(_hue_of(foreground) + rng.uniform(0.25, 0.75)) % 1)
        alpha8 = np.round(alpha * 255)
        image = (alpha8[..., None] * foreground + (255 - alpha8[..., None]) * background) / 255
        yield Composite(_tensor(image), torch.from_numpy(alpha8.astype(np.uint8)), _tensor(foreground))


def colour_errors(case: Composite) -> tuple[float, float]:
    """The mean colour error (0..255) at the soft pixels of the plain cutout and of the refined one."""
    soft = (case.alpha > 0) & (case.alpha < 255)

    def error(rgb: torch.Tensor) -> float:
        return (rgb.int() - case.foreground.int()).abs().float().mean(0)[soft].mean().item()

    return error(case.image), error(refine_foreground(case.image, case.alpha))


def _blob(size: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """A 0/255 mask: an ellipse with a wavy edge, somewhere near the middle."""
    height, width = size
    yy, xx = np.mgrid[:height, :width] / np.array([height, width]).reshape(2, 1, 1)
    dy, dx = yy - rng.uniform(0.4, 0.6), xx - rng.uniform(0.4, 0.6)
    angle = np.arctan2(dy, dx)
    radius = rng.uniform(0.2, 0.32) * (1 + 0.12 * np.sin(rng.integers(3, 9) * angle + rng.uniform(0, 6.3)))
    return ((dy / 1.1) ** 2 + dx**2 <= radius**2).astype(np.uint8) * 255


def _layer(shape: tuple[int, ...], rng: np.random.Generator, hue: float | None) -> np.ndarray:
    """A float RGB (H, W, 3) in 0..255: two colours of neighbouring hues in a gradient, with a smooth texture."""
    height, width = shape
    hue = rng.uniform(0, 1) if hue is None else hue
    colours = [
        _rgb(hue + shift, rng.uniform(0.5, 1), rng.uniform(0.45, 0.9)) for shift in (0, rng.uniform(-0.08, 0.08))
    ]
    t = np.linspace(0, 1, width)[None, :, None] * np.ones((height, 1, 1))
    texture = np.asarray(
        Image.fromarray(rng.integers(0, 256, (max(2, height // 8), max(2, width // 8)), dtype=np.uint8)).resize(
            (width, height), Image.Resampling.BICUBIC
        ),
        dtype=np.float64,
    )
    layer = colours[0] * (1 - t) + colours[1] * t + (texture[..., None] - 128) * 0.15
    return np.clip(np.round(layer), 0, 255)


def _rgb(hue: float, saturation: float, value: float) -> np.ndarray:
    return np.array(colorsys.hsv_to_rgb(hue % 1, saturation, value)) * 255


def _hue_of(layer: np.ndarray) -> float:
    red, green, blue = layer.reshape(-1, 3).mean(0) / 255
    return colorsys.rgb_to_hsv(red, green, blue)[0]


def _tensor(picture: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.clip(np.round(picture), 0, 255).astype(np.uint8)).permute(2, 0, 1).contiguous()


def time_refinement(side: int, repeats: int, threads: int | None = None) -> tuple[float, int]:
    """The median seconds of ``refine_foreground`` on a ``side`` x ``side`` composite with ``threads`` torch threads
    (default: those ``predict`` takes on this machine), and that count."""
    case = next(composites(1, (side, side), seed=1))
    with worker_threads(torch.device("cpu"), threads) as used:
        refine_foreground(case.image, case.alpha)  # warm-up
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            refine_foreground(case.image, case.alpha)
            seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), used


def predict_seconds(side: int, backbone: str, repeats: int) -> dict[str, float]:
    """``predict --cutout``'s own seconds for one ``side`` x ``side`` photo, plain and refined (each its fastest)."""
    best = {"plain": float("inf"), "refined": float("inf")}
    with tempfile.TemporaryDirectory(prefix="bench_cutout_") as tmp:
        case = next(composites(1, (side, side), seed=2))
        photo = Path(tmp) / "photo.png"
        Image.fromarray(case.image.permute(1, 2, 0).numpy()).save(photo)
        checkpoint = Path(tmp) / "best_model_bench.pt"
        torch.manual_seed(2018)
        torch.save(R3Net(backbone).state_dict(), checkpoint)
        for r in range(repeats):
            for kind in best:
                options = PredictOptions(
                    checkpoint=str(checkpoint),
                    inputs=[str(photo)],
                    output=str(Path(tmp) / f"{kind}-{r}"),
                    cutout=True,
                    refine_foreground=kind == "refined",
                    inference=InferenceOptions(workers=0),
                    progress=False,
                )
                with contextlib.redirect_stdout(io.StringIO()):  # its last line, "wrote 1 cutout(s) ..."
                    best[kind] = min(best[kind], predict(options)["seconds"])
    return best


def bench_cutout(
    data_dir: str | Path | None = None,
    generated: int = 8,
    size: tuple[int, int] = (240, 320),
    masks: int = 8,
    side: int = 1024,
    repeats: int = 5,
    predict_repeats: int = 2,
    backbone: str = "resnet18",
) -> dict[str, Any]:
    """The colour errors over the composites, the refinement's time at ``side`` and its share of ``predict``."""
    mask_files = sorted(Path(data_dir).glob("*.png"))[:masks] if data_dir else []  # MSRA10K layout: name.png
    errors = [colour_errors(case) for case in composites(generated, size, masks=mask_files)]
    plain = statistics.mean(e[0] for e in errors)
    refined = statistics.mean(e[1] for e in errors)
    refinement_s, threads = time_refinement(side, repeats)
    one_thread_s, _ = time_refinement(side, repeats, threads=1)
    seconds = predict_seconds(side, backbone, predict_repeats)
    return {
        "plain_error": plain,
        "refined_error": refined,
        "error_ratio": refined / plain,
        "worst_case_ratio": max(e[1] / e[0] for e in errors),
        "refinement_s": refinement_s,
        "refinement_1t_s": one_thread_s,
        "predict_plain_s": seconds["plain"],
        "predict_refined_s": seconds["refined"],
        "refinement_share": refinement_s / seconds["refined"],
        "settings": {
            "composites": len(errors),
            "generated": generated,
            "masks": len(mask_files),
            "size": list(size),
            "side": side,
            "repeats": repeats,
            "predict_repeats": predict_repeats,
            "backbone": backbone,
            "threads": threads,
        },
    }


def format_cutout(r: dict[str, Any]) -> str:
    s = r["settings"]
    return (
        f"cutout: mean colour error at soft pixels over {s['composites']} composites: plain {r['plain_error']:.2f}, "
        f"refined {r['refined_error']:.2f}, ratio {r['error_ratio']:.3f} (worst {r['worst_case_ratio']:.3f}; goal "
        f"<= 0.5); refinement of {s['side']}x{s['side']}: {r['refinement_s'] * 1000:.0f} ms with {s['threads']} "
        f"thread(s) (goal <= 200 ms), {r['refinement_1t_s'] * 1000:.0f} ms with 1, "
        f"{100 * r['refinement_share']:.1f}% of predict --cutout --refine-foreground "
        f"({s['backbone']}: {r['predict_refined_s']:.2f} s, plain {r['predict_plain_s']:.2f} s)"
    )
