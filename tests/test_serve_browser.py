"""The demo page of ``serve`` in a real headless Chromium (the system's package, driven by Playwright; no
simulated DOM): a generated photo uploaded shows its map and cutout at the photo's size, the threshold slider makes
the map hard, a file that is not an image shows the server's error in the page."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("fastapi")
sync_api = pytest.importorskip("playwright.sync_api")

from serve_helpers import serving, write_photo  # noqa: E402
from serve_page import VIEWPORT, choose_not_an_image, launch_chromium, move_threshold, show_photo  # noqa: E402


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_demo_page_in_chromium(spread_checkpoint: Path, tmp_path: Path) -> None:
    import torch

    from ignite_r3net.options.serve import ServeOptions
    from ignite_r3net.serve.app import create_app
    from ignite_r3net.serve.model import load_served_model

    options = ServeOptions(checkpoint=str(spread_checkpoint))
    app = create_app(load_served_model(options, torch.device("cpu")), options)
    photo = write_photo(tmp_path / "photo.png", 96, 72, seed=4)
    (tmp_path / "notes.txt").write_text("not a picture\n")
    with serving(app) as url, sync_api.sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            shown = show_photo(page, url, photo)
            moved = move_threshold(page)
            page.screenshot(path=str(tmp_path / "demo.png"), full_page=True)
            error = choose_not_an_image(page, tmp_path / "notes.txt")
        finally:
            browser.close()
    assert shown["sizes"] == {"photo": [96, 72], "map": [96, 72], "cutout": [96, 72]}
    assert "resnet18" in shown["model"] and "cpu" in shown["model"]
    assert shown["timing"].startswith("server: map ") and shown["timing"].endswith(" ms")
    assert shown["downloads"] == ["photo-map.png", "photo-cutout.png"]
    assert len(shown["map_levels"]) > 2  # the soft map: many gray levels
    assert moved["threshold"] != "soft" and set(moved["map_levels"]) <= {0, 255}  # the hard map
    assert error == "error: the upload is not an image (JPEG, PNG, WebP, BMP, TIFF, GIF ...)"
    assert (tmp_path / "demo.png").stat().st_size > 10_000
