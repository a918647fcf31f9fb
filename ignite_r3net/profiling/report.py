"""``profile``'s rows: one row (``CostRow``), whose JSON keys are the schema ``profile --json``, the model card and
``reproduce`` read (listed in docs/profile.md and only added to), and the rows as text: the console table (one
line per row as it comes) and the Markdown table that the Hub model card and ``reproduce``'s results.md show."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import OptionError
from ..options.fields import load_json


@dataclass
class CostRow:
    """A measured combination (``status`` "ok") or one that could not run (``status`` "unavailable" or
    "failed", with its ``reason``); figures that were not measured are None."""

    model: str  # the checkpoint source, or "R3Net (<backbone>)" for a bare architecture
    backbone: str
    device: str  # "cpu" or "cuda:0"
    device_name: str
    mode: str  # inference, onnx, train or max-batch
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


# (title, JSON key, width, format) of each console and Markdown column after the row's label
COLUMNS = (
    ("params M", "params_m", 9, "{:.2f}"),
    ("GMACs/img", "gmacs_per_image", 10, "{:.2f}"),
    ("median ms", "latency_ms_median", 10, "{:.1f}"),
    ("p95 ms", "latency_ms_p95", 9, "{:.1f}"),
    ("images/s", "images_per_s", 9, "{:.3g}"),
    ("peak MiB", "peak_memory_mib", 9, "{:.0f}"),
)
LABEL_WIDTH = 40
MACS_NOTE = (
    "GMACs: multiply-accumulates of one image's forward pass (torch.utils.flop_counter's FLOPs / 2, the convention "
    "of saliency papers)"
)


def _cell(row: Mapping[str, Any], key: str, fmt: str) -> str:
    value = row.get(key)
    return "-" if value is None else fmt.format(value)


def row_label(row: Mapping[str, Any]) -> str:
    """``inference 300x300 b1 fp32``: the combination a row (a ``CostRow`` as JSON) measured."""
    parts = [str(row["mode"]), f"{row['height']}x{row['width']}"]
    if row["mode"] != "max-batch":  # its batch is what it finds
        parts.append(f"b{row['batch_size']}")
    if row["mode"] != "onnx":
        parts.append("fp32" if row["amp"] == "off" else str(row["amp"]))
    parts += [name for name, key in (("channels-last", "channels_last"), ("compile", "compile")) if row.get(key)]
    return " ".join(parts)


def _note(row: Mapping[str, Any]) -> str:
    if row.get("status", "ok") != "ok":
        return f"{row['status']}: {row.get('reason')}"
    if row.get("max_batch") is not None:
        return f"max batch per device {row['max_batch']}"
    return ""


def console_header() -> str:
    """The column titles of ``console_line``."""
    titles = "".join(f"{title:>{width}}" for title, _, width, _ in COLUMNS)
    return f"{'row':<{LABEL_WIDTH}}{titles}  note"


def console_line(row: Mapping[str, Any]) -> str:
    """One row as a line under ``console_header``."""
    cells = "".join(f"{_cell(row, key, fmt):>{width}}" for _, key, width, fmt in COLUMNS)
    return f"{row_label(row):<{LABEL_WIDTH}}{cells}  {_note(row)}".rstrip()


def markdown_table(rows: Iterable[Mapping[str, Any]]) -> str:
    """The rows as a Markdown table: the combination, the figures, and a note (a reason, a max batch)."""
    lines = [
        "| device | row | " + " | ".join(title for title, *_ in COLUMNS) + " | note |",
        "|---|---|" + "--:|" * len(COLUMNS) + "---|",
    ]
    for row in rows:
        cells = [_cell(row, key, fmt) for _, key, _, fmt in COLUMNS]
        lines.append(f"| {row['device_name']} | {row_label(row)} | " + " | ".join(cells) + f" | {_note(row)} |")
    return "\n".join(lines)


def measured_with(header: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    """A few sentences saying how the figures of ``rows`` were measured (for above a Markdown table)."""
    measures = sorted({str(r["memory_measure"]) for r in rows if r.get("memory_measure")})
    repeats = f" over {rows[0]['repeats']} timed runs after {rows[0]['warmup']} untimed" if rows else ""
    parts = [
        f"Measured by `profile` on {header.get('device_name')} ({header.get('date')}; torch {header.get('torch')}, "
        f"{header.get('threads')} threads, load average {header.get('load_average')}).",
        f"Latency per batch: median and 95th percentile{repeats}, the device synchronised around each run.",
        MACS_NOTE + ".",
    ]
    if measures:
        parts.append("Peak memory: " + "; ".join(measures) + ".")
    return " ".join(parts)
