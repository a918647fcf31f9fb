"""The table of ``reproduce`` (results.md, .csv, .json): per test set the reference's max F and MAE (the
paper's, else the released maps' public scores, marked), ours without and with CRF, the differences and
whether they are within the tolerance, ours by the standard protocol, and the authors' maps by our code."""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..atomic_files import write_json, write_text
from ..data.registry import STANDARD_BY_NAME
from ..evaluation.comparison_table import REFERENCE_NAMES, reference, reference_for
from ..options.reproduce import ReproduceOptions

METRICS = ("maxF", "mae")
COLUMNS = {"no-crf": "ours", "crf": "ours + CRF"}


@dataclass
class Model:
    """A model of the reproduction: label (``seed 2018``, ``checkpoint``), checkpoint, scores
    (``runner.evaluate_model``)."""

    label: str
    checkpoint: str
    scores: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)


Summary = dict[str, dict[str, float]]  # metric -> {"mean", and with several models "std", "min", "max"}


def _summary(values: Sequence[float]) -> dict[str, float]:
    # mean, and with several models their spread: sample standard deviation, min and max
    out = {"mean": statistics.fmean(values)}
    if len(values) > 1:
        out.update(std=statistics.stdev(values), min=min(values), max=max(values))
    return out


def _ours(models: Sequence[Model], variant: str, dataset: str, protocol: str) -> Summary | None:
    rows = [m.scores[variant][dataset][protocol] for m in models if variant in m.scores]
    if not rows:
        return None
    return {metric: _summary([float(row[metric]) for row in rows]) for metric in METRICS}


def _comparison(ours: Summary | None, ref: Mapping[str, float], options: ReproduceOptions) -> dict:
    if ours is None or not all(metric in ref for metric in METRICS):
        return {}
    delta = {metric: ours[metric]["mean"] - ref[metric] for metric in METRICS}
    tolerance = {"maxF": options.tolerance_maxf, "mae": options.tolerance_mae}
    # a rounding margin: the references are given to 3 decimals
    within = all(abs(delta[m]) <= tolerance[m] + 1e-9 for m in METRICS)
    return {"delta": delta, "within_tolerance": within}


def build_results(
    models: Sequence[Model],
    test_sets: Mapping[str, Path],
    missing: Sequence[str],
    author: Mapping[str, Mapping[str, Any]] | None,
    options: ReproduceOptions,
    data_root: str,
) -> dict[str, Any]:
    """Everything results.json holds: models, references with their sources, tolerances, an entry per
    found test set and the missing sets."""
    sets: dict[str, Any] = {}
    for name, folder in test_sets.items():
        ref = reference_for(name)
        ref_values = ref.sets[name] if ref else {}
        entry: dict[str, Any] = {
            "folder": str(folder),
            "pairs": models[0].scores["no-crf"][name]["r3net"]["images"] if models else None,
            "published_pairs": STANDARD_BY_NAME[name].pairs,
            "reference": {"name": ref.name, **{m: ref_values[m] for m in METRICS if m in ref_values}} if ref else None,
        }
        for variant in COLUMNS:
            ours = _ours(models, variant, name, "r3net")
            entry[variant] = {"r3net": ours, "standard": _ours(models, variant, name, "standard")}
            entry[variant].update(_comparison(ours, ref_values, options))
        if author is not None and name in author:
            entry["author_maps"] = {p: {m: author[name][p][m] for m in METRICS} for p in ("r3net", "standard")}
        sets[name] = entry
    return {
        "data_root": data_root,
        "models": [{"label": m.label, "checkpoint": m.checkpoint} for m in models],
        "protocol": "maxF and MAE by the original R3Net code's definitions (--protocol r3net); 'standard': "
        "PySODMetrics on the same maps",
        "tolerance": {"maxF": options.tolerance_maxf, "mae": options.tolerance_mae},
        "references": {
            name: {"label": r.label, "source": r.source, "kind": r.kind, "note": r.note}
            for name, r in ((n, reference(n)) for n in REFERENCE_NAMES)
        },
        "sets": sets,
        "missing": list(missing),
    }


def _value(summary: Summary | None, metric: str) -> str:
    if not summary:
        return "-"
    cell = f"{summary[metric]['mean']:.3f}"
    return f"{cell} ± {summary[metric]['std']:.3f}" if "std" in summary[metric] else cell


def _delta(entry: Mapping[str, Any], metric: str) -> str:
    return f"{entry['delta'][metric]:+.3f}" if "delta" in entry else "-"


def _within(entry: Mapping[str, Any]) -> str:
    return "-" if "within_tolerance" not in entry else ("yes" if entry["within_tolerance"] else "no")


def table_rows(results: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The header and the rows of the table (one per found test set)."""
    header = ["data set", "pairs", "reference", "ref maxF", "ref MAE"]
    for title in COLUMNS.values():
        header += [f"{title} maxF", f"{title} MAE", "Δ maxF", "Δ MAE", "within"]
    header += ["standard maxF", "standard MAE"]
    with_author = any("author_maps" in e for e in results["sets"].values())
    if with_author:
        header += ["author maps maxF", "author maps MAE"]
    rows = []
    for name, entry in results["sets"].items():
        ref = entry["reference"] or {}
        marked = {"r3net-paper": "paper", "r3net-released-maps": "released maps ‡"}.get(ref.get("name", ""), "-")
        row = [name, str(entry["pairs"]), marked, *(f"{ref[m]:.3f}" if m in ref else "-" for m in METRICS)]
        for variant in COLUMNS:
            cell = entry[variant]
            row += [_value(cell["r3net"], "maxF"), _value(cell["r3net"], "mae")]
            row += [_delta(cell, "maxF"), _delta(cell, "mae"), _within(cell)]
        row += [_value(entry["no-crf"]["standard"], "maxF"), _value(entry["no-crf"]["standard"], "mae")]
        if with_author:
            author = entry.get("author_maps")
            row += [f"{author['r3net'][m]:.3f}" if author else "-" for m in METRICS]
        rows.append(row)
    return header, rows


def to_markdown(results: Mapping[str, Any]) -> str:
    """results.md: the table and what its columns mean."""
    header, rows = table_rows(results)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    tolerance = results["tolerance"]
    models = results["models"]
    notes = [
        "",
        f"maxF and MAE by the original R3Net code's protocol (--protocol r3net), full resolution; standard: "
        f"PySODMetrics on the maps without CRF. Δ = ours - reference; within: |Δ maxF| <= {tolerance['maxF']} "
        f"and |Δ MAE| <= {tolerance['mae']}.",
        "Models: "
        + "; ".join(f"{m['label']}: {m['checkpoint']}" for m in models)
        + (f" (mean ± sample standard deviation of {len(models)} models)" if len(models) > 1 else ""),
    ]
    for name, ref in results["references"].items():
        mark = " ‡" if name == "r3net-released-maps" else ""
        notes.append(
            f"Reference {ref['label']}{mark}: {ref['source']}." + (f" Note: {ref['note']}." if ref["note"] else "")
        )
    if results["missing"]:
        notes.append(f"Missing (not found in {results['data_root']}): {', '.join(results['missing'])}.")
    return "\n".join(lines + notes) + "\n"


def to_csv(results: Mapping[str, Any]) -> str:
    header, rows = table_rows(results)
    missing = [[name, "missing"] for name in results["missing"]]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows([header, *rows, *missing])
    return buffer.getvalue()


def write_results(results: Mapping[str, Any], out: Path) -> None:
    """Print the table and write OUT/results.md, results.csv and results.json."""
    markdown = to_markdown(results)
    print(markdown, flush=True)
    write_text(markdown, out / "results.md")
    write_text(to_csv(results), out / "results.csv")
    write_json(results, out / "results.json")
