"""``--resume``: which checkpoint a run continues, and proof that it continues the same run.

A resume is exact: the run goes on sample for sample and ends where the uninterrupted one would.
That needs the checkpoint's full training state and the same recipe; both are checked here, in the
launching process, before any worker starts.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..checkpoint_io import find_resume_checkpoint, list_checkpoints, load_checkpoint
from ..config import TrainConfig
from ..data.sampler import ResumableDistributedSampler
from ..errors import CheckpointError, OptionError, warn
from ..options.fields import flag_named

# Options an exact resume must keep: the LR schedule, the optimiser's hyper-parameters (its state
# dict restores them), what each iteration samples and how it is computed (precision, TF32,
# deterministic algorithms).
RESUME_FIXED = (
    "iters",
    "lr",
    "lr_power",
    "momentum",
    "weight_decay",
    "batch_size",
    "crop",
    "rotate",
    "backbone",
    "seed",
    "amp",
    "recipe",
    "tf32",
    "deterministic",
)
# What ``--resume`` needs in a checkpoint besides the optional ``scaler`` (fp16) and ``recipe``.
TRAINING_STATE_KEYS = ("trainer", "model", "optimizer", "lr_scheduler", "loss_meter")
EPOCH_LENGTH = "iterations per epoch (data, batch size or world size)"


class RunRecipe:
    """The part of a run that a resume must not change, saved in each checkpoint as ``recipe``:
    the ``RESUME_FIXED`` options, the world size, the number of training pairs and the training
    folders (``config.data_sets``: each one's pairs and the digest of their names, in order).

    Nothing is restored from it; ``check_resume_compatible`` compares it with the new options
    before any worker starts (ignite would otherwise quietly keep the checkpoint's schedule and
    epoch length).
    """

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = dict(values)

    @classmethod
    def of(cls, config: TrainConfig, world_size: int, pairs: int) -> RunRecipe:
        values = {name: getattr(config, name) for name in RESUME_FIXED}
        values.update(world_size=world_size, pairs=pairs)
        if config.data_sets is not None:
            values["data"] = [dict(d) for d in config.data_sets]
        return cls(values)

    def state_dict(self) -> dict[str, Any]:
        return dict(self.values)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Nothing to restore: the recipe is compared before the run starts, never loaded."""

    def differences(self, saved: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
        """``(name, saved value, this run's value)`` for each entry that differs from ``saved``; the
        training folders differ when their pairs do (a folder that moved holds the same pairs)."""
        same = {"data": _same_pairs}
        return [
            (name, saved[name], value)
            for name, value in self.values.items()
            if name in saved and not same.get(name, operator.eq)(saved[name], value)
        ]


def _same_pairs(saved: list[dict[str, Any]], new: list[dict[str, Any]]) -> bool:
    return [d["listing"] for d in saved] == [d["listing"] for d in new]


def resolve_resume(config: TrainConfig) -> tuple[str, dict[str, Any]] | None:
    """``--resume``'s checkpoint file and content, None for a fresh run: ``auto`` is the newest
    checkpoint that loads (corrupt newer ones are reported and skipped), a named file must load."""
    if not config.resume:
        return None
    if config.resume == "auto":
        found = find_resume_checkpoint(config.output_dir, report=warn)
        if found is None:
            _refuse_unloadable_checkpoints(config)
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
        _refuse_newer_checkpoints(config)
    _check_training_state(path, config.amp, checkpoint)
    return path, checkpoint


def _refuse_unloadable_checkpoints(config: TrainConfig) -> None:
    """Checkpoints that all fail to load are no reason to start afresh: the new run would write over
    them (a disk or copy problem to look at first)."""
    found = [path.name for _, path in list_checkpoints(config.output_dir)]
    if found:
        raise OptionError(
            f"--resume auto: none of the {len(found)} checkpoint(s) in {config.output_dir} loads "
            f"({', '.join(found)}: see the warnings above); move them away to start a fresh run there"
        )


def _refuse_newer_checkpoints(config: TrainConfig) -> None:
    """Resuming an older checkpoint into a folder holding newer ones would let the next
    ``--resume auto`` (or the ``--keep`` rotation) pick up files of the abandoned future."""
    resume = Path(str(config.resume)).resolve()
    here = {p.resolve(): it for it, p in list_checkpoints(config.output_dir)}
    if resume not in here:
        return
    newer = sorted(p.name for p, it in here.items() if it > here[resume])
    if newer:
        raise OptionError(
            f"--resume {config.resume}: --output-dir {config.output_dir} also holds newer "
            f"checkpoints ({', '.join(newer)}) of the run; move them away first, or "
            "resume into another --output-dir"
        )


def _check_training_state(path: str, amp: str, checkpoint: Mapping[str, Any]) -> None:
    """A resume needs every state the trainer restores, not just weights."""
    needed = TRAINING_STATE_KEYS + (("scaler",) if amp == "fp16" else ())
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


def check_resume_compatible(config: TrainConfig, checkpoint: Mapping[str, Any], world: int, pairs: int) -> None:
    """This run's options continue the checkpoint's run exactly.

    ignite restores the schedule length and epoch length from the checkpoint, and the optimiser
    its hyper-parameters, so changed options would be silently ignored (or, for a finished run
    resumed with more iterations, restart it with the learning rate at zero)."""
    changed = {
        name: (old, new)
        for name, old, new in RunRecipe.of(config, world, pairs).differences(checkpoint.get("recipe", {}))
    }
    # what ignite itself keeps, so also checked for checkpoints without a recipe
    state = checkpoint["trainer"]
    sampler = ResumableDistributedSampler(pairs, num_replicas=world, batch_size=config.batch_size)
    for name, old, new in (
        ("iters", state.get("max_iters"), config.iters),
        (EPOCH_LENGTH, state.get("epoch_length"), sampler.num_batches),
    ):
        if old is not None and old != new:
            changed.setdefault(name, (old, new))
    if "data" in changed:
        changed.pop("pairs", None)  # the folders' listing says it
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
            f"--resume {config.resume}: this run differs from the one the checkpoint continues: "
            f"{listing}. An exact resume needs the same recipe: repeat the original options, or "
            f"start a new run in another --output-dir.{extend}"
        )


def _option_name(name: str) -> str:
    if name == "world_size":
        return "world size (--nproc x --nnodes)"
    if name == "pairs":
        return "training pairs in --data"
    return flag_named(TrainConfig, name) if name.isidentifier() else name


def _value(name: str, value: Any) -> str:
    """An option's value as the refusal shows it: each training folder with its pairs."""
    if name != "data":
        return str(value)
    return ", ".join(f"{d['folder']}: {d['listing']}" for d in value)
