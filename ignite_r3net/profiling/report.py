"""``profile``'s rows as text: the console table (one line per row as it comes), and the Markdown table that the
Hub model card and ``reproduce``'s results.md show."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

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
    """``inference 300x300 b1 fp32``: the combination a row (a ``CostRow.to_json()``) measured."""
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
