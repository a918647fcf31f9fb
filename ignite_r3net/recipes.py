"""Training recipes by name (``train --recipe NAME``): the option values a published training script
used, with where they come from. Torch-free: ``config.py`` lists them in ``--help``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Recipe:
    """A named set of ``TrainConfig`` values; ``global_batch``: the batch over all processes, kept on any number."""

    name: str
    source: str
    values: Mapping[str, Any]
    global_batch: int | None = None

    def summary(self) -> str:
        batch = f"batch {self.values.get('batch_size')} per process"
        if self.global_batch is not None:
            batch = f"batch {self.global_batch} over all processes"
        settings = ", ".join(f"{k.replace('_', '-')} {v}" for k, v in self.values.items() if k != "batch_size")
        return f"{self.name}: {self.source}; {batch}, {settings}"


# zijundeng/R3Net train.py (commit 93b8a34, 2019-01-07): args = {'iter_num': 6000,
# 'train_batch_size': 14, 'lr': 1e-3, 'lr_decay': 0.9, 'weight_decay': 5e-4, 'momentum': 0.9};
# joint_transforms RandomCrop(300), RandomHorizontallyFlip(), RandomRotate(10);
# torch.manual_seed(2018); torch.cuda.set_device(0) (one GPU); R3Net() on ResNeXt-101 32x4d
# from ImageNet weights (resnext/config.py). Its README: "about 70 minutes" on one GTX 1080 Ti.
_ORIGINAL_VALUES = {
    "iters": 6000,
    "lr": 1e-3,
    "lr_power": 0.9,
    "momentum": 0.9,
    "weight_decay": 5e-4,
    "crop": 300,
    "rotate": 10.0,
    "backbone": "resnext101_32x4d",
    "pretrained": "imagenet",
    "seed": 2018,
    "amp": "off",
}

R3NET_PAPER = Recipe("r3net-paper", "the original R3Net code's train.py (one GPU)", _ORIGINAL_VALUES, global_batch=14)

# the reference DDP script: 'iter_num': 8000 and batch_size = 12 per GPU, otherwise train.py's
# values; TrainConfig's defaults are this recipe
REFERENCE_DDP = Recipe(
    "reference-ddp", "the reference DDP script (the defaults)", {**_ORIGINAL_VALUES, "iters": 8000, "batch_size": 12}
)

RECIPES: dict[str, Recipe] = {r.name: r for r in (REFERENCE_DDP, R3NET_PAPER)}
DEFAULT_RECIPE = REFERENCE_DDP.name


def recipes_help() -> str:
    listed = "; ".join(r.summary() for r in RECIPES.values())
    return (
        "the training recipe, by name; options given on the command line replace its values, and "
        f"config.json records its name and every value. {listed}. r3net-paper keeps the global "
        "batch of 14 on N processes (14 / N per process, in micro-batches with --max-batch-per-device): N must be "
        "1, 2 or 7, or give --batch-size"
    )
