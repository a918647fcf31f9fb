"""``evaluate``: score a checkpoint on data sets (batch 1, each image at its own size; each rank an unpadded
shard, exact sums all-reduced, so N processes give the numbers of one), or maps already on disk. Every
mistake is found in the launching process, before any worker starts: one line, not N tracebacks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import ignite.distributed as idist
import torch
from ignite.engine import Engine, Events

from ..atomic_files import check_writable_file, check_writable_folder, write_json, write_text
from ..data.checks import assert_dataset_ok
from ..data.folder import listing_digest
from ..data.loader import SaliencyEvalSet, build_eval_loader
from ..data.registry import resolve_names
from ..distributed.launch import launch
from ..distributed.process_setup import freeze_long_lived_objects, worker_threads
from ..distributed.ranks import is_rank_zero, rank_zero_only, refuse_unless_ranks_agree
from ..distributed.topology import rank_set_by_launcher
from ..errors import OptionError, listing, warn
from ..inference.crf import crf_refine, require_crf
from ..inference.engine import attach_scoring, create_evaluator, evaluator_step, score_shard
from ..metrics.keys import METRIC_KEYS, PROTOCOL_MARK, PROTOCOL_METRICS, ImageScores, protocol_fields, protocol_note
from ..metrics.saliency import SaliencyMetrics
from ..model.trained_model import TrainedWeights, build_model, read_trained_weights
from ..numerics import inference_numerics
from ..options import EvaluateOptions
from ..options.fields import values_by_flag
from ..progress import Progress
from .comparison_table import evaluation_csv
from .maps import dataset_names, locate_dataset, match_maps, named_folders, output_path, save_map, score_maps

Row = dict[str, float]


def evaluate(options: EvaluateOptions) -> None:
    """``evaluate_maps`` with ``--maps``, else ``evaluate_checkpoint``."""
    if options.maps is not None:
        evaluate_maps(options)
    else:
        evaluate_checkpoint(options)


def evaluate_checkpoint(options: EvaluateOptions) -> None:
    """Score ``options.checkpoint`` on each folder of ``options.data`` (named by ``options.names``, by
    default after the folder); rank 0 prints the table (unless ``quiet``) and writes the outputs. Raises
    ``OptionError``, ``DataError`` (every problem of a data set), ``CheckpointError``, ``WorkerFailed``."""
    options.validate()
    options = replace(options, processes=options.processes.on_device())
    assert options.checkpoint is not None and options.data
    if options.names is None:  # NAME=DIR items, or folders named after themselves
        named = named_folders(resolve_names(options.data, options.data_root, "--data", named=True), "--data")
        options = replace(options, names=[name for name, _ in named], data=[folder for _, folder in named])
    assert options.checkpoint is not None and options.data
    if options.inference.crf:
        require_crf()
    # DataError listing every problem (headers read), before any work; the listings the ranks compare
    listings = [listing_digest(folder, assert_dataset_ok(folder, option="--data")) for folder in options.data]
    check_writable_file(options.json_path, "--json")
    check_writable_file(options.per_image, "--per-image")
    check_writable_folder(options.save_maps, "--save-maps")
    weights = read_trained_weights(options.checkpoint, options.inference.backbone)
    options = replace(
        options,
        checkpoint=weights.path,  # a Hub source's local file: the workers read it, not the Hub
        inference=replace(options.inference, backbone=weights.backbone),
    )
    if options.save_maps:  # each data set's folder, made here so that ranks never race on it
        for name in options.names or ():
            (Path(options.save_maps) / name).mkdir(parents=True, exist_ok=True)
    spec = options.processes.launch_spec()
    # each spawned worker reads the file rather than receive hundreds of MB through a pipe
    in_process = None if spec.spawns() or rank_set_by_launcher() else weights
    launch(_evaluate_worker, (options, in_process, _options_every_rank_shares(options, listings)), spec)


def _options_every_rank_shares(options: EvaluateOptions, listings: list[str]) -> dict[str, str]:
    """What every rank must be started with alike (outputs and ``--workers`` may differ per node); the
    checkpoint by its size (it is not read again), the data sets by their listings."""
    assert options.checkpoint is not None and options.data and options.names
    return {
        "--checkpoint": f"{Path(options.checkpoint).stat().st_size} bytes",
        **values_by_flag(options.inference, ("backbone", "crf", "amp", "tf32", "size", "max_side")),
        **values_by_flag(options, ("protocol",)),
        **{f"--data {name}": listing for name, listing in zip(options.names, listings)},
    }


def _evaluate_worker(local_rank: int, job: tuple[EvaluateOptions, TrainedWeights | None, dict[str, str]]) -> None:
    """Every rank: score each data set on its shard (``job``'s weights: None when spawned); rank 0 reports."""
    options, weights, shared = job
    refuse_unless_ranks_agree(shared)
    freeze_long_lived_objects()
    device = idist.device()
    assert options.checkpoint is not None and options.data and options.names
    with worker_threads(device), inference_numerics(options.inference.tf32 == "on"):
        model = build_model(weights or read_trained_weights(options.checkpoint, options.inference.backbone), device)
        rank, world, workers = idist.get_rank(), idist.get_world_size(), options.inference.workers
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
    report(rows, options.json_path, options.protocol, table=not options.quiet)
    if options.per_image:
        per_image = {name: images for name, (_, images) in scored.items()}
        write_text(evaluation_csv(per_image, options.protocol), options.per_image)
    if options.save_maps and not options.quiet:
        print(f"maps written to {options.save_maps}", flush=True)


def _evaluate_dataset(
    model: torch.nn.Module, device: torch.device, name: str, loader: Any, options: EvaluateOptions, progress: Progress
) -> tuple[Row, list[ImageScores]]:
    """Data set ``name``'s row (and per-image scores) over all ranks, this one scoring ``loader``: a collective."""
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
    return {"images": len(cast(SaliencyEvalSet, loader.dataset)), **values}, images


def _refine_with_crf(engine: Engine) -> None:
    batch, (maps, gts) = evaluator_step(engine)
    refined = [crf_refine(img, m) for img, m in zip(batch["image"], maps)]
    engine.state.output = cast(Any, (refined, gts))  # ignite annotates State.output as int


def _save_maps(engine: Engine, out_dir: Path) -> None:
    batch, (maps, _) = evaluator_step(engine)
    for stem, saliency in zip(batch["name"], maps):
        save_map(output_path(out_dir, stem), saliency)


def evaluate_maps(options: EvaluateOptions) -> Row:
    """Score ``options.maps`` against the masks of ``options.gt`` by file stem; prints the table, writes
    the outputs, returns the row. Raises ``OptionError`` (also when no map matches a mask)."""
    options.validate()
    maps, gt, json_path = options.maps, options.gt, options.json_path
    assert maps is not None and gt is not None
    check_writable_file(json_path, "--json")
    check_writable_file(options.per_image, "--per-image")
    # a data set folder, as compare takes it, stands for its masks
    masks = locate_dataset(gt, f"--gt {gt}").masks if Path(gt).is_dir() else Path(gt)
    match = match_maps(maps, masks)
    for files, what in (
        (match.maps_without_mask, f"map(s) without a mask in {masks}"),
        (match.masks_without_map, f"mask(s) without a map in {maps}"),
    ):
        if files:
            warn(f"{len(files)} {what}, skipped: {listing(p.name for p in files)}")
    if not match.pairs:
        raise OptionError(f"no map in {maps} matches a mask in {masks} by file name")
    metric = SaliencyMetrics(protocol=options.protocol, per_image=bool(options.per_image))
    with Progress(len(match.pairs), "evaluate", "map", enabled=options.progress) as progress:
        resized = score_maps(progress.counted([(m, k) for _, m, k in match.pairs]), metric)
    if resized:
        warn(f"{len(resized)} map(s) resized (bilinear) to their mask's size: {listing(resized)}")
    row = {"images": len(match.pairs), **metric.compute()}
    name = dataset_names([gt])[0]
    report({name: row}, json_path, options.protocol)
    if options.per_image:
        write_text(evaluation_csv({name: metric.per_image_scores()}, options.protocol), options.per_image)
    return row


def report(rows: Mapping[str, Mapping[str, float]], json_path: str | None, protocol: str, table: bool = True) -> None:
    """Print the ``table`` (a row per data set, the columns ``protocol`` defines its own way marked) and,
    with ``json_path``, write the rows as JSON keyed by data set."""
    if table:
        marked = PROTOCOL_METRICS[protocol]
        header = ["dataset", "images", *(k + PROTOCOL_MARK if k in marked else k for k in METRIC_KEYS)]
        body = [[name, str(int(r["images"]))] + [f"{r[c]:.4f}" for c in METRIC_KEYS] for name, r in rows.items()]
        widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
        lines = [
            "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
            for line in [header, *body]
        ]
        note = protocol_note(protocol)
        print("\n".join(lines + ([note] if note else [])), flush=True)
    if json_path:
        write_json({name: {**row, **protocol_fields(protocol)} for name, row in rows.items()}, json_path)
