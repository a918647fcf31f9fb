"""What every rank of ``predict`` runs: the batch plan (equal sizes together, batch j to rank j mod N,
independent of N, so N processes write the maps of one byte for byte), the maps and cutouts it writes,
and the record of the maps done, so that a stopped run continues where it stopped.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import ignite.distributed as idist
import torch

from .. import __version__
from ..atomic_files import atomic_output, write_json
from ..console import echo
from ..content_key import ContentKey
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
from ..inference.batches import Size, plan_batches
from ..inference.cutout import cutout_image, finished_map, read_background
from ..inference.model import is_onnx, load_model, onnx_providers
from ..model.backbone_weights import sha256_of
from ..model.trained_model import TrainedWeights
from ..numerics import inference_numerics
from ..options import PredictOptions
from ..progress import Progress
from .maps import save_map

# a uint8 batch (N, 3, H, W) on the device to 8-bit maps (N, H, W)
MapFunction = Callable[[torch.Tensor], torch.Tensor]
RECORD_DIR = ".predict"


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
    if job.outcome_file and is_rank_zero():
        write_json(outcome, Path(job.outcome_file))


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


def map_function(
    options: PredictOptions, device: torch.device, weights: TrainedWeights | None, threads: int
) -> MapFunction:
    """The exported model's or the checkpoint's maps of a uint8 batch; ``threads`` for onnxruntime."""
    if options.model is not None and is_onnx(options.model) and onnx_providers(device)[0] == "CPUExecutionProvider":
        threads = worker_thread_count(torch.device("cpu"))  # this rank's share of the cores, not all of them
    inference = options.inference
    model = load_model(options.checkpoint, options.model, device, inference.backbone, inference.amp, weights, threads)
    if model.provider != "torch":
        _say_onnx_provider(model.provider, device, threads)
    return lambda images: model.maps(images, inference.size, inference.max_side)


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
    """Writes and records the maps of ``batches``; returns how many, and the unreadable images' problems."""
    workers = job.options.inference.workers
    loader = torch.utils.data.DataLoader(
        BatchFiles(job.sources, batches),
        batch_size=None,
        num_workers=workers,
        worker_init_fn=init_loader_worker,
        multiprocessing_context=worker_context(workers),
    )
    world = idist.get_world_size()
    written, failed = 0, []
    write = output_writer(job.options, device)
    with MapRecord(Path(job.options.output), job.key).journal(idist.get_rank()) as journal:
        for images, problems in loader:
            failed += problems
            for indices, batch in _same_shape(images):
                maps = to_maps(batch.to(device)).cpu()  # written from the host: one copy per batch
                for index, image, saliency in zip(indices, batch, maps):
                    write(job.outputs[index], image, saliency)
                    journal.write(json.dumps(Path(job.outputs[index]).name) + "\n")
            written += len(images)
            progress.update((len(images) + len(problems)) * world)  # rank 0's share times the ranks
    return written, failed


def output_writer(options: PredictOptions, device: torch.device) -> Callable[[str, torch.Tensor, torch.Tensor], None]:
    """What writes one image's map (CRF-refined, made hard with ``--threshold``) or cutout, atomically; the cutout's
    refinement runs on ``device``, ``--background``'s file is read once."""
    background = read_background(options.background) if options.background is not None else None

    def write(path: str, image: torch.Tensor, saliency: torch.Tensor) -> None:
        saliency = finished_map(image, saliency, options.inference.crf, options.threshold)
        if not options.cutout:
            save_map(path, saliency)
            return
        picture = cutout_image(image.to(device), saliency, options.refine_foreground, background)
        with atomic_output(path, durable=False) as tmp:  # as save_map: a rerun of predict trusts whole files
            picture.save(tmp, format="JPEG" if options.jpeg else "PNG", quality=95)  # PNG leaves quality aside

    return write


class BatchFiles(torch.utils.data.Dataset):
    """Batch j: the uint8 ``(3, H, W)`` images of ``batches[j]`` by index, and the undecodable ones' problems."""

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


def _same_shape(images: dict[int, torch.Tensor]) -> list[tuple[list[int], torch.Tensor]]:
    """The images stacked by shape (a file whose pixels disagree with its header runs apart)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, image in images.items():
        groups.setdefault(tuple(image.shape), []).append(index)
    return [(indices, torch.stack([images[i] for i in indices])) for indices in groups.values()]


def run_description(model_file: str | Path, settings: Mapping[str, Any]) -> dict[str, Any]:
    """What decides the maps: the model file (path, sha256), ``settings`` (options that change pixels), versions."""
    return {
        "model": os.fspath(Path(model_file).resolve()),
        "sha256": sha256_of(model_file),
        "options": dict(settings),
        "versions": {"ignite_r3net": __version__, "torch": torch.__version__},
    }


def run_key(description: Mapping[str, Any]) -> str:
    """The key of a run: everything in ``description`` but where the model file lies."""
    decisive = {k: v for k, v in description.items() if k != "model"}
    return ContentKey("predict run", 1).add_values(decisive).hexdigest(32)


class MapRecord:
    """The maps of one run key in ``OUTPUT/.predict/``: ``<key>.json`` describes the key for people, and
    ``<key>.rank<N>.done`` lists each map rank N renamed into place, a JSON line each (one a crash cut
    short is skipped). Not fsynced: a map a power loss took back is missing, so it is made again."""

    def __init__(self, out_dir: str | Path, key: str) -> None:
        self.out, self.key = Path(out_dir), key
        self.folder = self.out / RECORD_DIR

    def done(self, names: Iterable[str]) -> set[str]:
        """Those of ``names`` (map file names) whose map exists and is listed for this key."""
        listed: set[str] = set()
        for journal in self.folder.glob(f"{self.key}.rank*.done"):
            for line in journal.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    listed.add(json.loads(line))
                except ValueError:
                    continue
        if not listed:
            return set()
        with os.scandir(self.out) as entries:
            present = {e.name for e in entries if e.is_file()}
        return {name for name in names if name in listed and name in present}

    def begin(self, description: Mapping[str, Any]) -> None:
        """Before any map is written (the leading process): forget other keys' journals and describe
        this key (``run_lock.claimed_folder`` removed the temporaries an interrupted run left)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for path in self.folder.iterdir():
            if not path.name.startswith(self.key + "."):
                path.unlink(missing_ok=True)
        write_json(dict(description), self.folder / f"{self.key}.json")

    def journal(self, rank: int) -> IO[str]:
        """Rank ``rank``'s list, open for appending: a ``json.dumps`` line per map once it has its final name."""
        self.folder.mkdir(parents=True, exist_ok=True)
        # line-buffered: a line reaches the file at once
        return open(self.folder / f"{self.key}.rank{rank}.done", "a", encoding="utf-8", buffering=1)
