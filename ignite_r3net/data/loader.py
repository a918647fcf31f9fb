"""Datasets and DataLoaders for training (cropped uint8 samples + angle) and evaluation (full size)."""

from __future__ import annotations

import ctypes
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from ..batch_layout import BatchLayout
from ..errors import DataError
from .decode import load_image, load_mask
from .folder import list_pairs
from .sampler import EvalShardSampler, ResumableDistributedSampler
from .split import split_pairs
from .step_stream import StepStream
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
    """Training pairs under ``roots`` by the sampler's ``(index, sample_seed)``: ``dict(image, mask, angle, index,
    bad)``, crop, flip and angle drawn from the seed. A pair that cannot be read (unless ``allow_decode_warnings``:
    or a JPEG with libjpeg warnings) is replaced by the next readable one; ``bad`` lists (path, problem). The
    pairs ``val_split`` holds out for validation (``data.split``) are left out."""

    def __init__(
        self,
        roots: str | Path | Sequence[str | Path],
        crop: int,
        rotate: float,
        allow_decode_warnings: bool = False,
        val_split: float | None = None,
    ) -> None:
        self.roots = [Path(roots)] if isinstance(roots, (str, Path)) else [Path(r) for r in roots]
        self.pairs = split_pairs((pair for root in self.roots for pair in list_pairs(root)), val_split)[0]
        self.crop_flip = JointCropFlip(crop)
        self.rotate = float(rotate)
        self.strict = not allow_decode_warnings

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, key: tuple[int, int]) -> dict[str, Any]:
        generator = torch.Generator().manual_seed(int(key[1]))
        index, (image, mask), bad = self._first_readable(int(key[0]))
        image, mask = self.crop_flip(image, mask, generator)
        angle = torch.tensor(draw_angle(generator, self.rotate) if self.rotate > 0 else 0.0, dtype=torch.float32)
        return {"image": image, "mask": mask, "angle": angle, "index": index, "bad": bad}

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
    """``default_collate`` of training items, the images kept channels-last (planar would cost a copy)."""
    bad = [entry for s in samples for entry in s.get("bad", ())]
    items = [{**{k: v for k, v in s.items() if k != "bad"}, "image": s["image"].permute(1, 2, 0)} for s in samples]
    batch = default_collate(items)
    return {**batch, "image": batch["image"].permute(0, 3, 1, 2), "bad": bad}


class SaliencyEvalSet(Dataset):
    """Full-resolution pairs of ``root``, or the ``pairs`` given: ``dict(image, mask, name, index, problem)``.
    ``skip_unreadable``: an unreadable pair (``strict``: or a damaged JPEG) is a 1x1 stand-in, ``problem`` saying
    why; ``warn_damaged``: as ``load_image``."""

    def __init__(
        self,
        root: str | Path | Sequence[tuple[Path, Path]],
        max_pairs: int | None = None,
        skip_unreadable: bool = False,
        strict: bool = False,
        warn_damaged: bool = False,
    ) -> None:
        self.pairs = list_pairs(root) if isinstance(root, (str, Path)) else list(root)
        self.listed = len(self.pairs)  # the folder's pairs, of which ``max_pairs`` are taken, evenly spread:
        # a fixed subset that samples every part of a data set whose names group its sources
        if max_pairs is not None and max_pairs < self.listed:
            self.pairs = [self.pairs[i * self.listed // max_pairs] for i in range(max_pairs)]
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


@dataclass(frozen=True)
class TrainData:
    """The training pairs of ``folders`` (less those ``val_split`` holds out) in random crops of ``crop`` pixels,
    flipped and rotated within ``rotate`` degrees, drawn from ``seed``; read by ``workers`` processes per rank."""

    folders: Sequence[str]
    crop: int
    rotate: float
    seed: int
    workers: int = 2
    allow_decode_warnings: bool = False
    val_split: float | None = None


def build_train_loader(
    data: TrainData, batch_size: int, num_replicas: int = 1, rank: int = 0, pin_memory: bool = False
) -> tuple[DataLoader, ResumableDistributedSampler]:
    """Training DataLoader of ``data`` (``drop_last``, persistent workers) and its sampler, shard ``rank`` of
    ``num_replicas``: call ``sampler.set_epoch`` before each epoch, and keep the loader from
    ``idist.auto_dataloader`` (it would replace the sampler). Raises DataError for less than a batch per rank."""
    dataset = SaliencyTrainSet(data.folders, data.crop, data.rotate, data.allow_decode_warnings, data.val_split)
    sampler = ResumableDistributedSampler(len(dataset), num_replicas, rank, data.seed, batch_size=batch_size)
    if sampler.num_batches == 0:
        raise DataError(
            f"{', '.join(map(str, dataset.roots))} hold(s) {len(dataset)} pairs: too few for batch size "
            f"{batch_size} on {num_replicas} process(es)"
        )
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        drop_last=True,
        num_workers=data.workers,
        pin_memory=pin_memory,
        persistent_workers=data.workers > 0,
        worker_init_fn=init_loader_worker,
        multiprocessing_context=worker_context(data.workers),
        collate_fn=collate_train,
    )
    return loader, sampler


def build_train_stream(data: TrainData, layout: BatchLayout, rank: int = 0, pin_memory: bool = False) -> StepStream:
    """``build_train_loader``'s micro-batches for ``rank`` of ``layout``, in optimiser steps (``StepStream``)."""
    loader, sampler = build_train_loader(data, layout.batch, layout.processes, rank, pin_memory)
    return StepStream(loader, sampler, layout.accumulate, layout.global_batch)


def build_eval_loader(
    root: str | Path | Sequence[tuple[Path, Path]],
    num_replicas: int = 1,
    rank: int = 0,
    workers: int = 0,
    persistent_workers: bool = False,
    max_pairs: int | None = None,
    skip_unreadable: bool = False,
    strict: bool = False,
    warn_damaged: bool = False,
) -> DataLoader:
    """Evaluation DataLoader of batch size 1 on an unpadded strided shard of ``root``'s pairs (or of the pairs
    given); the rest: see ``SaliencyEvalSet``."""
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
    """Fork DataLoader workers where the platform can: a spawned one imports torch and this package again
    (seconds, at every validation), and workers only decode and crop on the CPU, safe after CUDA starts."""
    return "fork" if workers > 0 and sys.platform.startswith("linux") else None


def stop_workers(loader: DataLoader) -> None:
    """Stop the persistent workers of ``loader`` while its queues are intact: left to the garbage collector,
    the queues go first, the stop message is never sent, and each worker waits out its 5 s status check."""
    # private API, confined here: a DataLoader has no public close; the iterator's __del__ calls this
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
        # torch ends a worker that missed its stop message with SIGTERM, which ours ignore (init_loader_worker),
        # and multiprocessing's exit joins every child without a timeout
        for worker in getattr(iterator, "_workers", ()):
            if worker.is_alive():
                worker.kill()
                worker.join()
        loader._iterator = None


def init_loader_worker(worker_id: int) -> None:
    """DataLoader worker set-up: Ctrl-C, and SIGTERM to the process group, are for the loader's process,
    which shuts the workers down, and a worker dies with that process (else it lingers until PyTorch's
    watchdog notices, seconds later)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A forked worker inherits the loader's process's SIGTERM handler (``raise_on_sigterm``), and CPython
    # runs a handler right after a C call returns: a SIGTERM to the group that lands just after the worker's
    # ``done_event.is_set()`` took the multiprocessing lock inside ``Condition.__enter__`` raised Terminated
    # before the ``with`` could release it, torch's worker loop swallowed it as a KeyboardInterrupt, and the
    # lock stayed taken for good: the loader's process then waited forever in ``_shutdown_workers``'s
    # ``done_event.set()``. SIG_DFL would not do: killed inside ``is_set``, a worker leaves the lock taken too.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass  # no prctl: the watchdog still ends the worker
