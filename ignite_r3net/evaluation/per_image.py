"""Per-image scores as CSV, to find the images a model fails on: ``evaluate --per-image FILE.csv``
(one row per image of every data set) and ``compare``'s ``OUT/per_image/<dataset>.csv`` (one row
per image, a column per method and metric). Values are written in full (Python's shortest
round-trip form); each is the image's own score as ``SaliencyMetrics.per_image_scores`` defines it."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence

from ..metrics.keys import METRIC_KEYS, PROTOCOL_METRICS, ImageScores


def column_name(metric: str, protocol: str) -> str:
    """A CSV column's name: ``mae``, or ``mae (r3net)`` where the protocol defines it its own way
    (as in ``table.csv``)."""
    return f"{metric} ({protocol})" if metric in PROTOCOL_METRICS[protocol] else metric


def evaluation_csv(datasets: Mapping[str, Sequence[ImageScores]], protocol: str) -> str:
    """``dataset,image,<nine metrics>``: the data sets in the order given, each one's images sorted
    by stem."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["dataset", "image", *(column_name(m, protocol) for m in METRIC_KEYS)])
    for dataset, rows in datasets.items():
        for stem, scores in sorted(rows, key=lambda row: row[0]):
            writer.writerow([dataset, stem, *(repr(scores[m]) for m in METRIC_KEYS)])
    return buffer.getvalue()


def comparison_csv(methods: Mapping[str, Sequence[ImageScores]], metrics: Sequence[str], protocol: str) -> str:
    """``image,<method>/<metric>,...`` for one data set: a row per image any method has (sorted by
    stem), the methods and ``metrics`` in the order given, empty where a method lacks the image."""
    by_method = {method: dict(rows) for method, rows in methods.items()}
    stems = sorted({stem for rows in by_method.values() for stem in rows})
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["image", *(f"{method}/{column_name(m, protocol)}" for method in by_method for m in metrics)])
    for stem in stems:
        cells = [
            repr(by_method[method][stem][m]) if stem in by_method[method] else ""
            for method in by_method
            for m in metrics
        ]
        writer.writerow([stem, *cells])
    return buffer.getvalue()
