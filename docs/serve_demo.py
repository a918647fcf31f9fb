#!/usr/bin/env python
"""Write docs/serve_demo.png, the screenshot of the demo page of ``serve`` in docs/serve.md, with the page-driving
code of ``tests/test_serve_browser.py`` (``tests/serve_page.py``): headless Chromium from the system's packages.

    python docs/serve_demo.py [--checkpoint CKPT] [--photo PHOTO] [--out docs/serve_demo.png]

Without ``--checkpoint``, a resnet18 R3Net with seeded random weights (the tests' spread model: its maps show the
page, not a trained model); without ``--photo``, a generated one."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from helpers import save_spread_r3net  # noqa: E402
from serve_helpers import serving, write_photo  # noqa: E402
from serve_page import VIEWPORT, launch_chromium, show_photo  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", help="the model (default: the tests' spread model)")
    parser.add_argument("--photo", help="the photo (default: a generated 320x240 one)")
    parser.add_argument("--out", default=str(REPO / "docs" / "serve_demo.png"))
    args = parser.parse_args()
    import torch
    from playwright.sync_api import sync_playwright

    from ignite_r3net.options.serve import ServeOptions
    from ignite_r3net.serve.app import create_app
    from ignite_r3net.serve.model import load_served_model

    out = Path(args.out).resolve()
    photo = Path(args.photo).resolve() if args.photo else None
    checkpoint = args.checkpoint and os.path.abspath(args.checkpoint)
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)  # the page names the model as given: no temporary folder in the picture
        checkpoint = checkpoint or str(save_spread_r3net(Path("r3net-spread.pt")))
        photo = photo or write_photo(Path("photo.png"), 320, 240, seed=4)
        options = ServeOptions(checkpoint=checkpoint, max_batch=2)
        app = create_app(load_served_model(options, torch.device("cpu")), options)
        with serving(app) as url, sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            try:
                page = browser.new_page(viewport=VIEWPORT)
                shown = show_photo(page, url, photo)
                page.screenshot(path=str(out), full_page=True)
            finally:
                browser.close()
    print(f"wrote {out}: the page with a {shown['sizes']['photo'][0]}x{shown['sizes']['photo'][1]} photo")


if __name__ == "__main__":
    main()
