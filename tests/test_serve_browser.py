"""The demo page of ``serve`` in a real headless Chromium (the system's package, driven by Playwright; no
simulated DOM): a generated photo uploaded shows its map and cutout at the photo's size after one model run, the
"refine edges" box gives the server's refined colours, a background is composited, the threshold slider makes the map
hard (none of them a model run), a file that is not an image shows the server's error in the page.

Without the system's Chromium the test skips, naming the install command, so that the README's test command
passes on a fresh machine; under CI (``CI=true``, which ``.ci/run`` sets and where it installs Chromium) a missing
browser fails it instead."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("fastapi")
sync_api = pytest.importorskip("playwright.sync_api")

from serve_helpers import serving, write_photo  # noqa: E402
from serve_page import (  # noqa: E402
    CHROMIUM,
    VIEWPORT,
    choose_background,
    choose_not_an_image,
    launch_chromium,
    move_threshold,
    set_refine,
    show_photo,
    shown_pixels,
)


def require_chromium(browser: str = CHROMIUM) -> None:
    """Skip without ``browser``, saying how to install it; fail instead under CI, which must run the test."""
    if Path(browser).is_file():
        return
    missing = f"{browser} is missing: apt-get install -y chromium (or set CHROMIUM to a Chromium binary)"
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"{missing}; CI=true runs the browser test (.ci/run installs Chromium)", pytrace=False)
    pytest.skip(missing)


def test_a_missing_chromium_skips_the_browser_test_but_fails_it_under_ci(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = str(tmp_path / "no-chromium")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install -y chromium"):
        require_chromium(missing)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true runs the browser test"):
        require_chromium(missing)
    present = tmp_path / "chromium"
    present.write_text("")
    require_chromium(str(present))  # neither skips nor fails


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_demo_page_in_chromium(spread_checkpoint: Path, tmp_path: Path) -> None:
    require_chromium()
    import httpx
    import torch

    from ignite_r3net.options.serve import ServeOptions
    from ignite_r3net.serve.app import create_app
    from ignite_r3net.serve.model import load_served_model

    options = ServeOptions(checkpoint=str(spread_checkpoint))
    app = create_app(load_served_model(options, torch.device("cpu")), options)
    photo = write_photo(tmp_path / "photo.png", 96, 72, seed=4)
    (tmp_path / "notes.txt").write_text("not a picture\n")
    lines: list[str] = []
    with serving(app, lines.append) as url, sync_api.sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            shown = show_photo(page, url, photo)
            plain = shown_pixels(page, "cutout")
            set_refine(page, True)
            refined = shown_pixels(page, "cutout")
            choose_background(page, "white")
            over_white = shown_pixels(page, "cutout")
            moved = move_threshold(page)
            health = httpx.get(f"{url}/healthz").json()
            posts = [line for line in lines if " POST /predict" in line]
            page.screenshot(path=str(tmp_path / "demo.png"), full_page=True)
            error = choose_not_an_image(page, tmp_path / "notes.txt")
        finally:
            browser.close()
        served = httpx.post(
            f"{url}/predict",
            params={"output": "cutout", "refine": "true"},
            files={"image": ("photo.png", photo.read_bytes())},
        )
    assert shown["sizes"] == {"photo": [96, 72], "map": [96, 72], "cutout": [96, 72]}
    assert "resnet18" in shown["model"] and "cpu" in shown["model"]
    assert re.fullmatch(r"server: \d+ ms \(one model run; the rest is composed here\)", shown["timing"]), shown
    assert shown["downloads"] == ["photo-map.png", "photo-cutout.png"]
    assert len(shown["map_levels"]) > 2  # the soft map: many gray levels
    assert moved["threshold"] != "soft" and set(moved["map_levels"]) <= {0, 255}  # the hard map
    # one model run for the photo; the refinement, the background and the threshold cost none
    assert health["forward_passes"] == 1 and len(posts) == 1, (health, lines)
    # the page's cutouts: the photo's pixels, then the server's refined colours (read back through canvases,
    # which keep colour premultiplied by alpha: compared where the alpha is at least a half)
    opaque = plain[..., 3] >= 128
    with Image.open(photo) as original:
        assert np.abs(plain[..., :3].astype(int) - np.asarray(original))[opaque].max() <= 1
    expected = np.asarray(Image.open(io.BytesIO(served.content))).astype(int)
    np.testing.assert_array_equal(refined[..., 3], plain[..., 3])
    assert np.abs(refined[..., :3].astype(int) - expected[..., :3])[opaque].max() <= 1
    assert (refined[..., :3] != plain[..., :3])[opaque].any()  # the checkbox changed the colours
    # over white: opaque, the refined cutout laid over white
    alpha = expected[..., 3:]
    assert (over_white[..., 3] == 255).all()
    white = (alpha * expected[..., :3] + (255 - alpha) * 255 + 127) // 255
    assert np.abs(over_white[..., :3].astype(int) - white).max() <= 2
    assert error == "error: the upload is not an image (JPEG, PNG, WebP, BMP, TIFF, GIF ...)"
    assert (tmp_path / "demo.png").stat().st_size > 10_000
