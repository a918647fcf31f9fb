"""Driving the demo page of ``serve`` in a real headless Chromium (Playwright on the system's browser,
``/usr/bin/chromium`` or ``$CHROMIUM``): shared by ``tests/test_serve_browser.py`` and ``docs/serve_demo.py``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
VIEWPORT = {"width": 1100, "height": 540}

_LOADED = """ids => ids.every(id => {
    const image = document.getElementById(id);
    return image.getAttribute("src") && image.complete && image.naturalWidth > 0;
})"""
_SIZES = """() => Object.fromEntries(["photo", "map", "cutout"].map(kind => {
    const image = document.getElementById(kind + "-img");
    return [kind, [image.naturalWidth, image.naturalHeight]];
}))"""


def launch_chromium(playwright: Any) -> Any:
    """Headless Chromium from the system's packages (Playwright's own browsers are never downloaded)."""
    if not Path(CHROMIUM).is_file():
        raise FileNotFoundError(f"{CHROMIUM} is missing: apt-get install -y chromium (or set CHROMIUM)")
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True)


def show_photo(page: Any, url: str, photo: Path) -> dict[str, Any]:
    """Open the page, choose ``photo`` and wait for its map and cutout; their pixel sizes and the page's texts."""
    page.goto(f"{url}/")
    page.wait_for_function("() => !document.getElementById('model').textContent.includes('…')")
    page.set_input_files("#file", str(photo))
    page.wait_for_function(_LOADED, arg=["photo-img", "map-img", "cutout-img"], timeout=60_000)
    return {
        "sizes": page.evaluate(_SIZES),
        "timing": page.inner_text("#timing"),
        "model": page.inner_text("#model"),
        "downloads": [page.get_attribute(f"#{kind}-download", "download") for kind in ("map", "cutout")],
        "map_levels": _levels(page, "map-img"),
    }


def move_threshold(page: Any) -> dict[str, Any]:
    """Click the middle of the threshold slider (a hard map follows); the slider's text and the map's gray levels."""
    before = page.get_attribute("#map-img", "src")
    box = page.locator("#threshold").bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_function(
        "before => document.getElementById('map-img').getAttribute('src') !== before", arg=before, timeout=60_000
    )
    page.wait_for_function(_LOADED, arg=["map-img", "cutout-img"], timeout=60_000)
    return {"threshold": page.inner_text("#threshold-value"), "map_levels": _levels(page, "map-img")}


_PIXELS = """id => {
    const image = document.getElementById(id);
    const canvas = document.createElement("canvas");
    canvas.width = image.naturalWidth;
    canvas.height = image.naturalHeight;
    const context = canvas.getContext("2d");
    context.drawImage(image, 0, 0);
    return Array.from(context.getImageData(0, 0, canvas.width, canvas.height).data);
}"""


def shown_pixels(page: Any, kind: str) -> np.ndarray:
    """The RGBA pixels (H, W, 4) of the page's ``kind`` image (photo, map or cutout), read back from a canvas."""
    size = page.evaluate(_SIZES)[kind]
    return np.array(page.evaluate(_PIXELS, f"{kind}-img"), dtype=np.uint8).reshape(size[1], size[0], 4)


def _changed(page: Any, change: Any) -> None:
    """Run ``change`` and wait for the cutout the page composes anew."""
    before = page.get_attribute("#cutout-img", "src")
    change()
    page.wait_for_function(
        "before => document.getElementById('cutout-img').getAttribute('src') !== before", arg=before, timeout=60_000
    )
    page.wait_for_function(_LOADED, arg=["map-img", "cutout-img"], timeout=60_000)


def set_refine(page: Any, on: bool) -> None:
    """Tick (or untick) the "refine edges" box and wait for the cutout."""
    _changed(page, lambda: page.set_checked("#refine", on))


def choose_background(page: Any, value: str) -> None:
    """Choose the background ``value`` (none, white, black, #00b140) and wait for the cutout."""
    _changed(page, lambda: page.select_option("#background", value))


def choose_not_an_image(page: Any, path: Path) -> str:
    """Choose a file that is not an image; the error the page shows."""
    page.set_input_files("#file", str(path))
    page.wait_for_selector("#error:not([hidden])", timeout=60_000)
    return str(page.inner_text("#error"))


def _levels(page: Any, image_id: str) -> list[int]:
    """The gray levels (red channel) of an image on the page, sorted."""
    return sorted(set(page.evaluate(_PIXELS, image_id)[0::4]))
