"""``train.log``: a run's history, each line with its time, from the configuration to how it ended; the
console gets a summary line in place of the configuration (unless ``--verbose``), until a pipe closes."""

from __future__ import annotations

import datetime
import json
import re
from contextlib import suppress
from pathlib import Path
from typing import IO

import torch

from ..checkpoint_io import list_checkpoints
from ..config import TrainConfig
from ..console import echo
from ..data.split import VAL_SPLIT_FILE
from ..distributed.ranks import rank_zero_only
from ..model.backbones import model_name
from .plan import RunPlan

LOG_NAME = "train.log"
_ITERATION_LINE = re.compile(r"\[iter (\d+)\]")


def timestamp() -> str:
    """Local time with its UTC offset, to the second: ``2026-12-01T14:03:27+01:00``."""
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


class TrainLog:
    """``train.log`` in the output directory, opened once (rank 0), plus the console."""

    def __init__(self, path: str | Path, console: bool = True) -> None:
        self.path = Path(path)
        self.console = console  # False once nobody reads the console any more
        self._file: IO[str] | None = None

    @rank_zero_only
    def open(self, header: list[str], console: list[str]) -> None:
        """Start (or continue) the file with ``header``; show ``console`` on the console."""
        self._file = self.path.open("a", encoding="utf-8", buffering=1)
        for line in header:
            self.write(line, console=False)
        for line in console:
            self._echo(line)

    @rank_zero_only
    def write(self, line: str, console: bool = True) -> None:
        if self._file is not None:
            self._file.write(f"{timestamp()} {line}\n")
        if console:
            self._echo(line)

    def _echo(self, line: str) -> None:
        if self.console and not echo(line):
            self.console = False
            self.write("note: the console was closed; this log goes on here", console=False)

    @rank_zero_only
    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def header_lines(
    plan: RunPlan, resumed_from: Path | None, iteration: int, device: torch.device
) -> tuple[list[str], list[str]]:
    """The top of a run's (or a resumed run's) part of train.log, and what the console shows of it
    (the plan's ``resumed_note``: the launching process printed it already)."""
    config, layout = plan.options, plan.layout
    config_line = f"configuration: {json.dumps(plan.brief(), sort_keys=True)}"  # one line
    accumulated = f" x {layout.accumulate} accumulated micro-batches" if layout.accumulate > 1 else ""
    world = (
        f"world size {layout.processes}, {layout.batch} images per process{accumulated}, "
        f"global batch {layout.global_batch} per optimiser step"
    )
    weights = [f"initial weights: {_describe(plan.weights)}"] if plan.weights else []
    notes = _notes(plan, device)
    resumed = [] if resumed_from is None else [_resumed_line(config, resumed_from, iteration)]
    layout_note = [plan.resumed_note] if plan.resumed_note else []
    sets = plan.data.data_sets
    folders = ", ".join(d["folder"] for d in sets) if len(sets) < 3 else f"{len(sets)} folders"
    pairs, held_out = plan.data.pairs, sum(d.get("held_out", 0) for d in sets)
    split = []  # said at every start: which pairs validate is part of the recipe
    if config.val_split is not None:
        listed = Path(config.output_dir) / VAL_SPLIT_FILE
        split.append(
            f"--val-split {config.val_split}: {held_out} of {pairs + held_out} pairs held out for validation, "
            f"listed in {listed}"
        )
    header = [config_line, world, *weights, *split, *notes, *resumed, *layout_note]
    described = f" ({layout.describe()})" if layout.accumulate > 1 else ""
    summary = (  # the one console line about a run
        f"training {model_name(config.backbone, config.head_width)} on {pairs} pairs ({folders}): world size "
        f"{layout.processes}, global batch {layout.global_batch}{described}, {config.iters} iterations, "
        f"output {config.output_dir}"
    )
    console = [summary, *header] if config.verbose else [summary, *split, *notes, *resumed]
    return header, console


def _notes(plan: RunPlan, device: torch.device) -> list[str]:
    """Legal choices probably not meant, and what a run will not do."""
    config, notes = plan.options, []
    if not plan.weights and not plan.resume:
        notes.append(
            "note: backbone from random weights (--pretrained none); R3Net's recipe starts from ImageNet "
            "weights (--pretrained imagenet, the default)"
        )
    if not plan.data.val_data and config.val_split is None:
        notes.append(
            "note: no validation (no --val-data or --val-split): no validation scores, and no best_model_*.pt is kept "
            "(the checkpoints are)"
        )
        if config.val_max:
            notes.append(f"note: --val-max {config.val_max} has no effect: there is no validation")
    if config.amp == "fp16" and device.type == "cpu":
        notes.append("note: --amp fp16 on the CPU is emulated and several times slower; bf16 or off is faster")
    return notes


def _resumed_line(config: TrainConfig, resumed_from: Path, iteration: int) -> str:
    line = f"resumed from {resumed_from} at iteration {iteration}"
    # newer checkpoints are left only by --resume auto, which passed over them: they did not load
    passed_over = [path.name for it, path in list_checkpoints(config.output_dir) if it > iteration]
    if passed_over:
        line += f" (passed over {', '.join(passed_over)}, which could not be loaded)"
    try:
        logged = _ITERATION_LINE.findall((Path(config.output_dir) / LOG_NAME).read_text(encoding="utf-8"))
    except OSError:
        logged = []
    if logged and int(logged[-1]) > iteration:
        line += f": iterations {iteration + 1} to {logged[-1]} above are trained again below"
    return line


def _describe(weights: dict[str, str]) -> str:
    what = "whole model" if weights["source"] == "init-from" else "backbone"
    return f"{what} from {weights['source']}: {weights['file']} (sha256 {weights['sha256']})"


def record_ending(output_dir: str | Path, line: str) -> None:
    """Append the console's last line (``interrupted``, ``error: ...``) to train.log once the workers are
    gone; a job refused before its log was opened (or whose output folder failed) leaves none."""
    path = Path(output_dir) / LOG_NAME
    if path.is_file():
        with suppress(OSError), path.open("a", encoding="utf-8") as f:
            f.write(f"{timestamp()} {line}\n")
