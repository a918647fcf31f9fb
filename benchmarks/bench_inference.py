"""Inference on the CPU: ``predict --checkpoint`` (PyTorch eager) versus ``predict --model FILE.onnx``
(onnxruntime), side by side, with one and with two threads.

Both sides run what ``predict`` runs per image, batch 1: a uint8 ``(1, 3, H, W)`` image in, the
8-bit map out (PyTorch: ``predict_maps`` on the model ``build_model`` reads from the checkpoint;
onnxruntime: the session ``load_exported`` opens on the file ``export`` wrote, then
``to_8bit_maps``). Decoding the image and writing the PNG are the same on both sides and are left
out. The model is R3Net with random weights (seeded): the work of a convolutional network does not
depend on its weights or on the image's content, so the images are seeded random pixels of one size.

Per thread count (``torch.set_num_threads`` for PyTorch, ``intra_op_num_threads`` for
onnxruntime), each side first runs ``warmup`` images, then the sides alternate ``repeats`` times
over ``images`` images and each keeps its fastest pass. The export itself is timed as
``export_s``; ``max_abs_diff`` and ``max_map_diff`` compare the two sides' outputs on the first
image (probabilities, and 8-bit map levels).
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ignite_r3net.data.transforms import normalize_image
from ignite_r3net.export.writer import export_model
from ignite_r3net.inference.engine import predict_maps, to_8bit_maps
from ignite_r3net.inference.model import load_exported
from ignite_r3net.model.r3net import R3Net
from ignite_r3net.model.trained_model import build_model, read_trained_weights
from ignite_r3net.options import ExportOptions

__all__ = ["bench_inference", "format_inference"]


def _timed_pass(step: Callable[[torch.Tensor], torch.Tensor], images: list[torch.Tensor]) -> float:
    start = time.perf_counter()
    for image in images:
        step(image)
    return time.perf_counter() - start


def bench_inference(
    backbone: str = "resnext101_32x4d",
    size: tuple[int, int] = (300, 400),
    threads: tuple[int, ...] = (1, 2),
    images: int = 4,
    repeats: int = 2,
    warmup: int = 1,
    seed: int = 2018,
    checkpoint: str | Path | None = None,
    onnx_file: str | Path | None = None,
) -> dict[str, Any]:
    """images/s of both sides per thread count, and their ratio (onnxruntime / PyTorch).

    ``checkpoint`` and ``onnx_file`` (an export of that checkpoint) skip building and exporting a
    model with ``backbone``: the tests pass the ones they already exported."""
    result: dict[str, Any] = {"size": list(size), "images": images, "repeats": repeats}
    previous_threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory(prefix="bench-inference-") as tmp:
        if checkpoint is None:
            torch.manual_seed(seed)
            checkpoint = Path(tmp) / "best_model_bench.pt"
            torch.save(R3Net(backbone).state_dict(), checkpoint)
        if onnx_file is None:
            onnx_file = Path(tmp) / "r3net.onnx"
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):  # export's "wrote ..." line
                export_model(ExportOptions(checkpoint=str(checkpoint), format="onnx", output=str(onnx_file)))
            result["export_s"] = time.perf_counter() - start
        weights = read_trained_weights(checkpoint)
        result["backbone"] = weights.backbone
        model = build_model(weights, "cpu")
        generator = torch.Generator().manual_seed(seed)
        batch = [torch.randint(0, 256, (1, 3, *size), dtype=torch.uint8, generator=generator) for _ in range(images)]
        try:
            for n in threads:
                torch.set_num_threads(n)
                run_onnx = load_exported(onnx_file, "cpu", threads=n)
                sides: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
                    "pytorch": lambda image: predict_maps(model, image),
                    "onnxruntime": lambda image, run=run_onnx: to_8bit_maps(run(image)),
                }
                for step in sides.values():
                    for i in range(warmup):
                        step(batch[i % len(batch)])
                best = {name: float("inf") for name in sides}
                for _ in range(repeats):
                    for name, step in sides.items():
                        best[name] = min(best[name], _timed_pass(step, batch))
                for name in sides:
                    result[f"{name}_{n}t_images_per_s"] = images / best[name]
                result[f"ratio_{n}t"] = result[f"onnxruntime_{n}t_images_per_s"] / result[f"pytorch_{n}t_images_per_s"]
            with torch.no_grad():
                torch_prob = model(normalize_image(batch[0]))
            onnx_prob = run_onnx(batch[0])
            result["max_abs_diff"] = float((onnx_prob - torch_prob).abs().max())
            result["max_map_diff"] = int(
                (to_8bit_maps(onnx_prob).int() - predict_maps(model, batch[0]).int()).abs().max()
            )
        finally:
            torch.set_num_threads(previous_threads)
    return result


def format_inference(r: dict[str, Any]) -> str:
    """One line: both sides per thread count and their ratio."""
    h, w = r["size"]
    parts = []
    for key in sorted(k for k in r if k.startswith("ratio_")):
        n = key[len("ratio_") : -1]
        parts.append(
            f"{n} thread{'s' if n != '1' else ''}: pytorch {r[f'pytorch_{n}t_images_per_s']:.2f}, onnxruntime "
            f"{r[f'onnxruntime_{n}t_images_per_s']:.2f} images/s, ratio {r[key]:.2f}x"
        )
    export = f", export {r['export_s']:.0f} s" if "export_s" in r else ""
    return (
        f"inference: {r['backbone']} {h}x{w}, batch 1; {'; '.join(parts)}; max difference "
        f"{r['max_abs_diff']:.1e} ({r['max_map_diff']} map levels){export}"
    )
