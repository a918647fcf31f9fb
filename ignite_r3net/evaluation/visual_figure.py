"""Drawing the visual comparison of ``compare``: rows of images, one column per kind (the image, the
ground truth, each method's map), the column names on top.

Sized for print: the figure is a two-column paper's text width (7.16 in) and every cell is resampled
to 300 pixels per inch of its printed size, so the PNG (300 dpi) shows each cell pixel for pixel and
the PDF embeds exactly those pixels (``interpolation="none"``) under vector text and lines, with
TrueType fonts (Type 42: what publishers' PDF checks accept). All rows have one height; each cell
keeps its image's aspect and is centred in its column. A map that is missing is a grey cell with a
cross and the word "missing".

Drawn with matplotlib's object API (``Figure``), as ``plots`` draws the curves: no display, no
``pyplot``, no global backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np
from PIL import Image

from ..atomic_files import atomic_output
from ..data.decode import load_image, load_mask
from .maps import load_saliency_map

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

__all__ = ["WIDTH_IN", "DPI", "Cell", "draw_visual_comparison", "build_figure", "write_png"]

WIDTH_IN = 7.16  # a two-column paper's text width (IEEE, ACM, CVF), in inches
DPI = 300  # print resolution of the cells
GAP_IN = 0.03  # between cells
HEADER_IN = 0.22  # the row of column names
MAX_ROW_IN = 1.6  # with few columns, rows stop growing here
FONT_SIZE = 8.0
MISSING_FACE, MISSING_LINE = "#e6e6e6", "#a0a0a0"
PNG_LEVEL = 1  # zlib level of the PNG (see write_png)


@dataclass(frozen=True)
class Cell:
    """One picture of a row: ``kind`` is ``image`` (RGB), ``mask`` or ``map``; ``path`` None marks a
    missing map."""

    kind: str
    path: Path | None


def draw_visual_comparison(headers: Sequence[str], rows: Sequence[Sequence[Cell]], stem: Path) -> list[Path]:
    """Draw ``rows`` under ``headers`` (one per column) and write ``stem.png`` and ``stem.pdf``
    atomically; returns their paths."""
    return _save(build_figure(headers, rows), stem)


def build_figure(headers: Sequence[str], rows: Sequence[Sequence[Cell]]) -> Figure:
    """The figure of ``rows`` under ``headers``. Every cell of a row is brought to the size of the
    row's mask."""
    pictures = [_row_pictures(row) for row in rows]
    aspects = [size[1] / size[0] for size in (_row_size(row) for row in pictures)]
    columns = len(headers)
    column_in = (WIDTH_IN - GAP_IN * (columns - 1)) / columns
    row_in = min(MAX_ROW_IN, column_in / max(aspects))
    height_in = HEADER_IN + len(rows) * row_in + (len(rows) - 1) * GAP_IN
    fig = _figure(height_in)
    for j, name in enumerate(headers):
        x = j * (column_in + GAP_IN) + column_in / 2
        size = min(FONT_SIZE, 72 * column_in / (0.6 * max(len(name), 1)))  # long names shrink to their column
        fig.text(x / WIDTH_IN, 1 - HEADER_IN / 2 / height_in, name, ha="center", va="center", fontsize=size)
    for i, (row, aspect) in enumerate(zip(pictures, aspects)):
        top = HEADER_IN + i * (row_in + GAP_IN)
        cell_in = row_in * aspect
        for j, picture in enumerate(row):
            left = j * (column_in + GAP_IN) + (column_in - cell_in) / 2
            box = (left / WIDTH_IN, 1 - (top + row_in) / height_in, cell_in / WIDTH_IN, row_in / height_in)
            _draw_cell(fig, box, picture, (round(row_in * DPI), round(cell_in * DPI)))
    return fig


def _row_pictures(row: Sequence[Cell]) -> list[np.ndarray | None]:
    """The row's pixels: uint8 ``(H, W, 3)`` images and ``(H, W)`` masks and maps, all at the mask's
    size; None for a missing map."""
    mask_index = next(i for i, c in enumerate(row) if c.kind == "mask")
    pictures = [_read(c) for c in row]
    size = pictures[mask_index].shape[:2]  # type: ignore[union-attr]  # the mask is never missing
    return [p if p is None or p.shape[:2] == size else _resize(p, size) for p in pictures]


def _row_size(row: list[np.ndarray | None]) -> tuple[int, int]:
    return next(p.shape[:2] for p in row if p is not None)


def _read(cell: Cell) -> np.ndarray | None:
    if cell.path is None:
        return None
    if cell.kind == "image":  # decoded as the model sees it: RGB, EXIF orientation applied
        return load_image(cell.path).permute(1, 2, 0).numpy()
    if cell.kind == "mask":
        return load_mask(cell.path)[0].numpy()
    return load_saliency_map(cell.path).numpy()


def _resize(picture: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``picture`` resampled to ``size`` (H, W) with Lanczos filtering (it only shows, never scores)."""
    return np.asarray(Image.fromarray(picture).resize((size[1], size[0]), Image.Resampling.LANCZOS))


def _figure(height_in: float) -> Figure:
    # imported here: matplotlib costs ~0.4 s to import (see plots._figure)
    from matplotlib.figure import Figure

    return Figure(figsize=(WIDTH_IN, height_in), dpi=DPI)


Box = tuple[float, float, float, float]  # left, bottom, width, height, as fractions of the figure


def _draw_cell(fig: Figure, box: Box, picture: np.ndarray | None, pixels: tuple[int, int]) -> None:
    """One cell in ``box`` (figure fractions: left, bottom, width, height): the picture resampled to
    ``pixels`` (H, W), or the missing-map mark."""
    ax = fig.add_axes(box)
    ax.set_axis_off()
    if picture is None:
        ax.add_patch(_missing_face())
        ax.plot([0, 1], [0, 1], [0, 1], [1, 0], color=MISSING_LINE, linewidth=0.6)
        ax.text(0.5, 0.5, "missing", ha="center", va="center", fontsize=FONT_SIZE - 1, color="#555555")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        return
    shown = _resize(picture, pixels) if picture.shape[:2] != pixels else picture
    if shown.ndim == 2:  # masks and maps: their gray values as they are, not stretched to their range
        ax.imshow(shown, interpolation="none", aspect="auto", cmap="gray", vmin=0, vmax=255)
    else:
        ax.imshow(shown, interpolation="none", aspect="auto")


def _missing_face() -> Rectangle:
    from matplotlib.patches import Rectangle

    return Rectangle((0, 0), 1, 1, facecolor=MISSING_FACE, edgecolor=MISSING_LINE, linewidth=0.6)


def _save(fig: Figure, stem: Path) -> list[Path]:
    """``stem.png`` (300 dpi) and ``stem.pdf`` (vector, TrueType fonts), each atomically, without
    dates, so equal figures give equal files."""
    import matplotlib

    paths = [stem.with_name(stem.name + ".png"), stem.with_name(stem.name + ".pdf")]
    with matplotlib.rc_context({"pdf.fonttype": 42}):
        with atomic_output(paths[0]) as tmp:
            write_png(fig, tmp)
        with atomic_output(paths[1]) as tmp:
            fig.savefig(tmp, format="pdf", dpi=DPI, metadata={"CreationDate": None})
    return paths


def write_png(fig: Figure, target: Path | BinaryIO) -> None:
    """``fig`` as a 300 dpi PNG. zlib level 1 rather than matplotlib's default (6): photos and soft
    maps shrink little under harder compression (``benchmarks/bench_figure.py``, 6 rows of 300x400
    cells: 1.65x faster to write, and 10% smaller)."""
    fig.savefig(target, format="png", dpi=DPI, metadata={"Software": None}, pil_kwargs={"compress_level": PNG_LEVEL})
