"""The training config a command line describes: the ``--recipe``'s values, replaced by the
options given, with a recipe's global batch shared among the job's processes."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..config import TrainConfig
from ..distributed.topology import LaunchSpec
from ..errors import OptionError, note
from ..recipes import DEFAULT_RECIPE, RECIPES, possible_world_sizes, split_global_batch


def config_from_options(given: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> TrainConfig:
    """``TrainConfig`` from ``base`` (default: nothing, i.e. the defaults), overlaid with the values
    of the recipe named in ``given`` (when ``given`` names one, or ``base`` is empty) and then with
    ``given`` itself: only the options the user gave replace a recipe's values.

    A recipe with a global batch (``r3net-paper``: 14) sets ``--batch-size`` to its share per process
    unless ``--batch-size`` is given, and says how it was split. A saved recipe (``base``) keeps its
    batch size unless ``given`` names the recipe anew.

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
