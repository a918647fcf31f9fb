"""``evaluate``: score a checkpoint on data sets, or saliency maps already on disk.

* ``evaluate_checkpoint``: full-resolution inference (batch 1, each image at its own size) on one
  or many processes, one table row and one JSON entry per data set. Every rank scores an unpadded
  shard and the metrics all-reduce exact sums, so N processes give the numbers of one.
* ``evaluate_maps``: any method's saliency maps matched to masks by file stem, scored by
  ``maps.score_maps`` (the code ``compare`` scores with too).

Everything a user can get wrong (paths, checkpoint, backbone, a missing extra) is checked in the
launching process before any worker starts, so it fails with one line instead of N tracebacks.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import ignite.distributed as idist
import torch
from ignite.engine import Engine, Events

from ..atomic_files import write_text
from ..data.checks import assert_dataset_ok
from ..data.folder import listing_digest
from ..data.loader import SaliencyEvalSet, build_eval_loader
from ..data.registry import resolve_names
from ..distributed.agreement import refuse_unless_ranks_agree
from ..distributed.devices import processes_on_device
from ..distributed.launch import launch
from ..distributed.process_setup import freeze_long_lived_objects, worker_threads
from ..distributed.ranks import is_rank_zero, rank_zero_only
from ..distributed.topology import LaunchSpec, rank_set_by_launcher
from ..errors import OptionError, listing, warn
from ..inference import attach_scoring, create_evaluator, evaluator_step, score_shard
from ..metrics.keys import METRIC_KEYS
from ..metrics.saliency import SaliencyMetrics
from ..model.trained_model import TrainedWeights, build_model, read_trained_weights
from ..numerics import inference_numerics
from ..options import EvaluateOptions
from ..options.fields import values_by_flag
from ..output_paths import check_writable_file, check_writable_folder
from ..progress import Progress
from .crf import crf_refine, require_crf
from .dataset_folders import locate_dataset, named_folders
from .maps import dataset_names, match_maps, output_path, save_map, score_maps
from .metrics_table import report
from .per_image import ImageScores, evaluation_csv

Row = dict[str, float]


def evaluate(options: EvaluateOptions) -> None:
    """What ``python run.py evaluate`` runs: ``evaluate_maps`` with ``--maps``, else
    ``evaluate_checkpoint``.

    Raises:
        OptionError: an option, or a combination of them, is wrong (before any work).
    """
    options.validate()
    if options.maps is not None:
        evaluate_maps(options)
    else:
        evaluate_checkpoint(options)


def evaluate_checkpoint(options: EvaluateOptions) -> None:
    """Score ``options.checkpoint`` on every data set folder of ``options.data``, on
    ``options.processes.nproc`` processes; rank 0 prints the table (unless ``options.quiet``) and
    writes ``options.json_path``.

    Args:
        options: the command's options (``--checkpoint``, ``--data``, ``--save-maps``, ``--json``,
            the inference and process options). Maps go to ``save_maps/<dataset>/<stem>.png``; a
            data set's name is its entry in ``options.names``, by default derived from its folder.

    Raises:
        OptionError: a wrong option, an unwritable ``--json`` or ``--save-maps``, a missing extra
            (``--crf``), or a checkpoint that does not fit ``--backbone``.
        DataError: a data set folder with problems (all of them listed).
        CheckpointError: the checkpoint cannot be read.
        WorkerFailed: a rank failed during the run (one line naming it).
    """
    options.validate()
    options = replace(options, processes=processes_on_device(options.processes))
    assert options.checkpoint is not None and options.data
    if options.names is None:  # NAME=DIR items, or folders named after themselves
        named = named_folders(resolve_names(options.data, options.data_root, "--data", named=True), "--data")
        options = replace(options, names=[name for name, _ in named], data=[folder for _, folder in named])
    checkpoint, data = options.checkpoint, options.data
    assert checkpoint is not None and data
    if options.inference.crf:
        require_crf()
    # DataError listing every problem (headers read), before any work; the listings the ranks compare
    listings = [listing_digest(folder, assert_dataset_ok(folder, option="--data")) for folder in data]
    check_writable_file(options.json_path, "--json")
    check_writable_file(options.per_image, "--per-image")
    check_writable_folder(options.save_maps, "--save-maps")
    weights = read_trained_weights(checkpoint, options.inference.backbone)
    options = replace(
        options,
        checkpoint=weights.path,  # a Hub source's local file: the workers read it, not the Hub
        inference=replace(options.inference, backbone=weights.backbone),
    )
    _make_map_folders(options)
    spec = LaunchSpec.on_one_node(options.processes)
    # each spawned worker reads the file rather than receive hundreds of MB through a pipe
    in_process = None if spec.spawns() or rank_set_by_launcher() else weights
    launch(_evaluate_worker, (options, in_process, _options_every_rank_shares(options, listings)), spec)


def _options_every_rank_shares(options: EvaluateOptions, listings: list[str]) -> dict[str, str]:
    """What every rank must be started with alike: each node may write its maps and JSON elsewhere,
    with other ``--workers``; the checkpoint is compared by its size (it is not read again) and the
    data sets by their listings (``data.listing_digest``)."""
    assert options.checkpoint is not None and options.data and options.names
    return {
        "--checkpoint": f"{Path(options.checkpoint).stat().st_size} bytes",
        **values_by_flag(options.inference, ("backbone", "crf", "amp", "tf32", "size", "max_side")),
        **values_by_flag(options, ("protocol",)),
        **{f"--data {name}": listing for name, listing in zip(options.names, listings)},
    }


def _make_map_folders(options: EvaluateOptions) -> None:
    """``--save-maps``'s folder per data set, made here so that ranks never race on it."""
    if options.save_maps:
        for name in options.names or ():
            (Path(options.save_maps) / name).mkdir(parents=True, exist_ok=True)


def _evaluate_worker(local_rank: int, job: tuple[EvaluateOptions, TrainedWeights | None, dict[str, str]]) -> None:
    """Runs on every rank: refuse ranks started differently, score each data set on this rank's
    shard; rank 0 reports. ``job`` holds the weights already read when the worker runs in the
    launching process, and what every rank must share."""
    options, weights, shared = job
    refuse_unless_ranks_agree(shared)
    freeze_long_lived_objects()
    device = idist.device()
    assert options.checkpoint is not None and options.data and options.names
    with worker_threads(device), inference_numerics(options.inference.tf32 == "on"):
        model = build_model(weights or read_trained_weights(options.checkpoint, options.inference.backbone), device)
        rank, world = idist.get_rank(), idist.get_world_size()
        workers = options.inference.workers
        # a damaged JPEG is scored as decoded, as other toolboxes would, but named (libjpeg names no file)
        loaders = [build_eval_loader(f, world, rank, workers, warn_damaged=True) for f in options.data]
        total = sum(len(cast(SaliencyEvalSet, loader.dataset)) for loader in loaders)
        desc = "inference" if options.quiet else "evaluate"  # quiet: compare making a checkpoint's maps
        with Progress(total, desc, "image", enabled=options.progress and is_rank_zero()) as progress:
            scored = {
                name: _evaluate_dataset(model, device, name, loader, options, progress)
                for name, loader in zip(options.names, loaders)
            }
            progress.complete()
    _report_rows(scored, options)


@rank_zero_only
def _report_rows(scored: dict[str, tuple[Row, list[ImageScores]]], options: EvaluateOptions) -> None:
    rows = {name: row for name, (row, _) in scored.items()}
    report(rows, options.json_path, print_table=not options.quiet, protocol=options.protocol)
    if options.per_image:
        write_text(
            evaluation_csv({name: images for name, (_, images) in scored.items()}, options.protocol), options.per_image
        )
    if options.save_maps and not options.quiet:
        print(f"maps written to {options.save_maps}", flush=True)


def _evaluate_dataset(
    model: torch.nn.Module, device: torch.device, name: str, loader: Any, options: EvaluateOptions, progress: Progress
) -> tuple[Row, list[ImageScores]]:
    """This rank's share (``loader``) of the data set ``name`` scored; the row (and with
    ``--per-image`` every image's scores) over all ranks: a collective."""
    inference = options.inference
    evaluator = create_evaluator(model, device, inference.amp, inference.size, inference.max_side)
    # handlers run in the order they are added: refine, then save, then score the refined map
    if inference.crf:
        evaluator.add_event_handler(Events.ITERATION_COMPLETED, _refine_with_crf)
    if options.save_maps:
        evaluator.add_event_handler(Events.ITERATION_COMPLETED, _save_maps, Path(options.save_maps) / name)
    metric = SaliencyMetrics(device=device, protocol=options.protocol, per_image=bool(options.per_image))
    attach_scoring(evaluator, metric)
    values = score_shard(evaluator, loader, metric, progress)
    images = metric.per_image_scores() if options.per_image else []
    return {"images": len(cast(SaliencyEvalSet, loader.dataset)), **{k: float(values[k]) for k in METRIC_KEYS}}, images


def _refine_with_crf(engine: Engine) -> None:
    batch, (maps, gts) = evaluator_step(engine)
    refined = [crf_refine(img, m) for img, m in zip(batch["image"], maps)]
    engine.state.output = cast(Any, (refined, gts))  # ignite annotates State.output as int


def _save_maps(engine: Engine, out_dir: Path) -> None:
    batch, (maps, _) = evaluator_step(engine)
    for stem, saliency in zip(batch["name"], maps):
        save_map(output_path(out_dir, stem), saliency)


def evaluate_maps(options: EvaluateOptions) -> Row:
    """Score the saliency maps in ``options.maps`` against the masks in ``options.gt`` (matched by
    file stem); prints the table, writes ``options.json_path`` and returns the row.

    Raises:
        OptionError: a wrong option, an unwritable ``--json``, or no map matching a mask.
    """
    options.validate()
    maps, gt, json_path = options.maps, options.gt, options.json_path
    assert maps is not None and gt is not None
    check_writable_file(json_path, "--json")
    check_writable_file(options.per_image, "--per-image")
    # a data set folder, as compare takes it, stands for its masks
    masks = locate_dataset(gt, f"--gt {gt}").masks if Path(gt).is_dir() else Path(gt)
    match = match_maps(maps, masks)
    if match.maps_without_mask:
        warn(
            f"{len(match.maps_without_mask)} map(s) without a mask in {masks}, skipped: "
            f"{listing(p.name for p in match.maps_without_mask)}"
        )
    if match.masks_without_map:
        warn(
            f"{len(match.masks_without_map)} mask(s) without a map in {maps}, skipped: "
            f"{listing(p.name for p in match.masks_without_map)}"
        )
    if not match.pairs:
        raise OptionError(f"no map in {maps} matches a mask in {masks} by file name")
    metric = SaliencyMetrics(protocol=options.protocol, per_image=bool(options.per_image))
    with Progress(len(match.pairs), "evaluate", "map", enabled=options.progress) as progress:
        resized = score_maps(progress.counted([(m, k) for _, m, k in match.pairs]), metric)
    if resized:
        warn(f"{len(resized)} map(s) resized (bilinear) to their mask's size: {listing(resized)}")
    values = metric.compute()
    row = {"images": len(match.pairs), **{k: float(values[k]) for k in METRIC_KEYS}}
    name = dataset_names([gt])[0]
    report({name: row}, json_path, protocol=options.protocol)
    if options.per_image:
        write_text(evaluation_csv({name: metric.per_image_scores()}, options.protocol), options.per_image)
    return row
