"""The visual comparison of ``compare``: which images it shows, and when it must be drawn again.

* **Choice.** ``--show N`` takes the N images on which the methods disagree most: the largest
  difference between the methods' MAE on the image (with one method, its largest MAE: its failures),
  ties broken by file name, so the choice is the same on every run. The per-image MAE is the one
  ``compare``'s scoring keeps for ``per_image/<dataset>.csv`` (the ``--protocol``'s MAE of the map,
  resized to its mask, against the mask): no pass of its own. ``--show-stems`` names the images
  instead, in its order.
* **Cache.** ``OUT/figures/visual_<dataset>.json`` records what was drawn: the key (the chosen stems,
  every shown file's path, size and modification time, the columns' names and order, and the
  drawing code and library versions), the stems and their MAEs. It is written after the PNG and
  PDF, so a rerun with the same key keeps the figure and an interrupted one draws it again."""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..atomic_files import write_json
from ..content_key import ContentKey
from ..data.folder import list_pairs
from ..errors import DataError, OptionError, listing, note
from . import visual_figure
from .maps import files_by_stem
from .visual_figure import Cell, draw_visual_comparison

__all__ = [
    "FIGURE_FORMAT",
    "FigureData",
    "figure_data",
    "check_stems",
    "draw_figures",
    "choose_stems",
    "figure_row",
]

FIGURE_FORMAT = 1  # bump when the figure's record changes


@dataclass(frozen=True)
class FigureData:
    """What the figure of one data set can show: its masks and images by stem (images empty when
    the data set is a masks folder), each method's maps by stem, in command-line order, and each
    method's per-image MAE by stem."""

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
    """The figure's inputs for data set ``name``: its masks folder, the folder ``list_pairs`` reads
    its images from (None: a masks folder alone), each method's matched ``(map, mask)`` files and
    its per-image MAE (``{method: {mask stem: MAE}}``, from the scoring)."""
    images: dict[str, Path] = {}
    if data is not None:
        try:
            images = {mask.stem: image for image, mask in list_pairs(data)}
        except DataError:  # images that do not pair with the masks: the figure goes without them
            images = {}
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
    """Draw (or keep) ``out/figures/visual_<dataset>.png`` and ``.pdf`` for every data set: ``show``
    images chosen as the module says, or ``stems`` (those of each data set, in their order)."""
    for figure in figures:
        chosen = [s for s in stems if s in figure.masks] if stems is not None else choose_stems(figure.mae, show)
        if not chosen:
            why = "none of --show-stems is" if stems else "no map is"
            note(f"no figure of {figure.name}: {why} among its images")
            continue
        _draw_or_keep(figure, chosen, out / "figures" / f"visual_{figure.name}")


def choose_stems(maes: Mapping[str, Mapping[str, float]], count: int) -> list[str]:
    """The ``count`` stems where the methods' MAEs (``{method: {stem: mae}}``) differ most, ties
    broken by stem; with one method, those where its MAE is largest."""
    per_stem: dict[str, list[float]] = {}
    for values in maes.values():
        for stem, mae in values.items():
            per_stem.setdefault(stem, []).append(mae)
    several = sum(1 for values in maes.values() if values) > 1

    def score(values: list[float]) -> float:
        return max(values) - min(values) if several else max(values)

    ranked = sorted(per_stem, key=lambda stem: (-score(per_stem[stem]), stem))
    return ranked[:count]


def _draw_or_keep(figure: FigureData, stems: list[str], stem: Path) -> None:
    headers = (["Image"] if figure.images else []) + ["GT", *figure.maps]
    rows = [figure_row(figure, s) for s in stems]
    key = _figure_key(headers, stems, rows)
    record = stem.with_name(stem.name + ".json")
    drawn = [stem.with_name(stem.name + suffix) for suffix in (".png", ".pdf")]
    if _recorded_key(record) == key and all(p.is_file() for p in drawn):
        print(f"figure of {figure.name}: kept {drawn[0].parent}/{stem.name}.png/.pdf (nothing changed)", flush=True)
        return
    if not figure.images:
        note(
            f"figure of {figure.name}: no image column (the data set was given as a masks folder without "
            "images beside it, or its images do not pair with its masks: see check-data)"
        )
    draw_visual_comparison(headers, rows, stem)
    mae = {s: {m: values[s] for m, values in figure.mae.items() if s in values} for s in stems}
    write_json({"format": FIGURE_FORMAT, "key": key, "columns": headers, "stems": stems, "mae": mae}, record)
    print(f"figure of {figure.name}: {len(stems)} image(s) drawn to {stem}.png/.pdf", flush=True)


def figure_row(figure: FigureData, stem: str) -> list[Cell]:
    """The cells of ``stem``'s row: its image (when the data set has images), its mask, each method's map."""
    cells = [Cell("image", figure.images.get(stem))] if figure.images else []
    cells.append(Cell("mask", figure.masks[stem]))
    return cells + [Cell("map", maps.get(stem)) for maps in figure.maps.values()]


def _figure_key(headers: list[str], stems: list[str], rows: list[list[Cell]]) -> str:
    """SHA-256 over the columns, the stems, every shown file (path, size, mtime; "missing" for an
    empty cell) and the drawing code and the versions of the libraries it draws with."""
    code = Path(inspect.getsourcefile(visual_figure) or "")
    key = ContentKey("figure", FIGURE_FORMAT).add_values([headers, stems]).add_sources([code])
    key.add_libraries(["matplotlib", "pillow", "numpy"])
    return key.add_files(cell.path for row in rows for cell in row).hexdigest()


def _recorded_key(record: Path) -> str | None:
    try:
        return json.loads(record.read_text(encoding="utf-8")).get("key")
    except (OSError, ValueError, AttributeError):
        return None
