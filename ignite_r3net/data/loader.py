"""Datasets and DataLoaders for training (cropped uint8 samples + angle) and evaluation (full size)."""

from __future__ import annotations

import ctypes
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from ..config import TrainConfig
from ..errors import DataError
from .decode import load_image, load_mask
from .folder import list_pairs
from .sampler import EvalShardSampler, ResumableDistributedSampler
from .transforms import JointCropFlip, draw_angle


def _load_pair(
    image_path: Path, mask_path: Path, strict: bool = False, warn_damaged: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    image = load_image(image_path, strict, warn_damaged)
    mask = load_mask(mask_path, strict, warn_damaged)
    if image.shape[-2:] != mask.shape[-2:]:
        raise DataError(
            f"size mismatch: image {image_path} is {image.shape[-1]}x{image.shape[-2]} "
            f"but mask {mask_path} is {mask.shape[-1]}x{mask.shape[-2]}"
        )
    return image, mask


class SaliencyTrainSet(Dataset):
    """Training pairs under ``roots`` (one folder or several, listed in turn), indexed by the sampler's
    ``(index, sample_seed)`` keys.

    An item is ``dict(image=uint8 (3, crop, crop) channels-last, mask=uint8 (1, crop, crop),
    angle=float32 scalar, index, bad=[(image path, problem), ...])``; batch it with :func:`collate_train`.
    Crop, flip and angle are drawn from ``sample_seed``, so an item is a pure function of its key; rotation
    and normalisation are left to ``DeviceAugment``. A pair that cannot be read (unless
    ``allow_decode_warnings``: or a JPEG with libjpeg warnings) is replaced by the next readable one, with
    the same seed; ``bad`` names the pairs passed over, for the trainer to report.
    """

    def __init__(
        self, roots: str | Path | Sequence[str | Path], crop: int, rotate: float, allow_decode_warnings: bool = False
    ) -> None:
        self.roots = [Path(roots)] if isinstance(roots, (str, Path)) else [Path(r) for r in roots]
        self.pairs = [pair for root in self.roots for pair in list_pairs(root)]
        self.crop_flip = JointCropFlip(crop)
        self.rotate = float(rotate)
        self.strict = not allow_decode_warnings

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, key: tuple[int, int]) -> dict[str, Any]:
        index, seed = int(key[0]), int(key[1])
        generator = torch.Generator().manual_seed(seed)
        index, (image, mask), bad = self._first_readable(index)
        image, mask = self.crop_flip(image, mask, generator)
        angle = draw_angle(generator, self.rotate) if self.rotate > 0 else 0.0
        angle_t = torch.tensor(angle, dtype=torch.float32)
        return {"image": image, "mask": mask, "angle": angle_t, "index": index, "bad": bad}

    def _first_readable(self, index: int) -> tuple[int, tuple[torch.Tensor, torch.Tensor], list[tuple[str, str]]]:
        bad: list[tuple[str, str]] = []
        for step in range(len(self.pairs)):
            at = (index + step) % len(self.pairs)
            try:
                return at, _load_pair(*self.pairs[at], self.strict), bad
            except DataError as e:
                bad.append((str(self.pairs[at][0]), str(e)))
        raise DataError(f"no pair of {', '.join(map(str, self.roots))} can be read: {bad[0][1]}")


def collate_train(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """``default_collate`` of training items, the images kept channels-last (a copy into planar would cost
    several times the crop itself); ``bad`` lists the (image path, problem) pairs the items passed over."""
    bad = [entry for s in samples for entry in s.get("bad", ())]
    items = [{**{k: v for k, v in s.items() if k != "bad"}, "image": s["image"].permute(1, 2, 0)} for s in samples]
    batch = default_collate(items)
    batch["image"] = batch["image"].permute(0, 3, 1, 2)
    batch["bad"] = bad
    return batch


class SaliencyEvalSet(Dataset):
    """Full-resolution evaluation pairs: ``dict(image=uint8 (3, H, W), mask=uint8 (1, H, W) raw 0..255,
    name, index, problem)``.

    ``skip_unreadable`` (validation during training, which a damaged file must not end): a pair that
    cannot be read (``strict``: or whose JPEG decodes with warnings) comes as a 1x1 stand-in whose
    ``problem`` says why, else ``problem`` is empty. ``warn_damaged`` (``evaluate``): a JPEG that decodes
    with warnings is scored as decoded, and a warning names it.
    """

    def __init__(
        self,
        root: str | Path,
        max_pairs: int | None = None,
        skip_unreadable: bool = False,
        strict: bool = False,
        warn_damaged: bool = False,
    ) -> None:
        self.root = Path(root)
        listed = list_pairs(self.root)
        self.listed = len(listed)  # the folder's pairs, of which ``max_pairs`` are taken
        self.pairs = evenly_spaced(listed, max_pairs)
        self.skip_unreadable, self.strict, self.warn_damaged = skip_unreadable, strict, warn_damaged

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> dict[str, Any]:
        image_path, mask_path = self.pairs[index]
        problem = ""
        try:
            image, mask = _load_pair(image_path, mask_path, self.strict, self.warn_damaged)
        except DataError as e:
            if not self.skip_unreadable:
                raise
            image, mask = torch.zeros(3, 1, 1, dtype=torch.uint8), torch.zeros(1, 1, 1, dtype=torch.uint8)
            problem = str(e)
        return {"image": image, "mask": mask, "name": image_path.stem, "index": int(index), "problem": problem}


def evenly_spaced(pairs: list[tuple[Path, Path]], count: int | None) -> list[tuple[Path, Path]]:
    """``count`` pairs spread evenly over the listing (all when None or not smaller): a fixed subset that
    samples every part of a data set whose names group its sources."""
    if count is None or count >= len(pairs):
        return pairs
    return [pairs[i * len(pairs) // count] for i in range(count)]


def build_train_loader(
    config: TrainConfig, num_replicas: int = 1, rank: int = 0, pin_memory: bool = False
) -> tuple[DataLoader, ResumableDistributedSampler]:
    """Training DataLoader of ``config.data`` (per-rank ``config.batch_size``, ``drop_last=True``,
    ``config.workers`` persistent workers) and its resumable sampler, shard ``rank`` of ``num_replicas``.

    Call ``sampler.set_epoch(epoch, skip_batches)`` before each epoch's iterator is created; do not pass
    the loader through ``idist.auto_dataloader`` (it would replace the sampler). ``pin_memory``: for CUDA.
    Raises DataError when the data set has fewer pairs than one batch on every rank.
    """
    dataset = SaliencyTrainSet(config.data, config.crop, config.rotate, config.allow_decode_warnings)
    sampler = ResumableDistributedSampler(len(dataset), num_replicas, rank, config.seed, batch_size=config.batch_size)
    if sampler.num_batches == 0:
        raise DataError(
            f"{', '.join(map(str, dataset.roots))} hold(s) {len(dataset)} pairs: too few for batch size "
            f"{config.batch_size} on {num_replicas} process(es)"
        )
    loader = DataLoader(
        dataset,
        batch_size=config.batch_size,
        sampler=sampler,
        drop_last=True,
        num_workers=config.workers,
        pin_memory=pin_memory,
        persistent_workers=config.workers > 0,
        worker_init_fn=init_loader_worker,
        multiprocessing_context=worker_context(config.workers),
        collate_fn=collate_train,
    )
    return loader, sampler


def build_eval_loader(
    root: str | Path,
    num_replicas: int = 1,
    rank: int = 0,
    workers: int = 0,
    persistent_workers: bool = False,
    max_pairs: int | None = None,
    skip_unreadable: bool = False,
    strict: bool = False,
    warn_damaged: bool = False,
) -> DataLoader:
    """Evaluation DataLoader: batch size 1 (full-resolution sizes differ), unpadded strided shard (of
    ``max_pairs`` evenly spaced pairs, when given). ``persistent_workers`` (validation during training)
    keeps the workers from one pass to the next, until ``stop_workers``; the rest: see ``SaliencyEvalSet``."""
    dataset = SaliencyEvalSet(root, max_pairs, skip_unreadable, strict, warn_damaged)
    return DataLoader(
        dataset,
        batch_size=1,
        sampler=EvalShardSampler(len(dataset), num_replicas, rank),
        num_workers=workers,
        persistent_workers=persistent_workers and workers > 0,
        worker_init_fn=init_loader_worker,
        multiprocessing_context=worker_context(workers),
    )


def worker_context(workers: int) -> str | None:
    """How DataLoader workers start: forked where the platform allows it, as under torchrun.

    A rank spawned by ``idist.Parallel`` inherits spawn, so each worker would import torch and this package
    again (seconds, at every validation); workers only decode and crop on the CPU, so forking is safe,
    also after CUDA is initialised."""
    return "fork" if workers > 0 and sys.platform.startswith("linux") else None


def stop_workers(loader: DataLoader) -> None:
    """Stop the persistent workers of ``loader`` now, while its queues are intact. Left to the garbage
    collector (the Engine's handlers hold the loader in reference cycles), the queues are finalised before
    the iterator, its stop message is never sent, and each worker waits out its 5 s status check."""
    # private API, confined here: a DataLoader has no public close; its iterator's
    # _shutdown_workers is what the iterator's own __del__ calls
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
        loader._iterator = None


def init_loader_worker(worker_id: int) -> None:
    """DataLoader worker set-up: Ctrl-C is for the process that owns the loader, which shuts its workers
    down (an interrupted worker would only print a traceback), and a worker dies with that process (else
    it lingers until PyTorch's watchdog notices, seconds later)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass  # no prctl: the watchdog still ends the worker


_PR_SET_PDEATHSIG = 1
