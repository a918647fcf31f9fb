"""``train``: the run resolved once in the launching process (``planned_run``: every user error one line,
before any work can be lost), then the workers, which save the config once they agree."""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock

from ..atomic_files import read_json_object
from ..batch_layout import BatchLayout
from ..checkpoint_io import list_checkpoints, load_checkpoint, model_state_dict
from ..config import TrainConfig
from ..console import echo, quiet_library_logs
from ..data.checks import assert_dataset_ok
from ..data.folder import listing_digest
from ..data.registry import resolve_names
from ..data.split import held_out_names, split_pairs, write_held_out_names
from ..data.synthetic import ensure_synthetic
from ..distributed.launch import launch
from ..distributed.process_setup import freeze_long_lived_objects, use_device
from ..distributed.ranks import rank_zero_only, refuse_unless_ranks_agree
from ..distributed.topology import LaunchSpec, started_by_torchrun
from ..errors import CheckpointError, OptionError, ending_line, error_line, note, warn
from ..model.backbone_weights import IMAGENET, NONE, Weights, load_backbone_weights, resolve_weights, sha256_of
from ..model.backbones import BACKBONE_NAMES, is_known_backbone
from ..model.key_layouts import HEAD_PREFIXES, backbone_state_dict_from_any, to_our_layout
from ..model.r3net import build_backbone, num_parameters
from ..model.trained_model import check_fits, find_backbone, infer_backbone, infer_head_width, resolve_checkpoint
from ..numerics import set_deterministic_environment
from ..options.fields import flag_named, values_by_flag
from ..run_lock import claimed_folder
from .plan import DataPlan, RunPlan
from .recipe_config import batch_layout, layout_note
from .resume import RESUME_FIXED, check_resume_compatible, resolve_resume
from .trackers import prepare_trackers
from .train_log import record_ending

# a rank that syncs its loss meters, or validates, at other iterations than its peers hangs them
COLLECTIVE_SCHEDULE = ("log_every", "checkpoint_every", "val_every")


def train(config: TrainConfig, expected_weights: dict[str, str] | None = None) -> None:
    """Train as ``config`` asks on every worker (``expected_weights``: the starting weights ``--config``'s run
    recorded). Raises ``planned_run``'s errors, ``WorkerFailed`` (traceback in ``OUTPUT_DIR/error-rankN.log``),
    ``RendezvousFailed`` (not all met within ``--dist-timeout``), ``RanksDisagree``, ``KeyboardInterrupt`` (Ctrl-C;
    ``Terminated`` for SIGTERM) once every rank stopped."""
    with planned_run(config, expected_weights) as plan:
        if plan.start >= config.iters:
            echo(f"run already complete: {plan.resume} is at iteration {plan.start} of {config.iters}; nothing to do")
            return
        try:
            launch(train_worker, plan, plan.spec)  # launch() sets ignite's launcher logs from spec.verbose
        except BaseException as e:
            if plan.spec.is_leader():  # the workers are gone: train.log gets the console's last line
                record_ending(config.output_dir, ending_line(e))
            raise


def train_worker(local_rank: int, plan: RunPlan) -> None:
    """What every worker runs: the ranks' agreement, ``config.json`` (rank 0), ``worker.training``."""
    config = plan.options
    if config.deterministic:  # a worker torchrun or srun started: before its first CUDA work
        set_deterministic_environment()
    refuse_unless_ranks_agree(options_every_rank_shares(plan))  # before anything is built or written
    rank_zero_only(_save_records)(plan)
    # imported in the workers only: the launching process checks and spawns, and the Engine's
    # imports (torchvision, TensorBoard, scipy) would cost it seconds before any worker starts
    from .worker import training

    freeze_long_lived_objects()
    quiet_library_logs(config.verbose)
    training(local_rank, plan)


def _save_records(plan: RunPlan) -> None:
    output_dir = plan.options.output_dir
    plan.save(os.path.join(output_dir, "config.json"))
    if plan.data.val_held_out is not None:
        write_held_out_names(plan.data.val_held_out, output_dir)


def options_every_rank_shares(plan: RunPlan) -> dict[str, str]:
    """``{"--lr": "0.001", ..., "--data": "12 pairs (sha256 ...)"}``: the recipe ``--resume`` keeps (the batch
    layout as resolved), the options that schedule collectives, the data's pairs; not what may differ between nodes
    (``--workers``, ``--output-dir``, ``--node-rank``, rendezvous and speed options, ``--keep``) nor the starting
    weights (DDP copies rank 0's)."""
    layout = {flag_named(TrainConfig, k): str(v) for k, v in plan.layout.recorded().items() if k != "world_size"}
    listings = {flag_named(TrainConfig, name): listing for name, listing in plan.data.listings.items()}
    return values_by_flag(plan.options, RESUME_FIXED + COLLECTIVE_SCHEDULE) | layout | listings


def launch_spec(config: TrainConfig) -> LaunchSpec:
    """The distribution options (the tracebacks of failed workers go to ``--output-dir``)."""
    same = [f.name for f in dataclasses.fields(LaunchSpec) if f.name != "traceback_dir"]
    return LaunchSpec(**{name: getattr(config, name) for name in same}, traceback_dir=config.output_dir)


def plan_in_process(config: TrainConfig, world_size: int = 1) -> RunPlan:
    """The plan of ``config`` on ``world_size`` processes with nothing resolved from the disk (its ``--data``
    folders as given, no weights, on the CPU): for benchmarks and tests that build the Engine in this process."""
    data = DataPlan(list(config.data), config.val_data, [], {})
    return RunPlan(config, launch_spec(config), batch_layout(config, world_size), "cpu", data, config.resume)


@contextmanager
def planned_run(config: TrainConfig, expected_weights: dict[str, str] | None = None) -> Iterator[RunPlan]:
    """Resolve the run, holding its output folder meanwhile. ``OptionError`` or ``DataError`` (by file)."""
    config.validate()
    if config.deterministic:  # before any CUDA work here; spawned workers inherit it
        set_deterministic_environment()
    spec = launch_spec(config)
    check_slurm(spec)
    layout = batch_layout(config, spec.world_size)
    shared = layout_note(config, layout)
    if shared is not None and spec.is_leader():  # every torchrun or srun process plans the run
        note(shared)
    check_torchrun(config)
    if not is_known_backbone(config.backbone):
        raise OptionError(f"--backbone {config.backbone!r} is unknown; choose one of {BACKBONE_NAMES}")
    device = use_device(spec)  # before anything else asks torch about CUDA: --device cpu hides it
    output = Path(config.output_dir)
    with claimed_folder(output, "--output-dir", spec.is_leader()):
        check_disk_space(config, num_parameters(config.backbone, config.head_width))
        # a fresh run must not mix its checkpoints (periodic or best) with an earlier run's
        if not config.resume and (list_checkpoints(output) or any(output.glob("best_model_*.pt"))):
            raise OptionError(
                f"--output-dir {config.output_dir} already holds checkpoints of a run: continue it "
                "with --resume auto, or choose another --output-dir"
            )
        resume_file, checkpoint = resolve_resume(config) or (None, None)
        weights = resolve_initial_weights(config, resume_file is not None, expected_weights)
        data = resolve_data(config, layout)
        start, resumed_note = 0, None
        if checkpoint is not None:
            resumed_note = check_resume_compatible(
                config, layout, checkpoint, data.pairs, data.data_sets, resumed=resume_file
            )
            start = int(checkpoint["trainer"].get("iteration", 0))
            if resumed_note is not None and spec.is_leader():
                echo(resumed_note)
        plan = RunPlan(config, spec, layout, device, data, resume_file, weights, None, start, resumed_note)
        # rank 0 logs to the trackers: the job's leading process opens their runs
        if spec.is_leader() and start < config.iters:
            plan = dataclasses.replace(plan, tracking=prepare_trackers(plan))
        yield plan


def check_slurm(spec: LaunchSpec) -> None:
    """Under srun the nodes and ranks come from SLURM; spawning workers needs one task per node."""
    task = spec.slurm
    if task is None:
        return
    if spec.nnodes != 1 or spec.node_rank != 0:
        raise OptionError("--nnodes and --node-rank come from SLURM under srun: leave them out")
    if spec.nproc > 1 and not task.one_task_per_node:
        raise OptionError(
            f"--nproc {spec.nproc} under srun spawns that many workers per task, so it needs one task per node "
            f"(this step has {task.ntasks} tasks on {task.nnodes} node(s)): use srun --ntasks-per-node 1, or "
            "one task per GPU without --nproc"
        )


def check_torchrun(config: TrainConfig) -> None:
    """Under torchrun the ranks meet where torchrun says: another address or port cannot be honoured."""
    if not started_by_torchrun():
        return
    for flag, given, variable in (
        ("--master-addr", config.master_addr, "MASTER_ADDR"),
        ("--master-port", config.master_port, "MASTER_PORT"),
    ):
        if given is not None and str(given) != os.environ.get(variable):
            raise OptionError(
                f"{flag} {given}: under torchrun the ranks meet where torchrun says ({variable}="
                f"{os.environ.get(variable)}); leave {flag} out, or give the address to torchrun (--rdzv-endpoint, "
                "--master-addr, --master-port)"
            )


def check_disk_space(config: TrainConfig, num_parameters: int) -> None:
    """Refuse to start when the checkpoints kept (weights + momentum, fp32) cannot fit."""
    needed = (num_parameters * 4 * 2 + (1 << 20)) * (config.keep + 2)  # kept + best + the one being written
    free = shutil.disk_usage(config.output_dir).free
    if free < needed:
        raise OptionError(
            f"--output-dir {config.output_dir} has {free / 2**20:.0f} MiB free; "
            f"{config.keep} checkpoints need about {needed / 2**20:.0f} MiB"
        )


def resolve_data(config: TrainConfig, layout: BatchLayout) -> DataPlan:
    """``--data`` and ``--val-data`` resolved and checked ('synthetic' generated, its held-out split the default
    validation), with ``--val-split``'s held-out names; each rank must get the micro-batches of a step."""
    data, val_data = config.data, config.val_data
    if config.data_root is not None:
        data = resolve_names(data, config.data_root, "--data")
        val_data = resolve_names([val_data], config.data_root, "--val-data")[0] if val_data else None
    folders: list[str] = []
    generated = set()
    for entry in data:
        if entry == "synthetic":
            # several launching processes (torchrun) may try to generate the same data at once
            with FileLock(Path(config.output_dir) / ".synthetic.lock"):
                train_dir, val_dir = ensure_synthetic(config.output_dir, seed=config.seed)
            entry, val_data = str(train_dir), val_data or str(val_dir)
            generated.add(entry)
        if entry in folders:
            raise OptionError(f"--data {entry} is given twice: each folder's pairs would be trained on twice as often")
        folders.append(entry)
    # the generated set's small images are resized up to any crop, as the reference DDP script does
    checked = {
        folder: assert_dataset_ok(folder, min_size=None if folder in generated else config.crop, option="--data")
        for folder in folders
    }
    split = {folder: split_pairs(pairs, config.val_split) for folder, pairs in checked.items()}
    held_out = [pair for _, held in split.values() for pair in held]
    total = sum(len(p) for p in checked.values())
    if config.val_split is not None and not 0 < len(held_out) < total:  # a split leaves pairs on both sides
        side = "no pair for validation: give a larger F" if not held_out else "no pair to train on: give a smaller F"
        raise OptionError(
            f"--val-split {config.val_split} holds out {len(held_out)} of the {total} pairs of --data "
            f"{' '.join(folders)}, leaving {side}, or a validation folder as --val-data"
        )
    val_pairs = assert_dataset_ok(val_data, option="--val-data") if val_data else None
    # config.json's record of each training folder: the listing ("6 pairs (sha256 ...)") tells a resume
    # the same pairs from others
    data_sets: list[dict[str, Any]] = [
        {"folder": f, "pairs": len(training), "listing": listing_digest(f, training)}
        | ({"held_out": len(held)} if config.val_split is not None else {})
        for f, (training, held) in split.items()
    ]
    pairs = sum(d["pairs"] for d in data_sets)
    # each rank's shard must fill the micro-batches of one optimiser step
    if -(-pairs // layout.processes) < layout.per_process:
        kept = f" to train on after --val-split {config.val_split}" if config.val_split is not None else ""
        accumulated = f" x --accumulate {layout.accumulate}" if layout.accumulate > 1 else ""
        raise OptionError(
            f"--data {' '.join(folders)} holds {pairs} pairs{kept}: too few for --batch-size "
            f"{layout.batch}{accumulated} on {layout.processes} process(es)"
        )
    if config.val_split is not None:
        held_listing = "; ".join(listing_digest(f, held) for f, (_, held) in split.items())
        val_listing = f"--val-split {config.val_split}: {held_listing}"
    else:
        val_listing = listing_digest(val_data, val_pairs) if val_data else "none"
    listings = {"data": "; ".join(d["listing"] for d in data_sets), "val_data": val_listing}
    held_out_record = held_out_names(held_out) if config.val_split is not None else None
    return DataPlan(folders, val_data, data_sets, listings, held_out_record)


def resolve_initial_weights(
    config: TrainConfig, resumed: bool, expected: dict[str, str] | None = None
) -> dict[str, str] | None:
    """``{source, file, sha256}`` of ``--init-from``'s whole model, else ``--pretrained``'s backbone (None: random),
    fetched and checked against ``expected`` (``--config``'s run's); a resumed run keeps its first start's."""
    if resumed:
        saved = read_json_object(Path(config.output_dir) / "config.json") or {}
        return (saved.get("resolved") or saved).get("weights")  # before config.json kept the resolved apart
    weights: Weights | None
    if config.init_from:
        weights = _init_from_weights(config, config.init_from)
    else:
        weights = resolve_weights(config.pretrained, config.backbone)
        if weights is not None:
            try:  # a file of another architecture is one line, before any worker
                load_backbone_weights(build_backbone(config.backbone), weights.file)
            except ValueError as e:
                hint = _what_the_file_fits(weights.file, config.backbone)
                raise OptionError(f"--pretrained {config.pretrained}: {error_line(e)}{hint}") from None
    record = weights.as_dict() if weights else None
    if expected and record and expected.get("sha256") != record["sha256"]:
        warn(
            f"the starting weights differ from those the saved recipe's run started from: {record['file']} has "
            f"sha256 {record['sha256'][:12]}..., the record says {expected.get('file')} with "
            f"{str(expected.get('sha256'))[:12]}..."
        )
    return record


def _what_it_holds(state: Mapping[str, torch.Tensor]) -> tuple[str, str | None] | None:
    """``("R3Net" or "backbone", its backbone or None)``; None: a layout we do not read."""
    try:
        if any(key.startswith(HEAD_PREFIXES) for key in to_our_layout(state)):
            return "R3Net", infer_backbone(state)
        return "backbone", infer_backbone({f"backbone.{k}": v for k, v in backbone_state_dict_from_any(state).items()})
    except ValueError:
        return None


def _what_the_file_fits(file: str, backbone: str) -> str:
    """The error line's end: where a ``--pretrained`` file that does not fit belongs (empty: nowhere)."""
    try:
        held = _what_it_holds(model_state_dict(load_checkpoint(file, what="weights file"), file))
    except CheckpointError:  # the mismatch line says enough
        return ""
    kind, found = held or ("", None)
    if kind == "R3Net":
        named = f" ({found})" if found else ""
        return f"; it holds a whole trained R3Net{named}: start from it with --init-from {file}"
    if found is not None and found != backbone:
        return f"; it holds {found} weights: add --backbone {found}"
    return ""


def _init_from_weights(config: TrainConfig, init_from: str) -> Weights:
    if config.pretrained not in (IMAGENET, NONE):  # the default, or an explicit "no backbone weights"
        raise OptionError("--init-from and --pretrained both give the starting weights: choose one")
    # a Hub source is fetched here, once per node; workers read the local file the plan records
    path = resolve_checkpoint(init_from, f"--init-from {init_from}")
    if not path.is_file():
        raise OptionError(f"--init-from {path}: no such file")
    try:
        state = model_state_dict(load_checkpoint(path), path)
    except CheckpointError as e:
        raise OptionError(f"--init-from: {e}") from None
    found = find_backbone(path, state)
    if found is not None and found != config.backbone:
        raise OptionError(
            f"--init-from {init_from} holds an R3Net with backbone {found}, not {config.backbone}: "
            f"add --backbone {found}"
        )
    # backbone weights: the fix is --pretrained, not another --backbone (an unknown layout: check_fits says)
    held = _what_it_holds(state)
    if held is not None and held[0] == "backbone":
        named, flag = (f" ({held[1]})", f" --backbone {held[1]}") if held[1] else ("", "")
        raise OptionError(
            f"--init-from {init_from} holds backbone weights{named}, not a whole trained R3Net: start from them "
            f"with --pretrained {init_from}{flag}"
        )
    width = infer_head_width(state)
    if width != config.head_width:
        raise OptionError(
            f"--init-from {init_from} holds an R3Net of head width {width:g}, not {config.head_width:g}: "
            f"add --head-width {width:g}"
        )
    try:
        check_fits(config.backbone, state, init_from, width)  # or one line saying why not
    except OptionError as e:
        raise OptionError(f"--init-from: {e}") from None
    # absolute, not resolved: a Hub cache's file is a symlink to a blob without the .safetensors suffix
    return Weights(source="init-from", file=str(path.absolute()), sha256=sha256_of(path))
