"""Training speed on one GPU: images/s and peak memory of the real training step in four modes.

The reference DDP script's setting (R3Net with the resnext101_32x4d backbone, crop 300, batch 12)
through the same ``create_train_step`` the trainer uses, on pre-loaded uint8 batches already on
the GPU (so only the step counts: device augmentation, forward, 7 losses, backward, SGD):

* ``fp32``               ``amp="off"``
* ``bf16``               ``amp="bf16"`` (autocast)
* ``bf16_channels_last`` ``amp="bf16"``, model and inputs in channels_last
* ``compile``            ``bf16_channels_last`` plus ``torch.compile(model)`` (compile time reported
                         separately, not in images/s)

Each mode: ``warmup`` untimed iterations (cudnn autotuning, compilation), then ``iters`` timed ones
between two ``torch.cuda.synchronize()``; peak memory is ``torch.cuda.max_memory_allocated`` after a
reset. Without CUDA it returns ``{"skipped": reason}`` and prints why.

    python benchmarks/bench_gpu.py [--iters 30] [--modes fp32 bf16 ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ignite_r3net.config import TrainConfig  # noqa: E402
from ignite_r3net.model.r3net import R3Net  # noqa: E402
from ignite_r3net.training.optim import build_optimizer  # noqa: E402
from ignite_r3net.training.step import create_train_step  # noqa: E402

MODES: dict[str, dict[str, Any]] = {
    "fp32": {"amp": "off", "channels_last": False, "compile": False},
    "bf16": {"amp": "bf16", "channels_last": False, "compile": False},
    "bf16_channels_last": {"amp": "bf16", "channels_last": True, "compile": False},
    "compile": {"amp": "bf16", "channels_last": True, "compile": True},
}

__all__ = ["MODES", "bench_gpu"]


def _batches(n: int, batch_size: int, crop: int, device: torch.device, seed: int = 0) -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        image = torch.randint(0, 256, (batch_size, 3, crop, crop), dtype=torch.uint8, generator=g)
        mask = (torch.rand(batch_size, 1, crop, crop, generator=g) > 0.5).to(torch.uint8) * 255
        angle = torch.rand(batch_size, generator=g) * 20 - 10
        out.append({"image": image.to(device), "mask": mask.to(device), "angle": angle})
    return out


def _run_mode(
    mode: str, batches: list[dict[str, Any]], backbone: str, iters: int, warmup: int, device: torch.device
) -> dict[str, Any]:
    opts = MODES[mode]
    config = TrainConfig(
        backbone=backbone, amp=opts["amp"], channels_last=opts["channels_last"], compile=opts["compile"]
    )
    torch.manual_seed(0)
    model = R3Net(backbone=backbone).to(device)
    if config.channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = build_optimizer(model, config)
    trained = torch.compile(model) if config.compile else model
    step = create_train_step(trained, optimizer, device, config.amp, None, config.channels_last)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for i in range(warmup):
        step(None, batches[i % len(batches)])  # type: ignore[arg-type]
    torch.cuda.synchronize(device)
    warmup_s = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(iters):
        step(None, batches[i % len(batches)])  # type: ignore[arg-type]
    torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    batch_size = batches[0]["image"].shape[0]
    result = {
        "images_per_s": iters * batch_size / seconds,
        "it_per_s": iters / seconds,
        "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30,
        "warmup_s": warmup_s,
        **opts,
    }
    del step, trained, model, optimizer
    torch.cuda.empty_cache()
    return result


def bench_gpu(
    iters: int = 30,
    warmup: int = 10,
    batch_size: int = 12,
    crop: int = 300,
    backbone: str = "resnext101_32x4d",
    modes: list[str] | None = None,
) -> dict[str, Any]:
    """Per mode: images/s, it/s, peak GPU memory (GiB), warm-up seconds; ``speedup_vs_fp32`` each."""
    if not torch.cuda.is_available():
        return {"skipped": "no CUDA device visible: bench_gpu needs a GPU (run it on a GPU machine)"}
    device = torch.device("cuda", torch.cuda.current_device())
    torch.backends.cudnn.benchmark = True  # as the trainer does on CUDA
    modes = list(modes or MODES)
    batches = _batches(4, batch_size, crop, device)
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device),
        "batch_size": batch_size,
        "crop": crop,
        "backbone": backbone,
        "iters": iters,
        "warmup": warmup,
    }
    for mode in modes:
        try:
            results[mode] = _run_mode(mode, batches, backbone, iters, warmup, device)
        except Exception as e:  # noqa: BLE001 - one failing mode (e.g. compile) must not hide the others
            results[mode] = {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e) else ''}"}
    base = results.get("fp32", {}).get("images_per_s")
    for mode in modes:
        if base and "images_per_s" in results[mode]:
            results[mode]["speedup_vs_fp32"] = results[mode]["images_per_s"] / base
    return results


def format_gpu(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"gpu: skipped ({result['skipped']})"
    lines = [f"gpu: {result['device']}, {result['backbone']}, crop {result['crop']}, batch {result['batch_size']}"]
    for mode in MODES:
        r = result.get(mode)
        if r is None:
            continue
        if "error" in r:
            lines.append(f"  {mode:<20} failed: {r['error']}")
        else:
            lines.append(
                f"  {mode:<20} {r['images_per_s']:8.1f} images/s  peak {r['peak_memory_gib']:.2f} GiB"
                f"  {r.get('speedup_vs_fp32', float('nan')):.2f}x vs fp32"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=12)
    parser.add_argument("--crop", type=int, default=300)
    parser.add_argument("--backbone", default="resnext101_32x4d")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--json", help="write the result to this file")
    args = parser.parse_args(argv)
    result = bench_gpu(args.iters, args.warmup, args.batch_size, args.crop, args.backbone, args.modes)
    print(format_gpu(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
