#!/usr/bin/env python
"""Write docs/soft_edge.png, the before/after picture of docs/deployment.md: a soft edge (fur-like strands) of a
generated orange subject photographed against green, cut out with its true alpha and laid over white, plain (the
photo's pixels: a green fringe) and with ``--refine-foreground`` (the subject's estimated colours).

    python docs/soft_edge_example.py [--out docs/soft_edge.png]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SIZE = 160  # each panel, in pixels
ZOOM = 2  # the panels show a crop of the soft edge, enlarged


def soft_edge_photo(seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """An orange subject with fur-like strands over green: the photo (H, W, 3) and its true alpha (H, W), uint8."""
    rng = np.random.default_rng(seed)
    side = SIZE // ZOOM * 2
    mask = Image.new("L", (side, side), 0)
    draw = ImageDraw.Draw(mask)
    draw.ellipse((-side // 2, side // 4, side // 2 + side // 6, side + side // 2), fill=255)
    for _ in range(140):  # strands leaving the edge
        angle = rng.uniform(-1.3, 0.2)
        x, y = rng.uniform(side * 0.35, side * 0.55), rng.uniform(side * 0.35, side * 0.95)
        length = rng.uniform(8, 28)
        draw.line((x, y, x + length * np.cos(angle), y + length * np.sin(angle)), fill=255, width=1)
    alpha = np.asarray(mask.filter(ImageFilter.GaussianBlur(1.4)), dtype=np.float64) / 255
    yy, xx = np.mgrid[:side, :side] / side
    orange = np.stack([230 - 30 * yy, 120 + 40 * xx, 40 + 10 * yy], -1) + rng.normal(0, 6, (side, side, 3))
    green = np.stack([40 + 30 * xx, 170 - 20 * yy, 50 + 10 * xx], -1) + rng.normal(0, 6, (side, side, 3))
    photo = alpha[..., None] * orange + (1 - alpha[..., None]) * green
    return np.clip(np.round(photo), 0, 255).astype(np.uint8), np.round(alpha * 255).astype(np.uint8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "soft_edge.png"))
    args = parser.parse_args()
    import torch

    from ignite_r3net.inference.cutout import cutout_image

    photo, alpha = soft_edge_photo()
    image, mask = torch.from_numpy(photo).permute(2, 0, 1).contiguous(), torch.from_numpy(alpha)
    panels = {
        "photo": Image.fromarray(photo),
        "cutout on white": cutout_image(image, mask, background=(255, 255, 255)),
        "refined, on white": cutout_image(image, mask, refine=True, background=(255, 255, 255)),
    }
    crop = (SIZE // ZOOM // 2, SIZE // ZOOM // 2, SIZE // ZOOM // 2 + SIZE // ZOOM, SIZE // ZOOM // 2 + SIZE // ZOOM)
    caption = 18
    sheet = Image.new("RGB", (3 * SIZE + 4 * 8, SIZE + caption + 8), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for i, (name, panel) in enumerate(panels.items()):
        x = 8 + i * (SIZE + 8)
        sheet.paste(panel.crop(crop).resize((SIZE, SIZE), Image.Resampling.NEAREST), (x, caption))
        draw.text((x, 3), name, fill=(0, 0, 0))
    sheet.save(args.out, optimize=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
