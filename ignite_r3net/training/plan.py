"""The run as ``start.planned_run`` resolved it, kept apart from the options as asked (``TrainConfig``): the launch
and every worker receive it, and ``config.json`` records it under ``resolved``."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..atomic_files import write_text
from ..batch_layout import BatchLayout
from ..config import TrainConfig
from ..distributed.topology import LaunchSpec


@dataclass(frozen=True)
class DataPlan:
    """``--data`` and ``--val-data`` resolved and checked: the folders (``synthetic`` generated, names under
    ``--data-root`` found), each folder's record ``{folder, pairs, listing[, held_out]}``, the listings the ranks
    and a resume compare, and ``--val-split``'s held-out names (file stems, sorted)."""

    folders: list[str]
    val_data: str | None
    data_sets: list[dict[str, Any]]
    listings: dict[str, str]
    val_held_out: list[str] | None = None

    @property
    def pairs(self) -> int:
        """The training pairs of every folder."""
        return sum(d["pairs"] for d in self.data_sets)


@dataclass(frozen=True)
class RunPlan:
    """``options`` as asked, and what start-up resolved from them; ``start``: the iterations already trained."""

    options: TrainConfig
    spec: LaunchSpec
    layout: BatchLayout
    device: str
    data: DataPlan
    resume: str | None = None  # the checkpoint file continued ('auto' resolved), None: a fresh run
    weights: dict[str, str] | None = None  # the starting weights: {source, file, sha256}
    tracking: dict[str, dict] | None = None  # each --tracker's run: {"mlflow": {"run_id": ...}}
    start: int = 0
    resumed_note: str | None = None  # a resume on another batch layout: what changed (train.log and the console)

    def resolved(self) -> dict[str, Any]:
        """What ``config.json`` records under ``resolved``: the values the run used where start-up decided them."""
        return {
            **self.layout.recorded(),
            "device": self.device,
            "resume": self.resume,
            "weights": self.weights,
            "data": self.data.folders,
            "val_data": self.data.val_data,
            "data_sets": self.data.data_sets,
            "listings": self.data.listings,
            "val_held_out": self.data.val_held_out,
            "tracking": self.tracking,
        }

    def record(self) -> dict[str, Any]:
        """``config.json``: the options as given (and which were), then ``resolved``."""
        return {**dataclasses.asdict(self.options), "given": sorted(self.options.given), "resolved": self.resolved()}

    def save(self, path: str | Path) -> None:
        write_text(json.dumps(self.record(), indent=2, sort_keys=True) + "\n", path)

    def brief(self) -> dict[str, Any]:
        """The options with the resolved values in their place, flat, the held-out names (thousands, for a large
        data set) as their count: what train.log and the trackers record; config.json holds every name."""
        values = {**dataclasses.asdict(self.options), **self.resolved()}
        values.pop("given")
        if self.data.val_held_out is not None:
            values["val_held_out"] = f"{len(self.data.val_held_out)} names (listed in config.json)"
        return values
