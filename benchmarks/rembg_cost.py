"""What rembg's 320x320 resize costs: a checkpoint's cutouts by ``predict --cutout`` at the image's own size
(and with ``--size 320``: the resize without rembg's min-max scaling) beside the same checkpoint's
``export --for rembg`` file run by rembg (``remove`` with a ``u2net_custom`` session: every image resized to
320x320, aspect not kept, the mask min-max scaled and resized back), every alpha channel scored against the
ground-truth masks with ``evaluate --maps`` (max F and MAE), side by side.

    python benchmarks/rembg_cost.py --checkpoint CKPT --data data/quickstart/val --scale 6

``--data`` is a data set folder (MSRA10K layout: IMAGE.jpg beside its mask IMAGE.png, or DUTS'
images/masks folders); ``--scale N`` scores it a second time with every image and mask enlarged N times
(bicubic and nearest), as large photos of the same scenes. Needs rembg (``pip install -e ".[rembg]"``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ignite_r3net.data.folder import list_pairs  # noqa: E402

METRICS = ("maxF", "mae")


def run_py(*args: str) -> str:
    """``python run.py ARGS`` on the CPU; its output, or the error it ended with."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, str(REPO / "run.py"), *args], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"run.py {' '.join(args)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc.stdout


def copy_set(pairs: list[tuple[Path, Path]], out: Path, scale: int) -> tuple[Path, Path]:
    """The images and masks of ``pairs`` in ``out``/images and ``out``/masks, enlarged ``scale`` times."""
    images, masks = out / "images", out / "masks"
    images.mkdir(parents=True)
    masks.mkdir()
    for image_path, mask_path in pairs:
        with Image.open(image_path) as image, Image.open(mask_path) as mask:
            size = (image.width * scale, image.height * scale)
            image.convert("RGB").resize(size, Image.Resampling.BICUBIC).save(images / f"{image_path.stem}.png")
            mask.convert("L").resize(size, Image.Resampling.NEAREST).save(masks / f"{image_path.stem}.png")
    return images, masks


def alpha_maps(cutouts: list[tuple[str, Image.Image]], out: Path) -> Path:
    """The alpha channel of each cutout, written as ``out``/STEM.png (an 8-bit map)."""
    out.mkdir(parents=True)
    for stem, cutout in cutouts:
        cutout.getchannel("A").save(out / f"{stem}.png")
    return out


def score(maps: Path, masks: Path, json_path: Path) -> dict[str, float]:
    run_py("evaluate", "--maps", str(maps), "--gt", str(masks), "--json", str(json_path))
    (row,) = json.loads(json_path.read_text()).values()
    return {m: float(row[m]) for m in METRICS}


SIDES = ("predict", "predict-320", "rembg")


def predict_cutouts(images: Path, checkpoint: str, out: Path, *options: str) -> list[tuple[str, Image.Image]]:
    run_py("predict", "--checkpoint", checkpoint, "--input", str(images), "--output", str(out), "--cutout", *options)
    return [(p.stem, Image.open(p)) for p in sorted(out.glob("*.png"))]


def one_set(name: str, images: Path, masks: Path, checkpoint: str, session: Any, out: Path) -> dict[str, Any]:
    """max F and MAE of predict's cutouts at full resolution and at 320x320 (``--size 320``: the resize
    without rembg's min-max scaling), and of rembg's, on one set of images."""
    import rembg

    cutouts = {
        "predict": predict_cutouts(images, checkpoint, out / name / "predict"),
        "predict-320": predict_cutouts(images, checkpoint, out / name / "predict-320", "--size", "320"),
        "rembg": [(p.stem, rembg.remove(Image.open(p), session=session)) for p in sorted(images.glob("*.png"))],
    }
    widths, heights = zip(*(im.size for _, im in cutouts["predict"]))
    sizes = f"{min(widths)}..{max(widths)} x {min(heights)}..{max(heights)}"
    row: dict[str, Any] = {"images": len(cutouts["predict"]), "sizes": sizes}
    for side in SIDES:
        maps = alpha_maps(cutouts[side], out / name / f"maps-{side}")
        row[side] = score(maps, masks, out / name / f"{side}.json")
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="the model to score (a checkpoint file)")
    parser.add_argument("--data", required=True, help="a data set folder: images and their masks")
    parser.add_argument("--scale", type=int, default=6, help="also score the set enlarged N times (0: not); default: 6")
    parser.add_argument("--json", help="write the figures as JSON to FILE; default: printed only")
    parser.add_argument("--keep", help="keep the maps and files in DIR; default: a temporary folder")
    args = parser.parse_args(argv)
    pairs = list_pairs(args.data)
    with tempfile.TemporaryDirectory(prefix="rembg_cost_") as tmp:
        out = Path(args.keep or tmp)
        # rembg >= 2.0.75 reads a custom model only from inside U2NET_HOME
        os.environ["U2NET_HOME"] = str(out)
        model = out / "r3net-rembg.onnx"
        run_py("export", "--checkpoint", args.checkpoint, "--format", "onnx", "--for", "rembg", "--output", str(model))
        import rembg

        session = rembg.new_session("u2net_custom", model_path=str(model))
        results = {}
        for name, scale in (("as-is", 1), (f"x{args.scale}", args.scale)):
            if scale > 0 and name not in results:
                images, masks = copy_set(pairs, out / name / "data", scale)
                results[name] = one_set(name, images, masks, args.checkpoint, session, out)
    print("| set | images | width x height | max F: predict, --size 320, rembg | MAE: predict, --size 320, rembg |")
    print("|---|--:|---|---|---|")
    for name, row in results.items():
        figures = " | ".join(", ".join(f"{row[side][m]:.4f}" for side in SIDES) for m in METRICS)
        print(f"| {name} | {row['images']} | {row['sizes']} | {figures} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
