"""``evaluate``'s results: one row per data set on the console, and the same numbers as JSON."""

from __future__ import annotations

from collections.abc import Mapping

from ..atomic_files import write_json
from ..metrics import METRIC_KEYS


def format_table(rows: Mapping[str, Mapping[str, float]]) -> str:
    """A plain-text table: one row per data set, the image count and the nine metrics."""
    header = ["dataset", "images", *METRIC_KEYS]
    body = [[name, str(int(r["images"]))] + [f"{r[c]:.4f}" for c in METRIC_KEYS] for name, r in rows.items()]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
        for line in [header, *body]
    ]
    return "\n".join(lines)


def report(rows: Mapping[str, Mapping[str, float]], json_path: str | None, print_table: bool = True) -> None:
    """Print the table (unless ``print_table`` is False) and, with ``json_path``, write the rows as
    JSON keyed by data set."""
    if print_table:
        print(format_table(rows), flush=True)
    if json_path:
        write_json(dict(rows), json_path)
