"""The model ``serve`` answers with: a checkpoint or an exported file, loaded by the code ``predict`` uses, whose
maps are ``predict``'s for the same image and options; and ``Batcher``, which runs the requests that arrive
together as one forward pass, grouped as ``predict`` groups images (docs/serve.md, "Batching"): images of
different sizes are never padded together (padding changes the maps), so the maps are those of batch 1."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from ..inference.batches import plan_batches
from ..inference.model import load_model
from ..options.serve import ServeOptions

# a uint8 batch (N, 3, H, W) on the CPU and ``?max_side=`` to the 8-bit maps (N, H, W) on the CPU
BatchMaps = Callable[[torch.Tensor, int | None], torch.Tensor]


@dataclass(frozen=True)
class ServedModel:
    """What answers the requests, and what ``/healthz`` and the start-up line say about it."""

    source: str  # the checkpoint or file as given
    backbone: str | None  # None: an exported file (it holds its backbone)
    device: torch.device
    provider: str  # "torch", or onnxruntime's execution provider
    maps: BatchMaps

    def describe(self) -> str:
        kind = f"R3Net {self.backbone}" if self.backbone else "exported R3Net"
        return f"{self.source} ({kind}, {self.provider} on {self.device})"


def load_served_model(options: ServeOptions, device: torch.device) -> ServedModel:
    """The model of ``options`` on ``device``; one-line ``OptionError``/``CheckpointError`` for a bad file."""
    inference = options.inference
    model = load_model(options.checkpoint, options.model, device, inference.backbone, inference.amp)

    def maps(images: torch.Tensor, max_side: int | None) -> torch.Tensor:
        return model.maps(images.to(device), None, max_side).cpu()

    return ServedModel(options.source, model.backbone, device, model.provider, maps)


@dataclass
class _Job:
    image: torch.Tensor  # uint8 (3, H, W)
    max_side: int | None
    result: asyncio.Future = field(repr=False)


class Batcher:
    """Collects images into batches for ``maps``: one asyncio task takes the first waiting image and waits up to
    ``max_wait_s`` for others (up to ``max_batch``); while a batch runs, the next requests queue up. Counts the
    forward passes and the images they ran."""

    def __init__(self, maps: BatchMaps, max_batch: int, max_wait_s: float) -> None:
        self.maps, self.max_batch, self.max_wait_s = maps, max_batch, max_wait_s
        self.forward_passes = 0
        self.images = 0
        self._queue: asyncio.Queue[_Job] | None = None
        self._task: asyncio.Task | None = None
        # one thread runs the model: batches follow each other on the device, torch uses its own threads inside
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="r3net-model")

    @property
    def waiting(self) -> int:
        """The images waiting for the model (not those of the batch it runs)."""
        return self._queue.qsize() if self._queue is not None else 0

    def start(self) -> None:
        """Start collecting (inside the running event loop)."""
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._collect(self._queue))

    async def stop(self) -> None:
        """Stop collecting; the requests still waiting get an error (the server drained them first)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._executor.shutdown(wait=True)

    async def maps_of(self, image: torch.Tensor, max_side: int | None) -> torch.Tensor:
        """The 8-bit map (H, W) of ``image`` (uint8 ``(3, H, W)``), run in a batch with the images around it."""
        assert self._queue is not None, "Batcher.start() first"
        job = _Job(image, max_side, asyncio.get_running_loop().create_future())
        self._queue.put_nowait(job)
        return await job.result

    async def _collect(self, queue: asyncio.Queue[_Job]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = [await queue.get()]
            deadline = loop.time() + self.max_wait_s
            while len(jobs) < self.max_batch:
                if not queue.empty():
                    jobs.append(queue.get_nowait())
                    continue
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    jobs.append(await asyncio.wait_for(queue.get(), remaining))
                except TimeoutError:
                    break
            for batch in self.batches(jobs):
                await self._run(batch)

    def batches(self, jobs: list[_Job]) -> list[list[_Job]]:
        """``jobs`` as batches: by ``max_side``, then ``plan_batches`` on the image sizes (first come first)."""
        by_side: dict[int | None, list[_Job]] = {}
        for job in jobs:
            by_side.setdefault(job.max_side, []).append(job)
        batches = []
        for group in by_side.values():
            sizes: list[tuple[int, int] | None] = [(job.image.shape[1], job.image.shape[2]) for job in group]
            batches += [[group[i] for i in indices] for indices in plan_batches(sizes, self.max_batch)]
        return batches

    async def _run(self, batch: list[_Job]) -> None:
        waiting = [job for job in batch if not job.result.done()]  # a client that left cancelled its future
        if not waiting:
            return
        images = torch.stack([job.image for job in waiting])
        loop = asyncio.get_running_loop()
        try:
            maps = await loop.run_in_executor(self._executor, self.maps, images, waiting[0].max_side)
        except Exception as e:  # the model failed on this batch: its requests get a 500, the server goes on
            for job in waiting:
                if not job.result.done():
                    job.result.set_exception(e)
            return
        self.forward_passes += 1
        self.images += len(waiting)
        for job, saliency in zip(waiting, maps):
            if not job.result.done():
                job.result.set_result(saliency)
