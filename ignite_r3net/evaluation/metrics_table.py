"""``evaluate``'s results: one row per data set on the console, and the same numbers as JSON."""

from __future__ import annotations

from collections.abc import Mapping

from ..atomic_files import write_json
from ..metrics.keys import METRIC_KEYS, PROTOCOL_MARK, PROTOCOL_METRICS, protocol_fields, protocol_note


def format_table(rows: Mapping[str, Mapping[str, float]], protocol: str = "standard") -> str:
    """A plain-text table: one row per data set, the image count and the nine metrics; the columns
    ``protocol`` defines its own way are marked, with a note under the table."""
    marked = PROTOCOL_METRICS[protocol]
    header = ["dataset", "images", *(k + PROTOCOL_MARK if k in marked else k for k in METRIC_KEYS)]
    body = [[name, str(int(r["images"]))] + [f"{r[c]:.4f}" for c in METRIC_KEYS] for name, r in rows.items()]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
        for line in [header, *body]
    ]
    note = protocol_note(protocol)
    return "\n".join(lines + ([note] if note else []))


def report(
    rows: Mapping[str, Mapping[str, float]],
    json_path: str | None,
    print_table: bool = True,
    protocol: str = "standard",
) -> None:
    """Print the table (unless ``print_table`` is False) and, with ``json_path``, write the rows as
    JSON keyed by data set (each row saying which metrics follow a non-standard ``protocol``)."""
    if print_table:
        print(format_table(rows, protocol), flush=True)
    if json_path:
        write_json({name: {**row, **protocol_fields(protocol)} for name, row in rows.items()}, json_path)
