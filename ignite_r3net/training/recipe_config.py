"""The training options a command line asks for: the ``--recipe``'s values (or a saved run's, ``--config``)
under the options given; and its global batch shared among the job's processes (at start-up)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from ..batch_layout import MIN_BATCH, BatchLayout, fit, possible_processes
from ..config import TrainConfig
from ..data.synthetic import synthetic_paths
from ..errors import OptionError
from ..model.backbones import BACKBONE_NAMES, is_known_backbone
from ..options.fields import is_option, read_options
from ..recipes import DEFAULT_RECIPE, RECIPES

# what config.json records besides the options: which were given, and what start-up resolved (before it was kept
# apart, under "resolved", these keys stood beside the options)
RECORDED_KEYS = ("given", "resolved", "weights", "listings", "tracking", "data_sets", "val_held_out")
# the options that choose the batch layout
BATCH_OPTIONS = ("recipe", "global_batch", "batch_size", "accumulate", "max_batch_per_device")
# options that decide the starting weights: given anew, the saved run's record no longer applies
_CHOOSE_WEIGHTS = ("pretrained", "init_from", "backbone")


def config_from_options(
    given: Mapping[str, Any], base: Mapping[str, Any] | None = None, base_given: Iterable[str] = ()
) -> TrainConfig:
    """``base`` (default: the defaults; ``base_given``: which of its options its run was given) under the recipe
    ``given`` names (the default one when ``base`` is empty), under ``given``. A recipe's global batch is kept
    unless ``--batch-size`` is given without ``--global-batch``; any of ``BATCH_OPTIONS`` given chooses the batch
    anew: those ``base`` was given no longer count as given."""
    values = dict(base or {})
    base_given = set(base_given) | set(values.pop("given", ()))
    if any(name in given for name in BATCH_OPTIONS):
        base_given -= set(BATCH_OPTIONS)
    name = given.get("recipe", values.get("recipe", DEFAULT_RECIPE))
    recipe = RECIPES.get(name)  # an unknown name is left for validate() to name
    if "recipe" not in given and values:  # a saved run's values hold its recipe's already
        recipe = None
    if recipe is not None:
        values.update(recipe.values, recipe=name)
    values.update(given)
    if "global_batch" not in given:
        if recipe is not None:
            values["global_batch"] = recipe.global_batch
        if "batch_size" in given:  # the batch per process chosen: the global batch follows from it
            values["global_batch"] = None
    return TrainConfig(**values, given=frozenset(base_given | set(given)))


def batch_layout(config: TrainConfig, world_size: int) -> BatchLayout:
    """``config``'s layout on ``world_size`` processes: its ``global_batch`` shared among them, or without one its
    ``batch_size`` and ``accumulate``. ``OptionError`` listing the process counts that can keep the global batch."""
    global_batch = config.global_batch
    if global_batch is None:
        return BatchLayout(world_size, config.batch_size, config.accumulate)
    batch, accumulate, limit = _given_batch(config)
    layout = fit(global_batch, world_size, batch, accumulate, limit)
    if layout is None:
        possible = ", ".join(str(n) for n in possible_processes(global_batch, batch, accumulate, limit)) or "none"
        raise OptionError(
            f"{_origin(config)} keeps a global batch of {global_batch} images, which {world_size} processes cannot "
            f"share equally {_constraint(batch, accumulate, limit)} (possible: {possible} processes); or give "
            f"--batch-size N (images per process) for a global batch of N x {world_size}"
        )
    return layout


def layout_note(config: TrainConfig, layout: BatchLayout) -> str | None:
    """The one line saying how ``batch_layout`` shared a global batch, where there was something to share."""
    if config.global_batch is None or (layout.processes == 1 and layout.accumulate == 1):
        return None
    batch, _, limit = _given_batch(config)
    accumulated = f" --accumulate {layout.accumulate}" if layout.accumulate > 1 else ""
    limited = f", at most --max-batch-per-device {limit}" if limit is not None and batch is None else ""
    return (
        f"{_origin(config)}: the global batch of {config.global_batch} images split as {layout.describe()} "
        f"(--batch-size {layout.batch}{accumulated}{limited})"
    )


def _given_batch(config: TrainConfig) -> tuple[int | None, int | None, int | None]:
    """The batch per process, accumulation and limit a global batch's layout must keep; None: derive it."""
    batch = config.batch_size if "batch_size" in config.given else None
    accumulate = config.accumulate if "accumulate" in config.given else None
    return batch, accumulate, config.max_batch_per_device


def _origin(config: TrainConfig) -> str:
    recipe = RECIPES.get(config.recipe)
    if recipe is not None and recipe.global_batch == config.global_batch:
        return f"--recipe {config.recipe}"
    return f"--global-batch {config.global_batch}"


def _constraint(batch: int | None, accumulate: int | None, limit: int | None) -> str:
    if batch is not None and accumulate is not None:
        return f"as --batch-size {batch} x --accumulate {accumulate}"
    if batch is not None:
        return f"in micro-batches of --batch-size {batch}"
    most = f" and at most {limit} (--max-batch-per-device)" if limit is not None else ""
    if accumulate is not None:
        return f"in {accumulate} micro-batches (--accumulate) of at least {MIN_BATCH} each{most}"
    return f"with at least {MIN_BATCH} each{most}"


def config_from_file(path: str, given: dict[str, Any]) -> TrainConfig:
    """``train --config FILE``: the options a run was asked for (not ``resume``, ``device``), those it was given
    still given, under ``given``; its generated data is ``synthetic`` again. ``OptionError``: the file cannot be
    read, a key is no option of ``train``, or a value is wrong."""
    saved = read_options(TrainConfig, path, "--config", records=RECORDED_KEYS)
    if "backbone" not in given and "backbone" in saved and not is_known_backbone(saved["backbone"]):
        # its choices are the model package's, not the field's: read_options cannot check them
        raise OptionError(f"--config {path}: 'backbone' must be one of {BACKBONE_NAMES}, got {saved['backbone']!r}")
    options = {f.name for f in dataclasses.fields(TrainConfig) if is_option(f)}
    recipe = {k: v for k, v in saved.items() if k in options and k not in ("resume", "device")}
    saved_given = set(saved.get("given", ())) & recipe.keys()
    train_dir, val_dir = (str(p) for p in synthetic_paths(saved.get("output_dir", TrainConfig.output_dir)))
    if train_dir in recipe.get("data", []):
        recipe["data"] = ["synthetic" if folder == train_dir else folder for folder in recipe["data"]]
        if recipe.get("val_data") == val_dir:
            recipe["val_data"] = None
    return config_from_options(given, base=recipe, base_given=saved_given)


def saved_weights(path: str, given: Mapping[str, Any]) -> dict[str, str] | None:
    """The starting weights the run of ``--config``'s file recorded, which its rerun expects (and warns when it
    starts from others), unless ``given`` chooses the weights anew."""
    if any(name in given for name in _CHOOSE_WEIGHTS):
        return None
    saved = read_options(TrainConfig, path, "--config", records=RECORDED_KEYS)
    return (saved.get("resolved") or saved).get("weights")  # before config.json kept the resolved apart
