#!/usr/bin/env python
"""A small ``compare`` run on generated data, and the README's picture of its curves.

    python examples/compare_example.py [--out runs/compare_example] [--picture docs/compare_example.png]
                                       [--visual docs/compare_visual_example.jpg]

It writes two synthetic data sets (the ``make-data`` generator, 40 validation images each, MSRA10K
layout), then the maps of three stand-in "methods" made from the masks with different kinds of error
(light blur, heavy blur, noise), runs ``python run.py compare`` on them into ``OUT/comparison`` and
puts the precision-recall and F-measure curves of the first data set side by side in the picture; its
visual comparison (4 images), at a third of its 300 dpi, is the README's second picture. The same
arguments give the same numbers. About 7 s on 2 idle CPU cores.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageFilter

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from ignite_r3net.cli import main as cli_main  # noqa: E402
from ignite_r3net.data.folder import list_pairs  # noqa: E402
from ignite_r3net.data.synthetic import make_synthetic_dataset  # noqa: E402

DATASETS = {"SynthA": 1, "SynthB": 2}  # name: generator seed
METHODS = ("blur-2", "blur-6", "noisy")


def stand_in_map(mask: Image.Image, method: str, rng: np.random.Generator) -> Image.Image:
    """A saliency map a method of the given quality might produce for ``mask``."""
    gt = np.asarray(mask, dtype=np.float64)
    if method == "noisy":
        sal = gt * 0.55 + rng.normal(60, 45, gt.shape)
    else:
        radius = float(method.split("-")[1])
        blurred = np.asarray(mask.filter(ImageFilter.GaussianBlur(radius)), dtype=np.float64)
        sal = blurred * 0.9 + rng.normal(10, 12 * radius, gt.shape)
    return Image.fromarray(np.clip(sal, 0, 255).astype(np.uint8))


def make_inputs(root: Path) -> tuple[list[str], list[str]]:
    """The data sets and the stand-in methods' maps; returns the ``--datasets`` and ``--methods``."""
    rng = np.random.default_rng(0)
    datasets = []
    for name, seed in DATASETS.items():
        _, val = make_synthetic_dataset(root / "data" / name, n_train=1, n_val=40, size=(96, 160), seed=seed)
        datasets.append(f"{name}={val}")
        for _, mask_path in list_pairs(val):
            with Image.open(mask_path) as mask:
                for method in METHODS:
                    folder = root / "methods" / method / name
                    folder.mkdir(parents=True, exist_ok=True)
                    stand_in_map(mask.convert("L"), method, rng).save(folder / f"{mask_path.stem}.png")
    return datasets, [f"{m}={root / 'methods' / m}" for m in METHODS]


def side_by_side(left: Path, right: Path, out: Path) -> None:
    with Image.open(left) as a, Image.open(right) as b:
        picture = Image.new("RGB", (a.width + b.width, max(a.height, b.height)), "white")
        picture.paste(a.convert("RGB"), (0, 0))
        picture.paste(b.convert("RGB"), (a.width, 0))
    out.parent.mkdir(parents=True, exist_ok=True)
    picture.quantize(colors=64).save(out, optimize=True)  # line art: a small palette keeps the file small


def small_copy(figure: Path, out: Path) -> None:
    """``figure`` at a third of its size as a JPEG (photos and noisy maps: a palette would not keep it small)."""
    with Image.open(figure) as image:
        small = image.convert("RGB").resize((image.width // 3, image.height // 3), Image.Resampling.LANCZOS)
    out.parent.mkdir(parents=True, exist_ok=True)
    small.save(out, quality=85, optimize=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(REPO / "runs" / "compare_example"), help="work and output folder")
    parser.add_argument("--picture", default=str(REPO / "docs" / "compare_example.png"), help="the README's PNG")
    parser.add_argument(
        "--visual", default=str(REPO / "docs" / "compare_visual_example.jpg"), help="the README's visual comparison"
    )
    args = parser.parse_args()
    root = Path(args.out)
    datasets, methods = make_inputs(root)
    out = root / "comparison"
    code = cli_main(["compare", "--datasets", *datasets, "--methods", *methods, "--out", str(out), "--show", "4"])
    if code == 0:
        first = next(iter(DATASETS))
        side_by_side(out / "curves" / f"pr_{first}.png", out / "curves" / f"fm_{first}.png", Path(args.picture))
        small_copy(out / "figures" / f"visual_{first}.png", Path(args.visual))
        print(f"pictures written to {args.picture} and {args.visual}")
    return code


if __name__ == "__main__":
    sys.exit(main())
