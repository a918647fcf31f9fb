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

from dataclasses import dataclass, field
from pathlib import Path

import ignite.distributed as idist
import torch
from ignite.engine import Engine, Events

from ..data import assert_dataset_ok, build_eval_loader, listing_digest
from ..distributed.agreement import refuse_unless_ranks_agree
from ..distributed.launch import launch
from ..distributed.process_setup import freeze_long_lived_objects
from ..distributed.ranks import rank_zero_only
from ..distributed.topology import LaunchSpec, under_torchrun
from ..errors import OptionError, warn
from ..inference import attach_scoring, create_evaluator, score_shard
from ..metrics import METRIC_KEYS, SaliencyMetrics
from ..model.trained_model import TrainedWeights, build_model, read_trained_weights
from ..output_paths import check_writable_file
from .crf import crf_refine, require_crf
from .maps import dataset_names, listing, match_maps, output_path, save_map, score_maps
from .metrics_table import report

Row = dict[str, float]


@dataclass
class EvalJob:
    """Everything a worker needs; picklable, so spawned workers receive it."""

    checkpoint: str
    backbone: str
    datasets: list[tuple[str, str]]  # (name, folder)
    protocol: str = "standard"
    save_maps: str | None = None
    json_path: str | None = None
    crf: bool = False
    amp: str = "off"
    workers: int = 0
    quiet: bool = False  # no table and no "maps written" line (compare reports for itself)
    listings: list[str] = field(default_factory=list)  # data.listing_digest of each data set
    # the weights already read when the job runs in this process (None: each worker reads the file)
    weights: TrainedWeights | None = field(default=None, repr=False)

    def options_every_rank_shares(self) -> dict[str, str]:
        """What every rank must be started with alike (each node may write its maps and JSON
        elsewhere, with other ``--workers``; the checkpoint is compared by its size, not read)."""
        values = {
            "--checkpoint": f"{Path(self.checkpoint).stat().st_size} bytes",
            "--backbone": self.backbone,
            "--protocol": self.protocol,
            "--crf": str(self.crf),
            "--amp": self.amp,
        }
        values.update({f"--data {name}": digest for (name, _), digest in zip(self.datasets, self.listings)})
        return values


def evaluate_checkpoint(
    checkpoint: str,
    data: list[str],
    *,
    backbone: str | None = None,
    protocol: str = "standard",
    json_path: str | None = None,
    save_maps: str | None = None,
    crf: bool = False,
    amp: str = "off",
    workers: int = 2,
    nproc: int = 1,
    backend: str | None = None,
    master_port: int | None = None,
    names: list[str] | None = None,
    quiet: bool = False,
) -> None:
    """Score ``checkpoint`` on every data set folder in ``data``; rank 0 prints the table (unless
    ``quiet``) and writes ``json_path``. Maps go to ``save_maps/<dataset>/<stem>.png`` when asked;
    a data set's name is its entry in ``names``, by default derived from its folder."""
    if nproc < 1:
        raise OptionError(f"--nproc must be >= 1, got {nproc}")
    if workers < 0:
        raise OptionError(f"--workers must be >= 0, got {workers}")
    if crf:
        require_crf()
    check_writable_file(json_path, "--json")
    for folder in data:
        assert_dataset_ok(folder)  # DataError listing every problem (headers read), before any work
    weights = read_trained_weights(checkpoint, backbone)
    names = dataset_names(data) if names is None else names
    if save_maps:
        out = Path(save_maps)
        if out.exists() and not out.is_dir():
            raise OptionError(f"--save-maps {out} exists and is not a folder")
        for name in names:
            (out / name).mkdir(parents=True, exist_ok=True)  # here, so ranks never race on it
    spec = LaunchSpec(nproc=nproc, backend=backend, master_port=master_port)
    job = EvalJob(
        checkpoint=str(checkpoint),
        backbone=weights.backbone,
        datasets=[(n, str(f)) for n, f in zip(names, data)],
        protocol=protocol,
        save_maps=save_maps,
        json_path=json_path,
        crf=crf,
        amp=amp,
        workers=workers,
        quiet=quiet,
        listings=[listing_digest(folder) for folder in data],
        # each worker reads the file rather than receive hundreds of MB through a pipe
        weights=None if spec.spawns() or under_torchrun() else weights,
    )
    launch(_evaluate_worker, job, spec)


def _evaluate_worker(local_rank: int, job: EvalJob) -> None:
    """Runs on every rank: score each data set on this rank's shard; rank 0 reports."""
    refuse_unless_ranks_agree(job.options_every_rank_shares())
    freeze_long_lived_objects()
    device = idist.device()
    model = build_model(job.weights or read_trained_weights(job.checkpoint, job.backbone), device)
    rows = {name: _evaluate_dataset(model, device, name, folder, job) for name, folder in job.datasets}
    _report_rows(rows, job)


@rank_zero_only
def _report_rows(rows: dict[str, Row], job: EvalJob) -> None:
    report(rows, job.json_path, print_table=not job.quiet)
    if job.save_maps and not job.quiet:
        print(f"maps written to {job.save_maps}", flush=True)


def _evaluate_dataset(model: torch.nn.Module, device: torch.device, name: str, folder: str, job: EvalJob) -> Row:
    loader = build_eval_loader(folder, idist.get_world_size(), idist.get_rank(), job.workers)
    evaluator = create_evaluator(model, device, job.amp)
    # handlers run in the order they are added: refine, then save, then score the refined map
    if job.crf:
        evaluator.add_event_handler(Events.ITERATION_COMPLETED, _refine_with_crf)
    if job.save_maps:
        evaluator.add_event_handler(Events.ITERATION_COMPLETED, _save_maps, Path(job.save_maps) / name)
    metric = SaliencyMetrics(device=device, protocol=job.protocol)
    attach_scoring(evaluator, metric)
    values = score_shard(evaluator, loader, metric)
    return {"images": len(loader.dataset), **{k: float(values[k]) for k in METRIC_KEYS}}


def _refine_with_crf(engine: Engine) -> None:
    maps, gts = engine.state.output
    images = engine.state.batch["image"]
    engine.state.output = ([crf_refine(img, m) for img, m in zip(images, maps)], gts)


def _save_maps(engine: Engine, out_dir: Path) -> None:
    for stem, saliency in zip(engine.state.names, engine.state.output[0]):
        save_map(output_path(out_dir, stem), saliency)


def evaluate_maps(maps: str, gt: str, *, protocol: str = "standard", json_path: str | None = None) -> Row:
    """Score the saliency maps in ``maps`` against the masks in ``gt`` (matched by file stem);
    prints the table, writes ``json_path`` and returns the row."""
    check_writable_file(json_path, "--json")
    match = match_maps(maps, gt)
    if match.maps_without_mask:
        warn(
            f"{len(match.maps_without_mask)} map(s) without a mask in {gt}, skipped: "
            f"{listing(p.name for p in match.maps_without_mask)}"
        )
    if match.masks_without_map:
        warn(
            f"{len(match.masks_without_map)} mask(s) without a map in {maps}, skipped: "
            f"{listing(p.name for p in match.masks_without_map)}"
        )
    if not match.pairs:
        raise OptionError(f"no map in {maps} matches a mask in {gt} by file name")
    metric = SaliencyMetrics(protocol=protocol)
    resized = score_maps([(map_path, mask_path) for _, map_path, mask_path in match.pairs], metric)
    if resized:
        warn(f"{len(resized)} map(s) resized (bilinear) to their mask's size: {listing(resized)}")
    values = metric.compute()
    row = {"images": len(match.pairs), **{k: float(values[k]) for k in METRIC_KEYS}}
    report({dataset_names([gt])[0]: row}, json_path)
    return row
