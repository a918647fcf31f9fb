"""What every rank of ``predict`` runs, and the batch plan and cutouts it writes.

1. Rank r reads the headers of images r, r + N, ...; one all-gather gives every rank every size.
2. Every rank computes the same plan (``plan_batches``): images of equal size in batches, batch j to
   rank j mod N. It depends on the sizes and ``--batch-size`` only, never on the number of
   processes, so N processes write the maps of one, byte for byte.
3. DataLoader workers decode a batch; an image that cannot be decoded is set aside, not fatal.
4. Each map (or cutout) is written under a temporary name and renamed, then listed in the rank's
   journal (``map_record``).
5. The ranks gather the failures; rank 0 reports how many maps were written, in how long.

A cutout (``--cutout``) is the input image (decoded as the model saw it: RGB, EXIF orientation
applied) with the map as its alpha channel, one RGBA PNG per image. Without ``--threshold`` the
alpha is the 8-bit map itself, so it can be read back (``Image.open(p).getchannel("A")``); with it,
the alpha (or the map) is hard: 255 where the saliency is at least the threshold, else 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ignite.distributed as idist
import numpy as np
import torch
from PIL import Image

from ..atomic_files import atomic_output, write_json
from ..console import echo
from ..data.checks import image_size
from ..data.decode import load_image
from ..data.loader import init_loader_worker, worker_context
from ..distributed.process_setup import freeze_long_lived_objects, worker_thread_count, worker_threads
from ..distributed.ranks import (
    all_gather_items,
    all_gather_tensor,
    is_rank_zero,
    rank_zero_only,
    refuse_unless_ranks_agree,
)
from ..errors import DataError
from ..export.writer import OnnxModel, is_onnx, load_exported, onnx_providers
from ..inference import predict_maps, saliency_at_input_size, to_8bit_maps
from ..model.trained_model import TrainedWeights, build_model, read_trained_weights
from ..numerics import inference_numerics
from ..options import PredictOptions
from ..progress import Progress
from .crf import crf_refine
from .map_record import MapRecord
from .maps import save_map

# a batch holds no more pixels than --batch-size images of this size (MSRA10K's): a folder of camera
# photos of one size runs in small batches, or one by one, instead of exhausting memory
REFERENCE_PIXELS = 400 * 300
Size = tuple[int, int]  # (height, width)
# a uint8 batch (N, 3, H, W) on the device to 8-bit maps (N, H, W)
MapFunction = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class PredictJob:
    """The work of every rank: the images still to do and where their maps go."""

    options: PredictOptions
    sources: list[str]
    outputs: list[str]
    key: str
    shared: dict[str, str] = field(default_factory=dict)  # what every rank must be started with alike
    weights: TrainedWeights | None = None  # read by the launching process when the worker runs in it
    outcome_file: str | None = None  # where rank 0 leaves the outcome for a spawning launcher
    outcome: dict[str, Any] = field(default_factory=dict)  # filled in when the worker runs in-process


def predict_worker(local_rank: int, job: PredictJob) -> None:
    """Make this rank's maps; every rank ends knowing the outcome (maps written, failures, time)."""
    refuse_unless_ranks_agree(job.shared)  # ranks of torchrun or srun, each started by its own command
    freeze_long_lived_objects()
    rank, world = idist.get_rank(), idist.get_world_size()
    device, options = idist.device(), job.options
    batches = plan_batches(gather_sizes(job.sources), options.batch_size)[rank::world]  # batch j: rank j mod N
    with worker_threads(device) as threads, inference_numerics(options.inference.tf32 == "on"):
        to_maps = map_function(options, device, job.weights, threads)
        start = time.perf_counter()
        with Progress(len(job.sources), "predict", "image", enabled=options.progress and is_rank_zero()) as progress:
            written, failed = _predict_batches(job, batches, to_maps, device, progress)
            progress.complete()
        seconds = time.perf_counter() - start
    outcome = {
        "written": int(idist.all_reduce(written)),
        "failed": sorted(all_gather_items(failed)),
        "seconds": float(idist.all_reduce(seconds, op="MAX")),  # until the last rank is done
    }
    job.outcome.update(outcome)
    if job.outcome_file:
        _leave_outcome(Path(job.outcome_file), outcome)


def gather_sizes(sources: list[str]) -> list[Size | None]:
    """The (height, width) of every image (None: unreadable header), each rank reading 1/N of them."""
    rank, world = idist.get_rank(), idist.get_world_size()
    share = -(-len(sources) // world)
    mine = torch.full((share, 2), -1, dtype=torch.int64)
    for position, index in enumerate(range(rank, len(sources), world)):
        size = image_size(sources[index])
        if size is not None:
            mine[position] = torch.tensor(size)
    every = all_gather_tensor(mine.to(idist.device())).cpu().view(world, share, 2).tolist()
    sizes = [every[index % world][index // world] for index in range(len(sources))]
    return [(height, width) if height >= 0 else None for height, width in sizes]


def batch_limit(size: Size, batch_size: int) -> int:
    """How many images of ``size`` one batch may hold: ``batch_size``, fewer for large images."""
    height, width = size
    return max(1, min(batch_size, batch_size * REFERENCE_PIXELS // max(height * width, 1)))


def plan_batches(sizes: list[Size | None], batch_size: int) -> list[list[int]]:
    """Batches of image indices, ordered by their first image: equal sizes together (in index
    order), at most ``batch_limit`` each; an image of unknown size (unreadable header) alone."""
    groups: dict[Size, list[int]] = {}
    batches: list[list[int]] = []
    for index, size in enumerate(sizes):
        if size is None:
            batches.append([index])
        else:
            groups.setdefault(size, []).append(index)
    for size, indices in groups.items():
        step = batch_limit(size, batch_size)
        batches += [indices[i : i + step] for i in range(0, len(indices), step)]
    return sorted(batches, key=lambda batch: batch[0])


def map_function(
    options: PredictOptions, device: torch.device, weights: TrainedWeights | None, threads: int
) -> MapFunction:
    """The exported model's or the checkpoint's maps of a uint8 batch, at the inference size
    (``--size`` / ``--max-side``) and back at each image's own; ``threads`` for onnxruntime."""
    size, max_side = options.inference.size, options.inference.max_side
    if options.model is not None:
        if is_onnx(options.model) and onnx_providers(device)[0] == "CPUExecutionProvider":
            threads = worker_thread_count(torch.device("cpu"))  # this rank's share of the cores, not all of them
        run = load_exported(options.model, device, threads)
        if isinstance(run, OnnxModel):
            _say_onnx_provider(run.provider, device, threads)
        return lambda images: to_8bit_maps(saliency_at_input_size(run, images, size, max_side))
    assert options.checkpoint is not None
    model = build_model(weights or read_trained_weights(options.checkpoint, options.inference.backbone), device)
    return lambda images: predict_maps(model, images, options.inference.amp, size, max_side)


@rank_zero_only
def _say_onnx_provider(provider: str, device: torch.device, threads: int) -> None:
    # rank 0's provider; each rank has its own GPU's or the CPU's
    if provider == "CUDAExecutionProvider":
        echo("onnxruntime runs the model with CUDAExecutionProvider, each rank on its own GPU")
        return
    missing = " (only the CPU onnxruntime is installed: pip install onnxruntime-gpu for the GPUs)"
    echo(
        f"onnxruntime runs the model with {provider}, {threads} thread(s) per rank"
        + (missing if device.type == "cuda" else "")
    )


def _predict_batches(
    job: PredictJob, batches: list[list[int]], to_maps: MapFunction, device: torch.device, progress: Progress
) -> tuple[int, list[str]]:
    """Maps of ``batches``, written and recorded; returns how many were written and the problems of
    the images that could not be read."""
    workers = job.options.inference.workers
    loader = torch.utils.data.DataLoader(
        BatchFiles(job.sources, batches),
        batch_size=None,
        num_workers=workers,
        collate_fn=_as_is,
        worker_init_fn=init_loader_worker,
        multiprocessing_context=worker_context(workers),
    )
    world = idist.get_world_size()
    written, failed = 0, []
    with MapRecord(Path(job.options.output), job.key).journal(idist.get_rank()) as journal:
        for images, problems in loader:
            failed += problems
            for indices, batch in _same_shape(images):
                maps = to_maps(batch.to(device)).cpu()  # written from the host: one copy per batch
                for index, image, saliency in zip(indices, batch, maps):
                    _write(job.options, job.outputs[index], image, saliency)
                    journal.add(Path(job.outputs[index]).name)
            written += len(images)
            progress.update((len(images) + len(problems)) * world)  # rank 0's share times the ranks
    return written, failed


def _write(options: PredictOptions, path: str, image: torch.Tensor, saliency: torch.Tensor) -> None:
    """One image's map (CRF-refined, made hard with ``--threshold``) or cutout, atomically."""
    if options.inference.crf:
        saliency = crf_refine(image, saliency)
    if options.threshold is not None:
        saliency = hard_map(saliency, options.threshold)
    if options.cutout:
        save_cutout(path, image, saliency)
    else:
        save_map(path, saliency)


def hard_map(saliency: torch.Tensor, threshold: float) -> torch.Tensor:
    """A uint8 ``(H, W)`` map made binary: 255 where ``saliency / 255 >= threshold``, else 0.
    Compared in float64, so a threshold given as ``k / 255`` keeps exactly the values from ``k`` up."""
    return torch.where(saliency.to(torch.float64) / 255.0 >= threshold, 255, 0).to(torch.uint8)


def save_cutout(path: str | Path, image: torch.Tensor, alpha: torch.Tensor) -> None:
    """Write ``image`` (uint8 ``(3, H, W)`` RGB) with ``alpha`` (uint8 ``(H, W)``) as an RGBA PNG, atomically."""
    if image.shape[1:] != alpha.shape:
        raise ValueError(f"image {tuple(image.shape)} and map {tuple(alpha.shape)} differ in size")
    rgb = image.detach().to("cpu", torch.uint8).permute(1, 2, 0).numpy()
    rgba = np.dstack([rgb, alpha.detach().to("cpu", torch.uint8).numpy()])
    with atomic_output(path, durable=False) as tmp:  # as save_map: a rerun of predict trusts whole files
        Image.fromarray(rgba, mode="RGBA").save(tmp, format="PNG")


class BatchFiles(torch.utils.data.Dataset):
    """Batch j: the decoded uint8 ``(3, H, W)`` images of ``batches[j]`` by index, and the problem
    of each image that could not be decoded."""

    def __init__(self, sources: list[str], batches: list[list[int]]) -> None:
        self.sources, self.batches = sources, batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, j: int) -> tuple[dict[int, torch.Tensor], list[str]]:
        images, problems = {}, []
        for index in self.batches[j]:
            try:
                images[index] = load_image(self.sources[index], warn_damaged=True)
            except DataError as e:
                problems.append(str(e))
        return images, problems


def _as_is(item: Any) -> Any:
    return item


def _same_shape(images: dict[int, torch.Tensor]) -> list[tuple[list[int], torch.Tensor]]:
    """The images as stacked batches of one shape each (the plan grouped them by header size; a
    file whose pixels disagree with its header runs apart)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, image in images.items():
        groups.setdefault(tuple(image.shape), []).append(index)
    return [(indices, torch.stack([images[i] for i in indices])) for indices in groups.values()]


@rank_zero_only
def _leave_outcome(path: Path, outcome: dict[str, Any]) -> None:
    write_json(outcome, path)
