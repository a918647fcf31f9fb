"""``compare``'s figures. The curves: precision-recall and F-measure against threshold, a method's line
alike in every plot. The visual comparison: the images the methods' per-image MAEs disagree on most (or
``--show-stems``), as rows of image, mask and maps at a two-column paper's width, each cell at 300 pixels
per inch of print (PNG, and PDF with TrueType fonts), kept while its recorded key holds. Drawn with
matplotlib's ``Figure``: no display, no ``pyplot``, no global backend choice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
from PIL import Image

from ..atomic_files import atomic_output, write_json
from ..content_key import ContentKey
from ..data.decode import load_image, load_mask
from ..data.folder import list_pairs
from ..errors import DataError, OptionError, listing, note
from .maps import files_by_stem, load_saliency_map
from .scoring import recorded_key

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

FIGURE_FORMAT = 1  # bump when the figure's record changes


@dataclass(frozen=True)
class FigureData:
    """What one data set's figure can show, by stem: masks, images (maybe none), each method's maps and MAEs."""

    name: str
    masks: Mapping[str, Path]
    images: Mapping[str, Path]
    maps: Mapping[str, Mapping[str, Path]]
    mae: Mapping[str, Mapping[str, float]]


def figure_data(
    name: str,
    masks: Path,
    data: Path | None,
    maps: Mapping[str, list[tuple[Path, Path]]],
    mae: Mapping[str, Mapping[str, float]],
) -> FigureData:
    """Data set ``name``'s figure inputs: ``data`` is where ``list_pairs`` finds its images (None: none),
    ``maps`` each method's matched ``(map, mask)`` files."""
    images: dict[str, Path] = {}
    if data is not None:
        try:
            images = {mask.stem: image for image, mask in list_pairs(data)}
        except DataError:  # images that do not pair with the masks: the figure goes without them
            pass
    by_method = {method: {mask.stem: m for m, mask in files} for method, files in maps.items()}
    return FigureData(name, files_by_stem(masks, "ground-truth"), images, by_method, mae)


def check_stems(stems: list[str], masks: Mapping[str, Path]) -> None:
    """``--show-stems``: each must name a mask of some data set (``{name: masks folder}``)."""
    known = set().union(*(files_by_stem(folder, "ground-truth") for folder in masks.values()))
    unknown = [stem for stem in stems if stem not in known]
    if unknown:
        raise OptionError(
            f"--show-stems: no mask of {', '.join(masks)} is named {listing(unknown, 5)} (give file names "
            "without their extension)"
        )


def draw_figures(figures: list[FigureData], show: int, stems: list[str] | None, out: Path) -> None:
    """Draw (or keep) ``out/figures/visual_<dataset>.png/.pdf`` of ``show`` chosen images, or of ``stems``."""
    for figure in figures:
        chosen = [s for s in stems if s in figure.masks] if stems is not None else choose_stems(figure.mae, show)
        if not chosen:
            why = "none of --show-stems is" if stems else "no map is"
            note(f"no figure of {figure.name}: {why} among its images")
            continue
        _draw_or_keep(figure, chosen, out / "figures" / f"visual_{figure.name}")


def choose_stems(maes: Mapping[str, Mapping[str, float]], count: int) -> list[str]:
    """The ``count`` stems where the methods' MAEs (``{method: {stem: mae}}``) differ most (with one
    method, where its MAE is largest), ties broken by stem, so every run chooses the same."""
    per_stem: dict[str, list[float]] = {}
    for values in maes.values():
        for stem, mae in values.items():
            per_stem.setdefault(stem, []).append(mae)
    several = sum(1 for values in maes.values() if values) > 1
    score = {stem: max(values) - min(values) if several else max(values) for stem, values in per_stem.items()}
    return sorted(per_stem, key=lambda stem: (-score[stem], stem))[:count]


def _draw_or_keep(figure: FigureData, stems: list[str], stem: Path) -> None:
    headers = (["Image"] if figure.images else []) + ["GT", *figure.maps]
    rows = [figure_row(figure, s) for s in stems]
    # over the columns, the stems, every shown file and the drawing code and libraries
    content = ContentKey("figure", FIGURE_FORMAT).add_values([headers, stems]).add_sources([Path(__file__)])
    content.add_libraries(["matplotlib", "pillow", "numpy"]).add_files(c.path for row in rows for c in row)
    key = content.hexdigest()
    record = stem.with_name(stem.name + ".json")
    drawn = [stem.with_name(stem.name + suffix) for suffix in (".png", ".pdf")]
    if recorded_key(record) == key and all(p.is_file() for p in drawn):
        print(f"figure of {figure.name}: kept {drawn[0].parent}/{stem.name}.png/.pdf (nothing changed)", flush=True)
        return
    if not figure.images:
        note(
            f"figure of {figure.name}: no image column (the data set was given as a masks folder without "
            "images beside it, or its images do not pair with its masks: see check-data)"
        )
    _save(build_figure(headers, rows), stem)
    # the record last: an interrupted drawing is redone
    mae = {s: {m: values[s] for m, values in figure.mae.items() if s in values} for s in stems}
    write_json({"format": FIGURE_FORMAT, "key": key, "columns": headers, "stems": stems, "mae": mae}, record)
    print(f"figure of {figure.name}: {len(stems)} image(s) drawn to {stem}.png/.pdf", flush=True)


def figure_row(figure: FigureData, stem: str) -> list[Cell]:
    """The cells of ``stem``'s row: its image (when the data set has images), its mask, each method's map."""
    cells = [Cell("image", figure.images.get(stem))] if figure.images else []
    cells.append(Cell("mask", figure.masks[stem]))
    return cells + [Cell("map", maps.get(stem)) for maps in figure.maps.values()]


WIDTH_IN = 7.16  # a two-column paper's text width (IEEE, ACM, CVF), in inches
DPI = 300  # print resolution of the cells
GAP_IN = 0.03  # between cells
HEADER_IN = 0.22  # the row of column names
MAX_ROW_IN = 1.6  # with few columns, rows stop growing here
FONT_SIZE = 8.0
MISSING_FACE, MISSING_LINE = "#e6e6e6", "#a0a0a0"
PNG_LEVEL = 1  # zlib level of the PNG (see write_png)
Box = tuple[float, float, float, float]  # left, bottom, width, height, as fractions of the figure


@dataclass(frozen=True)
class Cell:
    """One picture of a row: ``kind`` is ``image`` (RGB), ``mask`` or ``map``; ``path`` None: a missing map."""

    kind: str
    path: Path | None


def build_figure(headers: Sequence[str], rows: Sequence[Sequence[Cell]]) -> Figure:
    """The figure of ``rows`` under ``headers``: rows of one height, each cell at its mask's aspect, centred."""
    pictures = [_row_pictures(row) for row in rows]
    shapes = [next(p for p in row if p is not None).shape for row in pictures]
    aspects = [shape[1] / shape[0] for shape in shapes]
    columns = len(headers)
    column_in = (WIDTH_IN - GAP_IN * (columns - 1)) / columns
    row_in = min(MAX_ROW_IN, column_in / max(aspects))
    height_in = HEADER_IN + len(rows) * row_in + (len(rows) - 1) * GAP_IN
    from matplotlib.figure import Figure  # here: matplotlib costs ~0.4 s to import (see _figure)

    fig = Figure(figsize=(WIDTH_IN, height_in), dpi=DPI)
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
    """The row's uint8 pixels at the mask's size (``(H, W, 3)`` image, ``(H, W)`` mask and maps; None: missing)."""
    mask_index = next(i for i, c in enumerate(row) if c.kind == "mask")
    pictures = [_read(c) for c in row]
    size = pictures[mask_index].shape[:2]  # type: ignore[union-attr]  # the mask is never missing
    return [p if p is None or p.shape[:2] == size else _resize(p, size) for p in pictures]


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


def _draw_cell(fig: Figure, box: Box, picture: np.ndarray | None, pixels: tuple[int, int]) -> None:
    """One cell in ``box``: the picture resampled to ``pixels`` (H, W), or the missing-map mark."""
    ax = fig.add_axes(box)
    ax.set_axis_off()
    if picture is None:
        from matplotlib.patches import Rectangle

        ax.add_patch(Rectangle((0, 0), 1, 1, facecolor=MISSING_FACE, edgecolor=MISSING_LINE, linewidth=0.6))
        ax.plot([0, 1], [0, 1], [0, 1], [1, 0], color=MISSING_LINE, linewidth=0.6)
        ax.text(0.5, 0.5, "missing", ha="center", va="center", fontsize=FONT_SIZE - 1, color="#555555")
        ax.set(xlim=(0, 1), ylim=(0, 1))
        return
    shown = _resize(picture, pixels) if picture.shape[:2] != pixels else picture
    # masks and maps: their gray values as they are, not stretched to their range
    gray: dict[str, Any] = {"cmap": "gray", "vmin": 0, "vmax": 255} if shown.ndim == 2 else {}
    ax.imshow(shown, interpolation="none", aspect="auto", **gray)


def _save(fig: Figure, stem: Path) -> None:
    """``stem.png`` and ``stem.pdf`` (TrueType fonts: Type 42, as publishers' checks want), atomically and
    without dates, so equal figures give equal files."""
    import matplotlib

    paths = [stem.with_name(stem.name + ".png"), stem.with_name(stem.name + ".pdf")]
    with matplotlib.rc_context({"pdf.fonttype": 42}):
        with atomic_output(paths[0]) as tmp:
            write_png(fig, tmp)
        with atomic_output(paths[1]) as tmp:
            fig.savefig(tmp, format="pdf", dpi=DPI, metadata={"CreationDate": None})


def write_png(fig: Figure, target: Path | BinaryIO) -> None:
    """``fig`` as a 300 dpi PNG at zlib level 1, not matplotlib's 6: photos and soft maps shrink little
    under harder compression (``benchmarks/bench_figure.py``: 1.65x faster to write, and 10% smaller)."""
    fig.savefig(target, format="png", dpi=DPI, metadata={"Software": None}, pil_kwargs={"compress_level": PNG_LEVEL})


# line colours (matplotlib's tab10), in the order methods are given; after ten the styles change
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
LINESTYLES = ("-", "--", "-.", ":")
CURVE_SIZE, CURVE_DPI = (4.8, 4.0), 120  # inches, dots per inch

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

    fig = Figure(figsize=CURVE_SIZE, dpi=CURVE_DPI, layout="tight")
    ax = fig.add_subplot()
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
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
