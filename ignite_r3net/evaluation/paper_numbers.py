"""The published numbers of R3Net that ``reproduce`` and ``compare --reference`` set beside ours,
each with its source (``paper_numbers.json``): ``r3net-paper`` (the paper's table, with CRF) and
``r3net-released-maps`` (the authors' released maps scored by a named public evaluation). A number
no source confirmed is left out: a reference may lack a data set, or every one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from ..errors import warn

REFERENCE_NAMES = ("r3net-paper", "r3net-released-maps")
Results = Mapping[str, Mapping[str, float]]  # dataset -> metric -> value


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
def _file() -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath("paper_numbers.json").read_text(encoding="utf-8"))


def reference(name: str) -> Reference:
    entry = _file()[name]
    return Reference(name, entry["label"], entry["source"], entry["kind"], entry["sets"], entry.get("note", ""))


def reference_for(dataset: str) -> Reference | None:
    """The reference a reproduction of ``dataset`` is held against: the paper's numbers where
    known, else the released maps' public scores; None when neither has the set."""
    for name in REFERENCE_NAMES:
        found = reference(name)
        if dataset in found.sets:
            return found
    return None


PUBLISHED_MARK = "‡"


def published_rows(names: Sequence[str], datasets: Sequence[str]) -> tuple[dict[str, Results], list[str]]:
    """``compare --reference``: a table row per reference (``"R3Net (paper) ‡"`` -> dataset ->
    metric -> value) on the ``datasets`` that name a standard set (any alias), and the notes
    giving each reference's source; warns of a reference without a number for any of them."""
    # imported here: the data package loads numpy, and compare's options (this module's
    # REFERENCE_NAMES) must not, so that --help answers at once
    from ..data.registry import standard_set

    rows: dict[str, Results] = {}
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
