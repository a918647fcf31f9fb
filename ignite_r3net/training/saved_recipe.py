"""``train --config FILE``: the recipe a run saved in its ``config.json``, rerun with the options
given on the command line in place of the saved ones."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..config import TrainConfig
from ..data.synthetic import synthetic_paths
from ..errors import OptionError
from ..model.backbones import BACKBONES
from ..options.fields import is_option
from ..options.json_file import read_options
from .recipe_config import config_from_options

# options that decide the starting weights: given anew, the saved run's record no longer applies
_CHOOSE_WEIGHTS = ("pretrained", "init_from", "backbone")


def config_from_file(path: str, given: dict[str, Any]) -> TrainConfig:
    """The recipe saved in ``path``, with ``given`` (the options of the command line) in its place.

    * ``resume`` records which checkpoint that run continued: not taken (give ``--resume``).
    * ``device`` records where that run computed (``cuda`` or ``cpu``): not taken, so the rerun
      computes where ``--device`` (default: auto) says, on this machine.
    * what start-up records (``listings``) is recorded anew, except ``weights``: it is kept as the
      expected starting weights unless ``given`` chooses them anew; start-up fetches
      ``--pretrained`` / ``--init-from`` again, warns if their sha256 differs from the record, and
      records what it got.
    * ``--data synthetic`` was saved as the set generated into that run's folder: it is
      ``synthetic`` again, generated (byte for byte the same) into the new ``--output-dir``.

    Raises:
        OptionError: the file cannot be read, a key is no option of ``train``, or a value is wrong
            (one line naming the key).
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
