"""The names of the numbers ``SaliencyMetrics`` computes, and which of them each protocol defines its
own way. Plain data, without torch: the command line lists them in ``compare --help``."""

from __future__ import annotations

from collections.abc import Mapping

#: Keys of the dict returned by :meth:`SaliencyMetrics.compute`, in reporting order.
METRIC_KEYS = ("mae", "maxF", "meanF", "adpF", "Sm", "maxE", "meanE", "adpE", "wF")

#: The columns of ``compare``'s table unless ``--metrics`` says otherwise: the ones papers print.
DEFAULT_METRICS = ("mae", "maxF", "Sm", "maxE", "wF")

#: The published sets of numbers (``evaluation/paper_numbers.json``) ``compare --reference`` and ``reproduce``
#: print beside ours.
REFERENCE_NAMES = ("r3net-paper", "r3net-released-maps")

#: The metrics a protocol computes its own way; the others keep the standard (PySODMetrics) definitions.
PROTOCOL_METRICS: dict[str, tuple[str, ...]] = {"standard": (), "r3net": ("mae", "maxF")}

#: One image's own scores: (image stem, {metric: value of that image alone}).
ImageScores = tuple[str, Mapping[str, float]]

#: The mark of a column whose values follow the protocol's own definition.
PROTOCOL_MARK = "†"


def canonical_metric(name: str) -> str | None:
    """The key ``name`` stands for in any case (``maxf`` -> ``maxF``), or None."""
    return {key.lower(): key for key in METRIC_KEYS}.get(name.lower())


def protocol_note(protocol: str) -> str | None:
    """The note under a table whose marked columns follow ``protocol``; None when none does."""
    changed = PROTOCOL_METRICS[protocol]
    how = "as the original R3Net code computes them; the other metrics as PySODMetrics"
    return f"{PROTOCOL_MARK} --protocol {protocol}: {' and '.join(changed)} {how}" if changed else None


def protocol_fields(protocol: str) -> dict[str, object]:
    """What a JSON row records about the protocol: nothing for the standard one."""
    changed = PROTOCOL_METRICS[protocol]
    return {"protocol": protocol, "protocol_metrics": list(changed)} if changed else {}
