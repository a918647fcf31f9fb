"""``--resume``: which checkpoint a run continues, and proof that it continues the same run exactly
(sample for sample): the checkpoint's full training state and the same recipe, checked before any worker."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..batch_layout import BatchLayout
from ..checkpoint_io import find_resume_checkpoint, list_checkpoints, load_checkpoint
from ..config import TrainConfig
from ..data.sampler import ResumableDistributedSampler
from ..errors import CheckpointError, OptionError, warn
from ..options.fields import flag_named

# Options an exact resume must keep: the LR schedule, the optimiser's hyper-parameters (its state dict
# restores them), what each iteration samples and how it is computed (precision, TF32, determinism), and
# which --data pairs are held out for validation rather than trained on.
RESUME_FIXED = tuple(
    "iters lr lr_power momentum weight_decay batch_size accumulate global_batch crop rotate backbone head_width seed "
    "amp recipe tf32 deterministic val_split".split()
)
# The batch layout: another one is accepted when the global batch is kept (the same pairs and augmentations
# in each global batch, not the same bits), refused with the rest otherwise.
LAYOUT = ("world_size", "batch_size", "accumulate", "global_batch")
# What ``--resume`` needs in a checkpoint besides the optional ``scaler`` (fp16) and ``recipe``.
TRAINING_STATE_KEYS = ("trainer", "model", "optimizer", "lr_scheduler", "loss_meter")
EPOCH_LENGTH = "iterations per epoch (data, batch size or world size)"


class RunRecipe:
    """What a resume must not change (``RESUME_FIXED``, the batch layout, each training folder's record),
    checkpointed as ``recipe``: compared, never restored (ignite would quietly keep the checkpoint's schedule)."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = dict(values)

    @classmethod
    def of(
        cls, config: TrainConfig, layout: BatchLayout, pairs: int, data_sets: list[dict[str, Any]] | None = None
    ) -> RunRecipe:
        values = {name: getattr(config, name) for name in RESUME_FIXED} | layout.recorded() | {"pairs": pairs}
        if data_sets is not None:
            values["data"] = [dict(d) for d in data_sets]
        return cls(values)

    def state_dict(self) -> dict[str, Any]:
        return dict(self.values)

    def differences(self, saved: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
        """``{name: (saved, this run's value)}``; folders differ when their pairs do (not when moved)."""
        same = {"data": lambda old, new: [d["listing"] for d in old] == [d["listing"] for d in new]}
        return {
            name: (saved[name], value)
            for name, value in self.values.items()
            if name in saved and not same.get(name, operator.eq)(saved[name], value)
        }


def resolve_resume(config: TrainConfig) -> tuple[str, dict[str, Any]] | None:
    """``--resume``'s checkpoint file and content (None: a fresh run); ``auto``: the newest that loads."""
    if not config.resume:
        return None
    if config.resume == "auto":
        found = find_resume_checkpoint(config.output_dir, report=warn)
        if found is None:
            unloadable = [path.name for _, path in list_checkpoints(config.output_dir)]
            if unloadable:  # a disk or copy problem to look at first, no reason to start afresh over them
                raise OptionError(
                    f"--resume auto: none of the {len(unloadable)} checkpoint(s) in {config.output_dir} loads "
                    f"({', '.join(unloadable)}: see the warnings above); move them away to start a fresh run there"
                )
            warn(f"--resume auto: no checkpoint in {config.output_dir}; starting a fresh run")
            return None
        path, checkpoint = str(found[0]), found[1]
    else:
        path = config.resume
        if not Path(path).is_file():
            raise OptionError(f"--resume file {path} does not exist")
        try:
            checkpoint = load_checkpoint(path)
        except CheckpointError as e:
            raise OptionError(f"--resume: {e}") from None
        # newer checkpoints beside the one resumed would be picked up by the next --resume auto
        here = {p.resolve(): it for it, p in list_checkpoints(config.output_dir)}
        resumed = Path(path).resolve()
        newer = sorted(p.name for p, it in here.items() if resumed in here and it > here[resumed])
        if newer:
            raise OptionError(
                f"--resume {path}: --output-dir {config.output_dir} also holds newer checkpoints "
                f"({', '.join(newer)}) of the run; move them away first, or resume into another --output-dir"
            )
    needed = TRAINING_STATE_KEYS + (("scaler",) if config.amp == "fp16" else ())
    missing = [k for k in needed if k not in checkpoint]
    if missing:
        hint = (
            " (best_model_* files hold weights only: evaluate them, start a new run from them with "
            "--init-from, or resume from a checkpoint_N.pt)"
            if "trainer" in missing
            else ""
        )
        raise OptionError(
            f"--resume {path} is not a training checkpoint for this run: it lacks {', '.join(missing)}{hint}"
        )
    return path, checkpoint


def check_resume_compatible(
    config: TrainConfig,
    layout: BatchLayout,
    checkpoint: Mapping[str, Any],
    pairs: int,
    data_sets: list[dict[str, Any]] | None = None,
    resumed: str | None = None,
) -> str | None:
    """Refuse a run that does not continue the checkpoint's exactly: ignite and the optimiser would silently
    restore their own schedule, epoch length and hyper-parameters (more iters: a restart at LR zero). Another
    batch layout with the same global batch is accepted: the line saying so is returned (None: the same)."""
    saved = checkpoint.get("recipe", {})
    changed = RunRecipe.of(config, layout, pairs, data_sets).differences(saved)
    was = saved_layout(saved)
    moved = was is not None and was != layout
    kept = moved and was is not None and was.global_batch == layout.global_batch
    if kept:
        changed = {name: change for name, change in changed.items() if name not in LAYOUT}
    elif moved and was is not None:
        changed.setdefault("global_batch", (was.global_batch, layout.global_batch))
    # what ignite itself keeps, so also checked for checkpoints without a recipe
    state = checkpoint["trainer"]
    steps = steps_per_epoch(pairs, layout)
    for name, old, new in (
        ("iters", state.get("max_iters"), config.iters),
        (EPOCH_LENGTH, None if kept else state.get("epoch_length"), steps),
    ):
        if old is not None and old != new:
            changed.setdefault(name, (old, new))
    if "data" in changed:
        changed.pop("pairs", None)  # the folders' listing says it
    if "global_batch" in changed:
        changed.pop(EPOCH_LENGTH, None)  # it follows from the batch
    if changed:
        listing = "; ".join(
            f"{_option_name(name)} {_value(name, new)} (checkpoint: {_value(name, old)})"
            for name, (old, new) in changed.items()
        )
        extend = (
            " The poly schedule ends at --iters: to train longer, start a new run from this one's weights "
            "with --init-from."
            if "iters" in changed
            else ""
        )
        raise OptionError(
            f"--resume {resumed or config.resume}: this run differs from the one the checkpoint continues: "
            f"{listing}. An exact resume needs the same recipe: repeat the original options, or "
            f"start a new run in another --output-dir.{extend}"
        )
    if not kept or was is None:
        return None
    note = (
        f"resumed on {layout.describe()} (was {was.describe(short=True)}): global batch {layout.global_batch} "
        "kept; not bitwise (BatchNorm batches differ)"
    )
    before = state.get("epoch_length")
    if before is not None and before != steps:
        note += (
            f"; epochs of {steps} iterations (was {before}): the padding of the shuffled pairs differs, so the "
            "global batches differ from the next epoch on"
        )
    return note


def saved_layout(saved: Mapping[str, Any]) -> BatchLayout | None:
    """The batch layout a checkpoint's recipe records (None: it records none)."""
    if "world_size" not in saved or "batch_size" not in saved:
        return None
    return BatchLayout(int(saved["world_size"]), int(saved["batch_size"]), int(saved.get("accumulate", 1)))


def steps_per_epoch(pairs: int, layout: BatchLayout) -> int:
    """Optimiser steps per epoch: each rank's full micro-batches (``drop_last``) in groups of ``accumulate``."""
    sampler = ResumableDistributedSampler(pairs, num_replicas=layout.processes, batch_size=layout.batch)
    return sampler.num_batches // layout.accumulate


_NOT_OPTIONS = {
    "world_size": "world size (--nproc x --nnodes)",
    "pairs": "training pairs in --data",
    "global_batch": "global batch (processes x --batch-size x --accumulate)",
}


def _option_name(name: str) -> str:
    return _NOT_OPTIONS.get(name) or (flag_named(TrainConfig, name) if name.isidentifier() else name)


def _value(name: str, value: Any) -> str:
    if name != "data":  # each training folder with its pairs
        return str(value)
    return ", ".join(f"{d['folder']}: {d['listing']}" for d in value)
