"""Scoring ``compare``'s (method, data set) cells: ``OUT/cache/<key>.json`` per cell, keyed by its files
(path, size, mtime), the protocol and the scoring code, and the cells it lacks scored over processes
(exact sums all-reduced: N processes write the entries of one, bit for bit).
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ignite.distributed as idist

from .. import __version__
from ..atomic_files import read_json_object, write_json
from ..content_key import ContentKey
from ..data.decode import load_mask
from ..distributed.launch import launch
from ..distributed.process_setup import freeze_long_lived_objects, worker_threads
from ..distributed.ranks import is_rank_zero, rank_zero_only
from ..distributed.topology import LaunchSpec
from ..metrics.saliency import SaliencyMetrics
from ..progress import Progress
from .maps import load_saliency_map, score_maps

CACHE_FORMAT = 2  # bump when an entry's layout changes (2: per-image scores)
MANIFEST = ".inference.json"  # beside a checkpoint method's maps; hidden, so never read as a map
_LIBRARIES = ("torch", "torchvision", "numpy", "scipy", "pillow")
LabelledFiles = tuple[str, list[tuple[Path, Path]]]  # (label for the log, (map, mask) files)


def code_version() -> str:
    """Digest of the sources and library versions that decide a score."""
    metric_dir = Path(inspect.getsourcefile(SaliencyMetrics) or "").parent
    readers = {Path(inspect.getsourcefile(f) or "") for f in (load_mask, load_saliency_map)}
    sources = sorted(metric_dir.glob("*.py")) + sorted(readers)
    return ContentKey("score code", CACHE_FORMAT).add_sources(sources).add_libraries(_LIBRARIES).hexdigest()


def pair_key(pairs: Iterable[tuple[Path, Path]], protocol: str, code: str) -> str:
    """The key of scoring ``(map, mask)`` files (absolute paths) under ``protocol`` with ``code``."""
    key = ContentKey("scores", CACHE_FORMAT).add_values([protocol, code])
    return key.add_files(p for pair in pairs for p in pair).hexdigest()


def inference_key(checkpoint: Path, data: Iterable[tuple[Path, Path]], options: Mapping[str, Any]) -> str:
    """The key of a checkpoint's maps of a data set (every file, the inference ``options``, the versions),
    kept in ``MANIFEST`` beside the maps, written after the last one."""
    key = ContentKey("maps", CACHE_FORMAT).add_values([__version__, dict(options)]).add_libraries(["torch"])
    return key.add_files([checkpoint]).add_files(p for pair in data for p in pair).hexdigest()


def read_entry(cache_dir: Path, key: str) -> dict[str, Any] | None:
    """The cached entry for ``key``, or None (absent, unreadable, or of another format)."""
    entry = read_json_object(cache_dir / f"{key}.json")
    return entry if entry and entry.get("format") == CACHE_FORMAT and entry.get("key") == key else None


def recorded_key(record: Path) -> str | None:
    """The ``key`` of a JSON record (a maps folder's ``MANIFEST``, a figure's record), or None."""
    return (read_json_object(record) or {}).get("key")


def write_manifest(maps_dir: Path, key: str, checkpoint: Path, images: int) -> None:
    """Record that ``maps_dir`` holds the complete maps of inference ``key``."""
    write_json({"key": key, "checkpoint": os.fspath(checkpoint), "images": images}, maps_dir / MANIFEST)


@dataclass
class ScoreJob:
    """The cells to score, for every rank (picklable, for spawned workers)."""

    cells: list[tuple[str, list[tuple[str, str]], str]]  # (label, (map, mask) files, entry path)
    protocol: str
    progress: bool = True


def score_cells(
    cells: list[LabelledFiles], cache: Path, protocol: str, spec: LaunchSpec, progress: bool = True
) -> list[dict[str, Any]]:
    """Each cell's entry (``count``, ``resized``, ``metrics``, ``curves``, ``per_image``), scoring those
    ``cache`` lacks on ``spec.nproc`` processes (image i of them all on rank i mod N)."""
    code = code_version()
    keys = [pair_key(files, protocol, code) for _, files in cells]
    todo: dict[str, LabelledFiles] = {}  # by key: two methods given the same maps are scored once
    for key, cell in zip(keys, cells):
        if key not in todo and read_entry(cache, key) is None:
            todo[key] = cell
    print(f"{sum(k not in todo for k in keys)} of {len(cells)} (method, data set) pair(s) from the cache", flush=True)
    if todo:
        print(f"scoring {len(todo)} pair(s) on {spec.nproc} process(es)", flush=True)
        work = [
            (label, [(str(m), str(k)) for m, k in files], str(cache / f"{key}.json"))
            for key, (label, files) in todo.items()
        ]
        job = ScoreJob(work, protocol, progress)
        if spec.nproc == 1:  # in this process: an unreadable map is a plain one-line error
            _score_worker(0, job)
        else:
            launch(_score_worker, job, spec)
    entries = [e for e in (read_entry(cache, key) for key in keys) if e is not None]
    if len(entries) != len(keys):
        raise OSError(f"cache entries vanished from {cache} while compare ran")
    return entries


def _score_worker(local_rank: int, job: ScoreJob) -> None:
    """Every rank: score its share of each cell's images; rank 0 stores the entries."""
    freeze_long_lived_objects()
    rank, world = idist.get_rank(), idist.get_world_size()
    total, dealt = sum(len(files) for _, files, _ in job.cells), 0
    # one thread: a map's tensors are small (~0.1 M pixels) and intra-op threads cost more than
    # they give (scoring ran 10x slower with 2 threads than with 1 on a busy 2-core machine)
    with worker_threads(idist.device(), limit=1):
        with Progress(total, "score", "map", enabled=job.progress and is_rank_zero()) as progress:
            for label, files, entry_path in job.cells:
                start = time.perf_counter()
                mine = [(Path(m), Path(k)) for i, (m, k) in enumerate(files) if (dealt + i) % world == rank]
                dealt += len(files)
                metric = SaliencyMetrics(device=idist.device(), protocol=job.protocol, per_image=True)
                resized = idist.all_reduce(float(len(score_maps(progress.counted(mine, world), metric))))
                entry = {
                    "count": len(files),
                    "resized": int(resized),
                    "metrics": metric.compute(),
                    "curves": {name: [float(v) for v in curve] for name, curve in metric.curves().items()},
                    "per_image": dict(metric.per_image_scores()),
                }
                _store(Path(entry_path), entry, label, time.perf_counter() - start)


@rank_zero_only
def _store(path: Path, entry: dict[str, Any], label: str, seconds: float) -> None:
    write_json({"format": CACHE_FORMAT, "key": path.stem, **entry}, path)  # atomic: the old entry or none
    print(f"scored {label}: {entry['count']} maps in {seconds:.1f} s", flush=True)
