"""One row of ``profile``: what was measured (model, device, mode, size, batch) and what it cost, or why the mode
could not run. Its JSON keys are the schema ``profile --json``, the model card and ``reproduce`` read; they are
listed in docs/profile.md and only added to."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import OptionError
from ..options.fields import load_json

MODES = ("inference", "onnx", "train", "max-batch")


@dataclass
class CostRow:
    """A measured combination (``status`` "ok") or one that could not run (``status`` "unavailable" or
    "failed", with its ``reason``); figures that were not measured are None."""

    model: str  # the checkpoint source, or "R3Net (<backbone>)" for a bare architecture
    backbone: str
    device: str  # "cpu" or "cuda:0"
    device_name: str
    mode: str  # one of MODES
    amp: str  # off, bf16, fp16 ("off" for onnx)
    channels_last: bool
    compile: bool
    height: int
    width: int
    batch_size: int
    parameters: int | None = None
    params_m: float | None = None
    gmacs_per_image: float | None = None  # MACs = FLOPs / 2, forward pass of one image
    latency_ms_median: float | None = None  # per batch
    latency_ms_p95: float | None = None
    images_per_s: float | None = None  # batch_size / median latency
    peak_memory_mib: float | None = None
    memory_measure: str | None = None  # what peak_memory_mib is, in words
    warmup: int = 0
    repeats: int = 0
    max_batch: int | None = None  # max-batch rows: the largest batch per device that fits
    status: str = "ok"
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


ROW_KEYS = tuple(f.name for f in dataclasses.fields(CostRow))
HEADER_KEYS = ("command", "model", "device", "device_name", "torch", "threads", "load_average", "date", "macs")


def read_report(path: str | Path, flag: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(header, rows)`` of a ``profile --json`` file; ``OptionError`` naming ``flag`` and the file otherwise."""
    what = f"{flag} {path}"
    data = load_json(path, what)
    if not isinstance(data, dict) or not isinstance(data.get("header"), dict) or not isinstance(data.get("rows"), list):
        raise OptionError(f"{what}: expected the JSON of 'profile --json' (a header and rows)")
    for number, row in enumerate(data["rows"], 1):
        lacking = [key for key in ROW_KEYS if not isinstance(row, dict) or key not in row]
        if lacking:
            raise OptionError(f"{what}: row {number} has no {', '.join(lacking)}: not the JSON of 'profile --json'")
    if not data["rows"]:
        raise OptionError(f"{what}: holds no rows")
    return data["header"], data["rows"]
