"""The training config a command line describes: the ``--recipe``'s values (or those a run saved,
``--config``), replaced by the options given, with a recipe's global batch shared among the job's
processes."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..config import TrainConfig
from ..data.synthetic import synthetic_paths
from ..distributed.topology import LaunchSpec
from ..errors import OptionError, note
from ..model.backbones import BACKBONES
from ..options.fields import is_option, read_options
from ..recipes import DEFAULT_RECIPE, RECIPES, possible_world_sizes, split_global_batch

# options that decide the starting weights: given anew, the saved run's record no longer applies
_CHOOSE_WEIGHTS = ("pretrained", "init_from", "backbone")


def config_from_options(given: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> TrainConfig:
    """``TrainConfig`` from ``base`` (default: the defaults), overlaid with the values of the recipe
    ``given`` names (or the default one when ``base`` is empty), then with ``given`` itself. A recipe's
    global batch (``r3net-paper``: 14) is shared by the processes unless ``--batch-size`` is given.

    Raises:
        OptionError: the global batch cannot be shared equally by the job's processes.
    """
    values = dict(base or {})
    name = given.get("recipe", values.get("recipe", DEFAULT_RECIPE))
    recipe = RECIPES.get(name)  # an unknown name is left for validate() to name
    applied = recipe is not None and ("recipe" in given or not values)
    if recipe is not None and applied:
        values.update(recipe.values, recipe=name)
    values.update(given)
    config = TrainConfig(**values)
    if recipe is None or not applied or recipe.global_batch is None or "batch_size" in given:
        return config
    return _share_global_batch(config, recipe.global_batch)


def _share_global_batch(config: TrainConfig, global_batch: int) -> TrainConfig:
    world = LaunchSpec.of(config).world_size
    per_process = split_global_batch(global_batch, world)
    if per_process is None:
        possible = ", ".join(str(n) for n in possible_world_sizes(global_batch))
        raise OptionError(
            f"--recipe {config.recipe} keeps the original global batch of {global_batch} images, which "
            f"{world} processes cannot share equally with at least 2 each (possible: {possible} processes); "
            f"or give --batch-size N (images per process) for a global batch of N x {world}"
        )
    if world > 1:
        note(
            f"--recipe {config.recipe}: the global batch of {global_batch} images split as "
            f"{world} processes x {per_process} (--batch-size {per_process})"
        )
    return dataclasses.replace(config, batch_size=per_process)


def config_from_file(path: str, given: dict[str, Any]) -> TrainConfig:
    """``train --config FILE``: the recipe a run saved in ``path``, with ``given`` in its place; not its
    ``resume`` nor ``device``. ``weights`` is kept as the expected starting weights unless ``given``
    chooses them anew; ``--data synthetic`` is ``synthetic`` again (generated into the new folder).

    Raises:
        OptionError: the file cannot be read, a key is no option of ``train``, or a value is wrong.
    """
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
