"""Input pipeline throughput: ours versus a faithful re-implementation of the reference DDP script's
pipeline.

Baseline (the reference DDP script, with R3Net's ``datasets.ImageFolder`` and
``joint_transforms``), per sample::

    Image.open(jpg).convert('RGB'), Image.open(png).convert('L')
    RandomCrop(300)          resize both to 300x300 (BILINEAR / NEAREST) when a side is smaller,
                             else a uniform random offset (random.randint, inclusive)
    RandomHorizontallyFlip   random.random() < 0.5
    RandomRotate(10)         angle = random.random() * 20 - 10; img.rotate(angle, BILINEAR),
                             mask.rotate(angle, NEAREST)
    ToTensor + Normalize(ImageNet) for the image, ToTensor for the mask

then ``default_collate`` of a batch (the reference DDP script's DataLoader, batch 12). The code below
is written from that description (the script's helper modules are not part of this repository).

What matters for GPU training is the work left in the DataLoader workers: rotation and
normalisation of a batch run on the GPU (``DeviceAugment``, well under a millisecond per batch), so
the CPU's share per sample is decode, crop and flip. The headline figure is therefore

* ``worker_speedup``: ours, ``SaliencyTrainSet.__getitem__`` (torchvision decode, resize only when
  a side is smaller than the crop, channels-last crop and flip on uint8, angle drawn) and
  ``collate_train`` (the training DataLoader's collate), versus the reference DDP script's whole
  pipeline above;
* ``full_cpu_speedup`` (secondary): ours plus the batched ``DeviceAugment`` (rotation and
  normalisation) run on the CPU as well, the worst case for it (CPU-only training);
* ``worker_profile_ms_per_sample``: where ours spends its time per sample (JPEG and PNG decode,
  crop/flip with the draws, collate, and the whole worker share), each the best pass over the files.

Everything runs in one process with one thread (``torch.set_num_threads(1)``), no DataLoader
workers, on the same files with the same crop and rotation; the pipelines are timed in alternation
(baseline, worker share, full CPU, baseline, ...) and each keeps its best pass, which cancels most
machine noise.
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch.utils.data import default_collate
from torchvision import transforms

from ignite_r3net.data.decode import load_image, load_mask
from ignite_r3net.data.folder import list_pairs
from ignite_r3net.data.loader import SaliencyTrainSet, collate_train
from ignite_r3net.data.sampler import sample_seed
from ignite_r3net.data.transforms import IMAGENET_MEAN, IMAGENET_STD, DeviceAugment, draw_angle

__all__ = [
    "ReferenceRandomCrop",
    "ReferenceRandomHorizontallyFlip",
    "ReferenceRandomRotate",
    "ReferenceJointTransform",
    "ReferenceImageFolder",
    "bench_pipeline",
    "profile_worker",
]


# ---------------------------------------------------------------------------------------------
# The reference DDP script's pipeline (baseline). Each transform draws its parameters with
# ``get_params`` from a ``random.Random`` (the script used the global ``random`` module: pass
# ``random`` itself for that)
# and then applies them, so tests can read the draws the baseline really makes.


class ReferenceRandomCrop:
    """``joint_transforms.RandomCrop(size)``: resize to size x size when a side is smaller, else crop."""

    def __init__(self, size: int) -> None:
        self.size = int(size)

    def get_params(self, rng: Any, width: int, height: int) -> tuple[int, int] | None:
        """``(x1, y1)``, or None when the pair is resized (smaller) or already exactly the size."""
        t = self.size
        if (width == t and height == t) or width < t or height < t:
            return None
        return rng.randint(0, width - t), rng.randint(0, height - t)

    def apply(
        self, img: Image.Image, mask: Image.Image, params: tuple[int, int] | None
    ) -> tuple[Image.Image, Image.Image]:
        w, h = img.size
        t = self.size
        if w == t and h == t:
            return img, mask
        if w < t or h < t:
            return img.resize((t, t), Image.BILINEAR), mask.resize((t, t), Image.NEAREST)
        assert params is not None
        x1, y1 = params
        box = (x1, y1, x1 + t, y1 + t)
        return img.crop(box), mask.crop(box)


class ReferenceRandomHorizontallyFlip:
    """``joint_transforms.RandomHorizontallyFlip()``: both flipped when ``random() < 0.5``."""

    def get_params(self, rng: Any) -> bool:
        return rng.random() < 0.5

    def apply(self, img: Image.Image, mask: Image.Image, flip: bool) -> tuple[Image.Image, Image.Image]:
        if flip:
            return img.transpose(Image.FLIP_LEFT_RIGHT), mask.transpose(Image.FLIP_LEFT_RIGHT)
        return img, mask


class ReferenceRandomRotate:
    """``joint_transforms.RandomRotate(degree)``: angle ``random() * 2 d - d``, PIL rotate (bilinear / nearest)."""

    def __init__(self, degree: float) -> None:
        self.degree = float(degree)

    def get_params(self, rng: Any) -> float:
        return rng.random() * 2 * self.degree - self.degree

    def apply(self, img: Image.Image, mask: Image.Image, angle: float) -> tuple[Image.Image, Image.Image]:
        return img.rotate(angle, Image.BILINEAR), mask.rotate(angle, Image.NEAREST)


class ReferenceJointTransform:
    """``joint_transforms.Compose([RandomCrop(crop), RandomHorizontallyFlip(), RandomRotate(rotate)])``.

    ``rng`` defaults to the global ``random`` module, as in the reference DDP script. ``draw(w, h)``
    makes the same draws, in the same order, as one call would make; ``apply(img, mask, params)`` applies them.
    """

    def __init__(self, crop: int = 300, rotate: float = 10.0, rng: Any = random) -> None:
        self.crop = ReferenceRandomCrop(crop)
        self.flip = ReferenceRandomHorizontallyFlip()
        self.rotate = ReferenceRandomRotate(rotate)
        self.rng = rng

    def draw(self, width: int, height: int) -> tuple[tuple[int, int] | None, bool, float]:
        return (
            self.crop.get_params(self.rng, width, height),
            self.flip.get_params(self.rng),
            self.rotate.get_params(self.rng),
        )

    def apply(
        self, img: Image.Image, mask: Image.Image, params: tuple[tuple[int, int] | None, bool, float]
    ) -> tuple[Image.Image, Image.Image]:
        crop, flip, angle = params
        img, mask = self.crop.apply(img, mask, crop)
        img, mask = self.flip.apply(img, mask, flip)
        return self.rotate.apply(img, mask, angle)

    def __call__(self, img: Image.Image, mask: Image.Image) -> tuple[Image.Image, Image.Image]:
        assert img.size == mask.size
        return self.apply(img, mask, self.draw(*img.size))


class ReferenceImageFolder:
    """The reference DDP script's ``datasets.ImageFolder`` over ``(image, mask)`` path pairs: PIL
    decode, joint transform, ``ToTensor + Normalize`` for the image, ``ToTensor`` for the mask."""

    def __init__(self, pairs: list[tuple[Path, Path]], joint_transform: ReferenceJointTransform) -> None:
        self.pairs = list(pairs)
        self.joint_transform = joint_transform
        self.transform = transforms.Compose(
            [transforms.ToTensor(), transforms.Normalize(list(IMAGENET_MEAN), list(IMAGENET_STD))]
        )
        self.target_transform = transforms.ToTensor()

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        img_path, gt_path = self.pairs[index]
        img = Image.open(img_path).convert("RGB")
        target = Image.open(gt_path).convert("L")
        img, target = self.joint_transform(img, target)
        return self.transform(img), self.target_transform(target)


# ---------------------------------------------------------------------------------------------
# Timing


def bench_pipeline(
    data_dir: str | Path,
    samples: int = 96,
    batch_size: int = 12,
    crop: int = 300,
    rotate: float = 10.0,
    repeats: int = 3,
    threads: int = 1,
    seed: int = 0,
) -> dict[str, Any]:
    """Samples/s of the reference DDP script's pipeline and of ours on the files of ``data_dir``
    (MSRA10K layout).

    Each pass loads ``samples`` samples (rounded up to whole batches of ``batch_size``), cycling over
    the files in order; the passes of the pipelines alternate and each keeps its fastest.
    """
    pairs = list_pairs(data_dir)
    n_batches = max(1, math.ceil(samples / batch_size))
    n = n_batches * batch_size
    baseline = ReferenceImageFolder(pairs, ReferenceJointTransform(crop, rotate, random.Random(seed)))
    ours = SaliencyTrainSet(data_dir, crop=crop, rotate=rotate)

    def run_baseline() -> None:
        for b in range(n_batches):
            default_collate([baseline[(b * batch_size + k) % len(pairs)] for k in range(batch_size)])

    def ours_batch(b: int) -> dict[str, Any]:
        keys = [
            ((b * batch_size + k) % len(pairs), sample_seed(seed, 0, b * batch_size + k)) for k in range(batch_size)
        ]
        return collate_train([ours[key] for key in keys])

    def run_worker() -> None:
        for b in range(n_batches):
            ours_batch(b)

    augment = DeviceAugment()  # what training runs on the device, here on the CPU

    def run_full_cpu() -> None:
        for b in range(n_batches):
            batch = ours_batch(b)
            augment(batch["image"], batch["mask"], batch["angle"])

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        # warm-up: file cache, lazy imports, allocator
        default_collate([baseline[k % len(pairs)] for k in range(batch_size)])
        batch = ours_batch(0)
        augment(batch["image"], batch["mask"], batch["angle"])
        times: dict[str, list[float]] = {"baseline": [], "worker": [], "full_cpu": []}
        for _ in range(repeats):
            for name, fn in (("baseline", run_baseline), ("worker", run_worker), ("full_cpu", run_full_cpu)):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
        profile = profile_worker(ours, batch_size, seed, repeats)
    finally:
        torch.set_num_threads(previous)

    rate = {name: n / min(t) for name, t in times.items()}
    sizes = _size_range(pairs[: min(len(pairs), 64)])
    return {
        "baseline_samples_per_s": rate["baseline"],
        "ours_worker_samples_per_s": rate["worker"],
        "worker_speedup": rate["worker"] / rate["baseline"],
        "ours_full_cpu_samples_per_s": rate["full_cpu"],
        "full_cpu_speedup": rate["full_cpu"] / rate["baseline"],
        "baseline_ms_per_sample": 1e3 / rate["baseline"],
        "worker_profile_ms_per_sample": profile,
        "settings": {
            "samples_per_pass": n,
            "batch_size": batch_size,
            "crop": crop,
            "rotate": rotate,
            "repeats": repeats,
            "threads": threads,
            "files": len(pairs),
            "image_sizes": sizes,
        },
    }


def profile_worker(dataset: SaliencyTrainSet, batch_size: int, seed: int, repeats: int) -> dict[str, float]:
    """Milliseconds per sample of each part of ours in a DataLoader worker, best pass over the files:
    ``decode_jpeg_png`` (``load_image`` + ``load_mask``), ``decode_strict`` (the same with
    ``strict=True``, as training decodes: libjpeg's warnings collected from fd 2), ``crop_flip``
    (the generator, crop, flip and angle draws on decoded pixels), ``collate`` (``collate_train`` of
    whole batches) and ``worker_total`` (``__getitem__`` + ``collate_train``: the parts together,
    plus file reads, fresh batch memory and Python glue)."""
    n = len(dataset)
    keys = [(i, sample_seed(seed, 0, i)) for i in range(n)]
    decoded = [(load_image(image), load_mask(mask)) for image, mask in dataset.pairs]
    items = [dataset[key] for key in keys]
    batches = _chunks(items, batch_size)

    def crop_flip(i: int) -> None:
        generator = torch.Generator().manual_seed(keys[i][1])
        dataset.crop_flip(*decoded[i], generator)
        draw_angle(generator, dataset.rotate)

    parts: dict[str, tuple[Any, int]] = {
        "decode_jpeg_png": (lambda: [(load_image(image), load_mask(mask)) for image, mask in dataset.pairs], n),
        "decode_strict": (
            lambda: [(load_image(image, strict=True), load_mask(mask, strict=True)) for image, mask in dataset.pairs],
            n,
        ),
        "crop_flip": (lambda: [crop_flip(i) for i in range(n)], n),
        "collate": (lambda: [collate_train(b) for b in batches], n),
        "worker_total": (lambda: [collate_train([dataset[k] for k in b]) for b in _chunks(keys, batch_size)], n),
    }
    best = {name: math.inf for name in parts}
    for _ in range(max(repeats, 3)):
        for name, (fn, count) in parts.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], (time.perf_counter() - start) * 1e3 / count)
    return best


def _chunks(seq: list[Any], size: int) -> list[list[Any]]:
    return [seq[i : i + size] for i in range(0, len(seq), size)]


def _size_range(pairs: list[tuple[Path, Path]]) -> str:
    sizes = [Image.open(p).size for p, _ in pairs]
    ws, hs = [s[0] for s in sizes], [s[1] for s in sizes]
    return f"{min(ws)}-{max(ws)} x {min(hs)}-{max(hs)} (w x h)"
