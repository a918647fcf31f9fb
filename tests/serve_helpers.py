"""What the serve tests, the demo screenshot (docs/serve_demo.py) and the serve benchmark share: a real uvicorn
serving the application on a free loopback port in a thread, and generated photos."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image


def write_photo(path: Path, width: int = 64, height: int = 48, seed: int = 0, **save: Any) -> Path:
    """A photo-like picture: a smooth two-colour background, a bright ellipse (the object) and some noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:height, :width] / np.array([height, width]).reshape(2, 1, 1)
    background = np.stack([60 + 80 * xx, 90 + 60 * yy, 140 - 50 * xx], axis=-1)
    cy, cx = rng.uniform(0.4, 0.6, 2)
    inside = ((yy - cy) / 0.25) ** 2 + ((xx - cx) / 0.2) ** 2 <= 1
    picture = np.where(inside[..., None], np.array([230.0, 120, 40]), background)
    picture += rng.normal(0, 8, picture.shape)
    Image.fromarray(picture.clip(0, 255).astype(np.uint8)).save(path, **save)
    return path


@contextlib.contextmanager
def serving(app: Any, say: Callable[[str], Any] | None = None) -> Iterator[str]:
    """``app`` (behind the request log, whose lines go to ``say``) served by uvicorn on a free port of 127.0.0.1
    in a thread; yields its base URL, stops it (answering what is in flight) on leaving."""
    import uvicorn

    from ignite_r3net.serve.server import RequestLog, bind

    listening = bind("127.0.0.1", 0)
    logged = RequestLog(app, say) if say is not None else RequestLog(app, lambda line: None)
    server = uvicorn.Server(uvicorn.Config(logged, log_level="warning", access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{listening.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        listening.close()
