"""``compare``'s curves: precision-recall and F-measure against threshold, a method's line alike in every
plot; drawn with matplotlib's ``Figure`` (no display, no ``pyplot``, no global backend).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..atomic_files import atomic_output

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# line colours (matplotlib's tab10), in the order methods are given; after ten the styles change
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
LINESTYLES = ("-", "--", "-.", ":")
FIGSIZE = (4.8, 4.0)  # inches
DPI = 120

Curve = Mapping[str, Sequence[float]]  # "precision", "recall", "fmeasure": 256 values, threshold 0..255


def method_style(index: int) -> dict[str, Any]:
    """Colour and line style of the ``index``-th method (as given on the command line)."""
    return {"color": COLOURS[index % len(COLOURS)], "linestyle": LINESTYLES[(index // len(COLOURS)) % len(LINESTYLES)]}


def plot_pr(lines: Sequence[tuple[str, int, Curve]], dataset: str, stem: Path) -> list[Path]:
    """Precision against recall, one line per ``(method, style index, curve)``, into ``stem.png/.svg``."""
    fig, ax = _figure(dataset, "Recall", "Precision")
    for name, index, curve in lines:
        ax.plot(curve["recall"], curve["precision"], label=name, linewidth=1.6, **method_style(index))
    ax.set_xlim(0, 1)
    ax.set_ylim(bottom=max(0.0, ax.get_ylim()[0]), top=1.005)
    ax.legend(loc="lower left", fontsize=8)
    return save_figure(fig, stem)


def plot_fm(lines: Sequence[tuple[str, int, Curve]], dataset: str, stem: Path) -> list[Path]:
    """F-measure against threshold (0..255), as ``plot_pr``."""
    fig, ax = _figure(dataset, "Threshold", "F-measure")
    for name, index, curve in lines:
        ax.plot(range(len(curve["fmeasure"])), curve["fmeasure"], label=name, linewidth=1.6, **method_style(index))
    ax.set_xlim(0, 255)
    ax.set_ylim(bottom=max(0.0, ax.get_ylim()[0]), top=min(1.005, ax.get_ylim()[1]))
    ax.legend(loc="best", fontsize=8)
    return save_figure(fig, stem)


def _figure(title: str, xlabel: str, ylabel: str) -> tuple[Figure, Axes]:
    # imported when a figure is drawn: matplotlib is slow to import, and compare imports this module
    # before checking its inputs, which should answer at once
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="tight")
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, color="#dddddd", linewidth=0.6)
    return fig, ax


def save_figure(fig: Figure, stem: Path) -> list[Path]:
    """``stem.png`` and ``stem.svg``, atomically; without dates, fixed ids: equal curves, equal files."""
    paths = [stem.with_name(stem.name + ".png"), stem.with_name(stem.name + ".svg")]
    import matplotlib  # see _figure

    with matplotlib.rc_context({"svg.hashsalt": "ignite_r3net"}):
        for path in paths:
            kind = path.suffix[1:]
            metadata = {"Date": None} if kind == "svg" else {"Software": None}
            with atomic_output(path) as tmp:
                fig.savefig(tmp, format=kind, metadata=metadata)
    return paths
