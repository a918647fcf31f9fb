"""``compare``'s tables (markdown, CSV, LaTeX; best bold, second-best underlined), the per-image
score CSVs of ``evaluate --per-image`` and ``compare``, and the published R3Net numbers
(``paper_numbers.json``, the sets ``metrics.keys.REFERENCE_NAMES`` names).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from ..errors import warn
from ..metrics.keys import METRIC_KEYS, PROTOCOL_MARK, PROTOCOL_METRICS, REFERENCE_NAMES, ImageScores, protocol_note

LOWER_IS_BETTER = frozenset({"mae"})  # every other metric is better higher
_LATEX_NAMES = {  # math mode
    "mae": r"\mathcal{M}",
    "maxF": r"F_\beta^{\max}",
    "meanF": r"F_\beta^{\mathrm{mean}}",
    "adpF": r"F_\beta^{\mathrm{adp}}",
    "Sm": r"S_\alpha",
    "maxE": r"E_\phi^{\max}",
    "meanE": r"E_\phi^{\mathrm{mean}}",
    "adpE": r"E_\phi^{\mathrm{adp}}",
    "wF": r"F_\beta^{w}",
}
_LATEX_SPECIAL = {c: "\\" + c for c in "&%$#_{}"} | {"\\": r"\textbackslash{}", "~": r"\~{}", "^": r"\^{}"}
NO_VALUE = "-"  # the cell of a method without maps for a data set
PARTIAL = "*"  # the mark of a value scored with some maps missing (--allow-missing)

Results = Mapping[str, Mapping[str, Mapping[str, float]]]  # dataset -> method -> metric / count / missing
PUBLISHED_MARK = "‡"


@dataclass(frozen=True)
class TableCell:
    """Printed value (None: no maps), rank in the column (1 best, 2 second, 0 other), maps missing."""

    text: str | None
    rank: int = 0
    partial: bool = False


@dataclass(frozen=True)
class ComparisonTable:
    """Rows of methods by columns of (data set, metric), ranked per column on the printed values."""

    datasets: list[str]
    metrics: list[str]
    methods: list[str]
    rows: list[list[TableCell]]
    notes: list[str]
    protocol_metrics: tuple[str, ...] = field(default=())  # marked: the protocol's own definitions

    @property
    def columns(self) -> list[tuple[str, str]]:
        return [(d, m) for d in self.datasets for m in self.metrics]

    def mark(self, metric: str, mark: str = PROTOCOL_MARK) -> str:
        return mark if metric in self.protocol_metrics else ""


def build_table(
    results: Results,
    datasets: list[str],
    methods: list[str],
    metrics: list[str],
    digits: int = 3,
    protocol: str = "standard",
    published: Results | None = None,
) -> ComparisonTable:
    """The table of ``results``, rounded to ``digits`` and ranked as printed (ties share a mark); a partial
    value (maps missing) takes no rank, nor do the ``published`` rows (row name -> dataset -> metric) after
    the methods: another code scored them. The columns ``protocol`` defines its own way are marked."""
    columns = [(d, m) for d in datasets for m in metrics]
    text = [[_value_text(results, d, method, m, digits) for d, m in columns] for method in methods]
    partial = [[bool(results.get(d, {}).get(method, {}).get("missing")) for d, _ in columns] for method in methods]
    ranks = [_column_ranks([r[j] for r in text], [r[j] for r in partial], m) for j, (_, m) in enumerate(columns)]
    rows = [
        [TableCell(text[i][j], ranks[j][i], partial[i][j]) for j in range(len(columns))] for i in range(len(methods))
    ]
    marked = tuple(m for m in metrics if m in PROTOCOL_METRICS[protocol])
    note = protocol_note(protocol) if marked else None
    notes = _notes(results, datasets, methods) + ([note] if note else [])
    for name, values in (published or {}).items():
        rows.append([TableCell(_value_text({d: {name: values.get(d, {})}}, d, name, m, digits)) for d, m in columns])
        methods = [*methods, name]
    return ComparisonTable(datasets, metrics, methods, rows, notes, marked)


def _column_ranks(texts: list[str | None], partial: list[bool], metric: str) -> list[int]:
    """1 for the best printed value, 2 for the second-best, else 0 (all 0 with fewer than two)."""
    values = [float(t) if t is not None and not p else None for t, p in zip(texts, partial)]
    present = [v for v in values if v is not None]
    if len(present) < 2:
        return [0] * len(values)
    order = sorted(set(present), reverse=metric not in LOWER_IS_BETTER)[:2]
    return [order.index(v) + 1 if v in order else 0 for v in values]


def _value_text(results: Results, dataset: str, method: str, metric: str, digits: int) -> str | None:
    entry = results.get(dataset, {}).get(method)
    return None if entry is None or metric not in entry else f"{entry[metric]:.{digits}f}"


def _notes(results: Results, datasets: list[str], methods: list[str]) -> list[str]:
    notes = [
        f"{method} on {dataset}: {int(entry['count'])} of {int(entry['count'] + entry['missing'])} images"
        for method in methods
        for dataset in datasets
        if (entry := results.get(dataset, {}).get(method)) and entry.get("missing")
    ]
    return [f"{PARTIAL} scored on the maps present (--allow-missing), not ranked: " + "; ".join(notes)] if notes else []


def _arrow(metric: str, down: str, up: str) -> str:
    return down if metric in LOWER_IS_BETTER else up


def table_markdown(table: ComparisonTable) -> str:
    """GitHub markdown: best values **bold**, second-best <u>underlined</u>."""
    header = ["Method"] + [f"{d} {m}{_arrow(m, '↓', '↑')}{table.mark(m)}" for d, m in table.columns]
    lines = ["| " + " | ".join(header) + " |", "|---" + "|--:" * len(table.columns) + "|"]
    for method, row in zip(table.methods, table.rows):
        cells = [_styled(c, "**{}**", "<u>{}</u>", PARTIAL) for c in row]
        lines.append("| " + " | ".join([method.replace("|", "\\|"), *cells]) + " |")
    for note in table.notes:
        lines += ["", note.replace(PARTIAL, "\\" + PARTIAL, 1)]
    return "\n".join(lines).rstrip() + "\n"


def table_csv(table: ComparisonTable) -> str:
    """Plain numbers, empty where a method has no maps; columns ``<dataset>/<metric>[ (r3net)]``."""
    header = ["method"] + [f"{d}/{m}{table.mark(m, ' (r3net)')}" for d, m in table.columns]
    return _csv([header, *([method] + [c.text or "" for c in row] for method, row in zip(table.methods, table.rows))])


def table_latex(table: ComparisonTable) -> str:
    r"""A booktabs ``tabular``: one column group per data set, best values \textbf, second-best \underline."""
    n = len(table.metrics)
    groups = " & ".join(rf"\multicolumn{{{n}}}{{c}}{{{_latex_escape(d)}}}" for d in table.datasets)
    rules = " ".join(rf"\cmidrule(lr){{{2 + k * n}-{1 + (k + 1) * n}}}" for k in range(len(table.datasets)))
    names = " & ".join(
        "$" + _LATEX_NAMES[m] + _arrow(m, r"\downarrow", r"\uparrow") + table.mark(m, r"^\dagger") + "$"
        for _, m in table.columns
    )
    lines = [
        "% generated by ignite_r3net compare; needs \\usepackage{booktabs}",
        *(f"% {note}" for note in table.notes),
        rf"\begin{{tabular}}{{l{'c' * len(table.columns)}}}",
        r"\toprule",
        rf" & {groups} \\",
        rules,
        rf"Method & {names} \\",
        r"\midrule",
    ]
    for method, row in zip(table.methods, table.rows):
        cells = [_styled(c, r"\textbf{{{}}}", r"\underline{{{}}}", f"$^{PARTIAL}$") for c in row]
        lines.append(" & ".join([_latex_escape(method), *cells]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def _styled(cell: TableCell, best: str, second: str, partial_mark: str) -> str:
    if cell.text is None:
        return NO_VALUE
    text = best.format(cell.text) if cell.rank == 1 else second.format(cell.text) if cell.rank == 2 else cell.text
    return text + (partial_mark if cell.partial else "")


def _latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(c, c) for c in text)


def column_name(metric: str, protocol: str) -> str:
    """``mae``, or ``mae (r3net)`` where the protocol defines it its own way (as in ``table.csv``)."""
    return f"{metric} ({protocol})" if metric in PROTOCOL_METRICS[protocol] else metric


def evaluation_csv(datasets: Mapping[str, Sequence[ImageScores]], protocol: str) -> str:
    """``dataset,image,<nine metrics>``: the data sets in the order given, their images sorted by stem."""
    header = ["dataset", "image", *(column_name(m, protocol) for m in METRIC_KEYS)]
    # repr: each value in full (the shortest form that reads back the same float)
    rows = [
        [dataset, stem, *(repr(scores[m]) for m in METRIC_KEYS)]
        for dataset, images in datasets.items()
        for stem, scores in sorted(images, key=lambda row: row[0])
    ]
    return _csv([header, *rows])


def comparison_csv(methods: Mapping[str, Sequence[ImageScores]], metrics: Sequence[str], protocol: str) -> str:
    """``image,<method>/<metric>,...`` for one data set: a row per image (by stem), empty where a method lacks it."""
    by_method = {method: dict(rows) for method, rows in methods.items()}
    stems = sorted({stem for rows in by_method.values() for stem in rows})
    header = ["image", *(f"{method}/{column_name(m, protocol)}" for method in by_method for m in metrics)]
    rows = [
        [stem, *(repr(scores[stem][m]) if stem in scores else "" for scores in by_method.values() for m in metrics)]
        for stem in stems
    ]
    return _csv([header, *rows])


def _csv(rows: list[list[str]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


@dataclass(frozen=True)
class Reference:
    """Published numbers: ``sets[dataset][metric]`` (metric keys as ``METRIC_KEYS``)."""

    name: str
    label: str
    source: str
    kind: str
    sets: dict[str, dict[str, float]]
    note: str = ""


@cache
def _paper_numbers() -> dict[str, Any]:
    # each reference with its source: the paper's table (with CRF), or the authors' released maps scored
    # by a named public evaluation; a number no source confirmed is left out
    return json.loads(resources.files(__package__).joinpath("paper_numbers.json").read_text(encoding="utf-8"))


def reference(name: str) -> Reference:
    entry = _paper_numbers()[name]
    return Reference(name, entry["label"], entry["source"], entry["kind"], entry["sets"], entry.get("note", ""))


def reference_for(dataset: str) -> Reference | None:
    """The reference ``reproduce`` holds ``dataset`` against: the paper's numbers where known, else the
    released maps' public scores; None when neither has the set."""
    return next((r for r in map(reference, REFERENCE_NAMES) if dataset in r.sets), None)


def published_rows(names: Sequence[str], datasets: Sequence[str]) -> tuple[Results, list[str]]:
    """``compare --reference``: a row per reference (label -> dataset -> metric) on the ``datasets`` that
    name a standard set (any alias), and a note giving each one's source; warns of one with no number."""
    # imported here: the data package loads numpy, and the command line imports this module
    from ..data.registry import standard_set

    rows: dict[str, dict[str, dict[str, float]]] = {}
    notes = []
    known = {d: standard_set(d) for d in datasets}
    for name in names:
        found = reference(name)
        values = {d: found.sets[s.name] for d, s in known.items() if s is not None and s.name in found.sets}
        if not values:
            warn(
                f"--reference {name}: no published number for {', '.join(datasets)}"
                + (f" ({found.note})" if found.note else "")
            )
        rows[f"{found.label} {PUBLISHED_MARK}"] = values
        notes.append(
            f"{PUBLISHED_MARK} {found.label}: published numbers ({found.kind}), not scored by this code and not "
            f"ranked; source: {found.source}" + (f"; {found.note}" if found.note else "")
        )
    return rows, notes
