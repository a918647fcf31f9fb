"""What ``compare``'s visual comparison costs, each part beside its baseline in the same process.

Usage::

    python benchmarks/bench_figure.py [--n-maps 100] [--size 300 400] [--methods 3] [--json FILE]

or, from Python, ``bench_figure()``, which returns:

* ``png_default_s``, ``png_ours_s``, ``png_speedup`` (default / ours) and ``png_default_bytes``,
  ``png_ours_bytes``: the figure (``--show`` rows) written as a 300 dpi PNG with matplotlib's
  default zlib level and with ours (``figures.write_png``);
* ``figure_build_s`` and ``pdf_s``: drawing the figure, and writing its PDF.

The maps are ``bench_metrics.make_maps``' soft predictions (one method), the others the same with
more noise, as methods of different quality; the images are the maps in colour. The figure's rows
are the images ``compare --show`` would choose, from one (untimed) scoring of the maps, whose
per-image MAE is what it chooses by. Each timed part is best of ``repeats``, the parts alternating,
on one torch thread.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import argparse
import contextlib
import io
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from bench_metrics import make_maps
from PIL import Image

from ignite_r3net.evaluation import figures, scoring
from ignite_r3net.options import ProcessOptions

__all__ = ["bench_figure"]


def _write_inputs(root: Path, n_maps: int, size: tuple[int, int], methods: int) -> dict[str, list[tuple[Path, Path]]]:
    """A data set in ``root/set`` (name.jpg beside its mask name.png) and each method's maps in
    ``root/M<k>``; returns ``{method: [(map, mask)]}``."""
    rng = np.random.default_rng(1)
    for folder in ("set", *(f"M{k}" for k in range(methods))):
        (root / folder).mkdir(parents=True)
    files: dict[str, list[tuple[Path, Path]]] = {f"M{k}": [] for k in range(methods)}
    for i, (pred, gt) in enumerate(make_maps(n_maps, size, seed=0)):
        stem = f"{i:04d}"
        mask = (root / "set" / f"{stem}.png").resolve()
        Image.fromarray(gt).save(mask)
        Image.fromarray(np.dstack([pred, 255 - pred, gt // 2])).save(root / "set" / f"{stem}.jpg", quality=90)
        for k in range(methods):
            noisy = np.clip(pred + rng.normal(0, 12.0 * k, pred.shape), 0, 255).astype(np.uint8) if k else pred
            path = (root / f"M{k}" / f"{stem}.png").resolve()
            Image.fromarray(noisy).save(path)
            files[f"M{k}"].append((path, mask))
    return files


def _best(parts: dict[str, Callable[[], Any]], repeats: int) -> dict[str, tuple[float, Any]]:
    """Each part's best time and last result; the parts alternate (ABAB...) so that a busy spell on
    a shared machine hits all of them."""
    best, out = dict.fromkeys(parts, float("inf")), {}
    for _ in range(repeats):
        for name, part in parts.items():
            start = time.perf_counter()
            out[name] = part()
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: (best[name], out[name]) for name in parts}


def _png(fig: Any, ours: bool) -> int:
    buffer = io.BytesIO()
    if ours:
        figures.write_png(fig, buffer)
    else:
        fig.savefig(buffer, format="png", dpi=figures.DPI, metadata={"Software": None})
    return len(buffer.getvalue())


def bench_figure(
    n_maps: int = 100, size: tuple[int, int] = (300, 400), methods: int = 3, rows: int = 6, repeats: int = 3
) -> dict[str, Any]:
    """The figures listed in the module's docstring."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="bench-figure-"))
    try:
        files = _write_inputs(root, n_maps, size, methods)
        cells = list(files.items())
        spec = ProcessOptions().launch_spec()

        with contextlib.redirect_stdout(io.StringIO()):  # its "scored ..." lines
            scores = scoring.score_cells(cells, root / "cache", "standard", spec, progress=False)
        mae = {
            method: {stem: row["mae"] for stem, row in entry["per_image"].items()}
            for (method, _), entry in zip(cells, scores)
        }
        stems = figures.choose_stems(mae, rows)
        data = figures.figure_data("bench", root / "set", root / "set", files, mae)
        figure_rows = [figures.figure_row(data, stem) for stem in stems]
        headers = ["Image", "GT", *files]
        build = _best({"build": lambda: figures.build_figure(headers, figure_rows)}, repeats)["build"]
        fig = build[1]
        png = _best({"default": lambda: _png(fig, ours=False), "ours": lambda: _png(fig, ours=True)}, repeats)
        pdf = _best({"pdf": lambda: fig.savefig(io.BytesIO(), format="pdf", dpi=figures.DPI)}, repeats)["pdf"]
    finally:
        torch.set_num_threads(threads)
        shutil.rmtree(root, ignore_errors=True)
    return {
        "n_maps": n_maps,
        "size": list(size),
        "methods": methods,
        "rows": len(stems),
        "figure_build_s": build[0],
        "png_default_s": png["default"][0],
        "png_ours_s": png["ours"][0],
        "png_speedup": png["default"][0] / png["ours"][0],
        "png_default_bytes": png["default"][1],
        "png_ours_bytes": png["ours"][1],
        "pdf_s": pdf[0],
    }


def format_figure(r: dict[str, Any]) -> str:
    """The one-line summary ``benchmarks/run.py`` prints."""
    return (
        f"figure: {r['methods']} methods x {r['n_maps']} maps of {r['size'][0]}x{r['size'][1]}, "
        f"{r['rows']}-row figure: drawn in {r['figure_build_s']:.2f} s, PNG default {r['png_default_s']:.2f} s "
        f"({r['png_default_bytes'] / 1e6:.2f} MB), ours {r['png_ours_s']:.2f} s ({r['png_ours_bytes'] / 1e6:.2f} MB), "
        f"{r['png_speedup']:.2f}x; PDF {r['pdf_s']:.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-maps", type=int, default=100)
    parser.add_argument("--size", type=int, nargs=2, default=(300, 400))
    parser.add_argument("--methods", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = bench_figure(args.n_maps, tuple(args.size), args.methods)
    print(format_figure(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
