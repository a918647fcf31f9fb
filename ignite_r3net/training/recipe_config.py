"""The training config a command line describes: the ``--recipe``'s values (or a saved run's, ``--config``)
under the options given; and a recipe's global batch shared among the job's processes (at start-up)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..config import TrainConfig
from ..data.synthetic import synthetic_paths
from ..errors import OptionError, note
from ..model.backbones import BACKBONES
from ..options.fields import is_option, read_options
from ..recipes import DEFAULT_RECIPE, RECIPES, possible_world_sizes, split_global_batch

# options that decide the starting weights: given anew, the saved run's record no longer applies
_CHOOSE_WEIGHTS = ("pretrained", "init_from", "backbone")


def config_from_options(given: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> TrainConfig:
    """``base`` (default: the defaults) under the recipe ``given`` names (the default one when ``base`` is
    empty), under ``given``. A recipe's global batch (``r3net-paper``: 14) is recorded as ``global_batch``
    unless ``--batch-size`` is given; ``batch_per_process`` splits it once the launch layout is known."""
    values = dict(base or {})
    name = given.get("recipe", values.get("recipe", DEFAULT_RECIPE))
    recipe = RECIPES.get(name)  # an unknown name is left for validate() to name
    if "recipe" not in given and values:  # a saved run's values hold its recipe's already
        recipe = None
    if recipe is not None:
        values.update(recipe.values, recipe=name)
    values.update(given)
    # only a recipe named here shares its batch: a saved run's batch_size is per process already
    values["global_batch"] = None
    if recipe is not None and recipe.global_batch is not None and "batch_size" not in given:
        # one process's share until the launch layout is known
        values.update(global_batch=recipe.global_batch, batch_size=recipe.global_batch)
    return TrainConfig(**values)


def batch_per_process(config: TrainConfig, world_size: int) -> int:
    """``config``'s ``global_batch`` split among ``world_size`` processes (without one: its ``batch_size``).
    ``OptionError`` when they cannot share it equally with at least 2 images each."""
    global_batch = config.global_batch
    if global_batch is None:
        return config.batch_size
    per_process = split_global_batch(global_batch, world_size)
    if per_process is None:
        possible = ", ".join(str(n) for n in possible_world_sizes(global_batch))
        raise OptionError(
            f"--recipe {config.recipe} keeps the original global batch of {global_batch} images, which "
            f"{world_size} processes cannot share equally with at least 2 each (possible: {possible} processes); "
            f"or give --batch-size N (images per process) for a global batch of N x {world_size}"
        )
    if world_size > 1:
        note(
            f"--recipe {config.recipe}: the global batch of {global_batch} images split as "
            f"{world_size} processes x {per_process} (--batch-size {per_process})"
        )
    return per_process


def config_from_file(path: str, given: dict[str, Any]) -> TrainConfig:
    """``train --config FILE``: the recipe a run saved (not ``resume``, ``device``) under ``given``; its
    ``weights`` are the expected ones unless ``given`` chooses anew; its generated data is ``synthetic`` again.
    ``OptionError``: the file cannot be read, a key is no option of ``train``, or a value is wrong."""
    saved = read_options(TrainConfig, path, "--config")
    if "backbone" not in given and "backbone" in saved and saved["backbone"] not in BACKBONES:
        # its choices are the model package's, not the field's: read_options cannot check them
        raise OptionError(
            f"--config {path}: 'backbone' must be one of {', '.join(BACKBONES)}, got {saved['backbone']!r}"
        )
    options = {f.name for f in dataclasses.fields(TrainConfig) if is_option(f)}
    recipe = {k: v for k, v in saved.items() if k in options and k not in ("resume", "device")}
    train_dir, val_dir = (str(p) for p in synthetic_paths(saved.get("output_dir", TrainConfig.output_dir)))
    if train_dir in recipe.get("data", []):
        recipe["data"] = ["synthetic" if folder == train_dir else folder for folder in recipe["data"]]
        if recipe.get("val_data") == val_dir:
            recipe["val_data"] = None
    if not any(name in given for name in _CHOOSE_WEIGHTS):
        recipe["weights"] = saved.get("weights")
    return config_from_options(given, base=recipe)
