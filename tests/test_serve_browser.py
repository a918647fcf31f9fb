"""The demo page of ``serve`` in a real headless Chromium (the system's package, driven by Playwright; no
simulated DOM): a generated photo uploaded shows its map and cutout at the photo's size, the threshold slider makes
the map hard, a file that is not an image shows the server's error in the page.

Without the system's Chromium the test skips, naming the install command, so that the README's test command
passes on a fresh machine; under CI (``CI=true``, which ``.ci/run`` sets and where it installs Chromium) a missing
browser fails it instead."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
sync_api = pytest.importorskip("playwright.sync_api")

from serve_helpers import serving, write_photo  # noqa: E402
from serve_page import (  # noqa: E402
    CHROMIUM,
    VIEWPORT,
    choose_not_an_image,
    launch_chromium,
    move_threshold,
    show_photo,
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
