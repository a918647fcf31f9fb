"""``serve``: its maps are ``predict``'s, every bad upload is a one-line 4xx after which it goes on serving, a full
queue is 503, requests arriving together share forward passes, and SIGTERM answers the request in flight."""

from __future__ import annotations

import dataclasses
import io
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from helpers import REPO, cpu_env, free_port  # noqa: E402
from serve_helpers import serving, write_photo  # noqa: E402

from ignite_r3net import cli  # noqa: E402
from ignite_r3net.options.serve import ServeOptions  # noqa: E402
from ignite_r3net.serve.app import create_app  # noqa: E402
from ignite_r3net.serve.model import ServedModel, load_served_model  # noqa: E402

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def served(spread_checkpoint: Path) -> ServedModel:
    return load_served_model(ServeOptions(checkpoint=str(spread_checkpoint)), CPU)


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two PNGs and a JPEG of three sizes (the JPEG as a camera writes it)."""
    folder = tmp_path_factory.mktemp("photos")
    write_photo(folder / "a.png", 64, 48, seed=1)
    write_photo(folder / "b.png", 40, 56, seed=2)
    write_photo(folder / "c.jpg", 72, 40, seed=3, quality=90)
    return folder


def _predict_folder(checkpoint: Path, photos: Path, out: Path, *extra: str) -> Path:
    args = ["predict", "--checkpoint", str(checkpoint), "--input", str(photos), "--output", str(out)]
    assert cli.main([*args, "--workers", "0", "--no-progress", *extra]) == 0
    return out


def _pixels(png: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(png)) as image:
        return np.asarray(image)


def _post(client: httpx.Client, path: Path, **params: object) -> httpx.Response:
    return client.post("/predict", params=params, files={"image": (path.name, path.read_bytes())})


@pytest.mark.parametrize(
    ("params", "flags"),
    [
        ({}, ()),
        ({"output": "cutout", "max_side": 32}, ("--cutout", "--max-side", "32")),
        ({"threshold": 0.54}, ("--threshold", "0.54")),
        ({"crf": "true"}, ("--crf",)),
    ],
    ids=["map", "cutout-max-side", "map-threshold", "map-crf"],
)
def test_maps_and_cutouts_are_predicts_within_one_gray_level(
    served: ServedModel, spread_checkpoint: Path, photos: Path, tmp_path: Path, params: dict, flags: tuple
) -> None:
    expected = _predict_folder(spread_checkpoint, photos, tmp_path / "predict", *flags)
    lines: list[str] = []
    with serving(create_app(served, ServeOptions(checkpoint=str(spread_checkpoint))), lines.append) as url:
        with httpx.Client(base_url=url, timeout=60) as client:
            for photo in sorted(photos.iterdir()):
                response = _post(client, photo, **params)
                assert response.status_code == 200, response.text
                assert response.headers["content-type"] == "image/png"
                got = _pixels(response.content).astype(int)
                want = np.asarray(Image.open(expected / f"{photo.stem}.png")).astype(int)
                assert got.shape == want.shape, photo.name
                print(photo.name, params, np.abs(got - want).max())
                assert np.abs(got - want).max() <= (255 if "threshold" in params else 1), photo.name
                if "threshold" in params:  # a gray level at the threshold flips a pixel: few may differ
                    assert (got != want).mean() < 0.01, photo.name
                saliency = got if got.ndim == 2 else got[..., 3]
                assert saliency.max() - saliency.min() > 5 or "threshold" in params, photo.name  # not flat
    # one log line per request: client, method, path, status, bytes in and out, milliseconds
    assert len(lines) == 3
    assert all(" POST /predict" in line and " 200 in " in line and line.endswith(" ms") for line in lines)
    if "crf" in params:  # the refinement ran: its maps are not the plain ones
        plain = _predict_folder(spread_checkpoint, photos, tmp_path / "plain")
        assert any(
            (np.asarray(Image.open(plain / p.name)) != np.asarray(Image.open(expected / p.name))).any()
            for p in expected.glob("*.png")
        )


@pytest.mark.parametrize(
    ("params", "flags"),
    [
        ({"output": "cutout", "refine": "true"}, ("--cutout", "--refine-foreground")),
        (
            {"output": "cutout", "refine": "true", "background": "#00ff00"},
            ("--cutout", "--refine-foreground", "--background", "#00ff00"),
        ),
    ],
    ids=["refined", "refined-over-green"],
)
def test_refined_cutouts_and_composites_are_predicts_within_one_gray_level(
    served: ServedModel, spread_checkpoint: Path, photos: Path, tmp_path: Path, params: dict, flags: tuple
) -> None:
    expected = _predict_folder(spread_checkpoint, photos, tmp_path / "predict", *flags)
    plain = _predict_folder(spread_checkpoint, photos, tmp_path / "plain", "--cutout")
    with serving(create_app(served, ServeOptions(checkpoint=str(spread_checkpoint)))) as url:
        with httpx.Client(base_url=url, timeout=60) as client:
            for photo in sorted(photos.iterdir()):
                response = _post(client, photo, **params)
                assert response.status_code == 200 and response.headers["content-type"] == "image/png", response.text
                got = _pixels(response.content).astype(int)
                want = np.asarray(Image.open(expected / f"{photo.stem}.png")).astype(int)
                assert got.shape == want.shape == (*want.shape[:2], 4 if "background" not in params else 3)
                assert np.abs(got - want).max() <= 1, photo.name
                unrefined = np.asarray(Image.open(plain / f"{photo.stem}.png")).astype(int)[..., : got.shape[2]]
                assert (got != unrefined).any(), photo.name  # the refinement (or the background) acted


def test_the_servers_background_a_requests_colour_none_and_jpeg(
    served: ServedModel, spread_checkpoint: Path, photos: Path, tmp_path: Path
) -> None:
    """``serve --background FILE`` composites every cutout; a request may ask another colour, or none."""
    Image.new("RGB", (7, 5), (250, 0, 0)).save(tmp_path / "red.png")
    options = ServeOptions(checkpoint=str(spread_checkpoint), background=str(tmp_path / "red.png"))
    photo = photos / "a.png"
    with serving(create_app(served, options)) as url, httpx.Client(base_url=url, timeout=60) as client:
        rgba = _pixels(_post(client, photo, output="cutout", background="none").content).astype(int)
        red = _pixels(_post(client, photo, output="cutout").content).astype(int)
        blue = _pixels(_post(client, photo, output="cutout", background="blue").content).astype(int)
        jpeg = _post(client, photo, output="cutout", jpeg="true")
        gray = _pixels(_post(client, photo).content)
    assert rgba.shape == (48, 64, 4) and red.shape == blue.shape == (48, 64, 3)
    alpha = rgba[..., 3:]
    for colour, got in (((250, 0, 0), red), ((0, 0, 255), blue)):
        np.testing.assert_array_equal(got, (alpha * rgba[..., :3] + (255 - alpha) * np.array(colour) + 127) // 255)
    assert jpeg.headers["content-type"] == "image/jpeg" and Image.open(io.BytesIO(jpeg.content)).format == "JPEG"
    encoded = io.BytesIO()
    Image.fromarray(red.astype(np.uint8)).save(encoded, format="JPEG", quality=95)
    np.testing.assert_array_equal(_pixels(jpeg.content), _pixels(encoded.getvalue()))  # the red composite, as JPEG
    assert gray.ndim == 2  # a map stays a map


def test_a_bad_server_background_is_one_line_before_the_model_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert cli.main(["serve", "--checkpoint", str(tmp_path / "missing.pt"), "--background", "chartreuse-ish"]) == 2
    assert capsys.readouterr().err == (
        "error: --background chartreuse-ish: neither a colour (a name such as white, or #RRGGBB) nor an image file\n"
    )


@pytest.mark.slow  # the ONNX export (a fixture made once per run, ~15 s)
@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_an_exported_model_serves_the_maps_predict_makes_with_it(
    request: pytest.FixtureRequest, photos: Path, tmp_path: Path, fmt: str
) -> None:
    """``serve --model FILE`` (ONNX in onnxruntime, or TorchScript): the maps ``predict --model FILE`` writes."""
    exported: Path = request.getfixturevalue(f"exported_{fmt}")
    args = ["predict", "--model", str(exported), "--input", str(photos), "--output", str(tmp_path / "predict")]
    assert cli.main([*args, "--workers", "0", "--no-progress"]) == 0
    options = ServeOptions(model=str(exported))
    with serving(create_app(load_served_model(options, CPU), options), lambda line: None) as url:
        with httpx.Client(base_url=url, timeout=60) as client:
            assert client.get("/healthz").json()["provider"] == ("CPUExecutionProvider" if fmt == "onnx" else "torch")
            for photo in sorted(photos.iterdir()):
                response = _post(client, photo)
                assert response.status_code == 200, response.text
                want = np.asarray(Image.open(tmp_path / "predict" / f"{photo.stem}.png")).astype(int)
                assert np.abs(_pixels(response.content).astype(int) - want).max() <= 1, photo.name


BOMB_SIDE = 4000  # a flat PNG of 16 megapixels is a few kB: more pixels than --max-pixels, a small upload


def _bad_requests(tmp_path: Path) -> list[tuple[str, dict, dict, int, str]]:
    photo = write_photo(tmp_path / "p.png")
    Image.new("RGB", (BOMB_SIDE, BOMB_SIDE)).save(tmp_path / "bomb.png")
    truncated = (tmp_path / "p.png").read_bytes()[:300]
    large = np.random.default_rng(0).integers(0, 255, 200_000, dtype=np.uint8).tobytes()
    good = {"image": ("p.png", photo.read_bytes())}
    return [
        ("not an image", {}, {"image": ("notes.txt", b"just some text\n" * 20)}, 415, "not an image"),
        ("truncated", {}, {"image": ("t.png", truncated)}, 400, "cannot be decoded"),
        ("decompression bomb", {}, {"image": ("bomb.png", (tmp_path / "bomb.png").read_bytes())}, 413, "--max-pixels"),
        ("oversized upload", {}, {"image": ("big.png", large)}, 413, "--max-upload-mb"),
        ("wrong field", {}, {"photo": ("p.png", photo.read_bytes())}, 422, "no field 'image'"),
        ("unknown output", {"output": "mask"}, good, 422, "output"),
        ("threshold out of range", {"threshold": 3}, good, 422, "threshold"),
        ("misspelt parameter", {"treshold": 0.5}, good, 422, "unknown parameter 'treshold'"),
        ("empty file", {}, {"image": ("e.png", b"")}, 400, "empty"),
        ("refine on a map", {"refine": "true"}, good, 422, "refine goes with output=cutout"),
        ("unknown colour", {"output": "cutout", "background": "nosuch"}, good, 422, "background: not a colour"),
        ("jpeg with transparency", {"output": "cutout", "jpeg": "true"}, good, 422, "jpeg=true goes with a background"),
    ]


def test_every_bad_input_is_a_one_line_4xx_and_the_next_request_succeeds(
    served: ServedModel, spread_checkpoint: Path, tmp_path: Path
) -> None:
    options = ServeOptions(checkpoint=str(spread_checkpoint), max_upload_mb=0.1, max_pixels=1_000_000)
    lines: list[str] = []
    with serving(create_app(served, options), lines.append) as url, httpx.Client(base_url=url, timeout=60) as client:
        for name, params, files, status, words in _bad_requests(tmp_path):
            response = client.post("/predict", params=params, files=files)
            assert response.status_code == status, (name, response.text)
            assert "\n" not in response.text.strip() and words in response.json()["error"], (name, response.text)
            good = client.post("/predict", files={"image": ("p.png", (tmp_path / "p.png").read_bytes())})
            assert good.status_code == 200, (name, good.text)
        not_multipart = client.post("/predict", content=(tmp_path / "p.png").read_bytes())
        assert not_multipart.status_code == 415 and "multipart/form-data" in not_multipart.json()["error"]
        health = client.get("/healthz").json()
    assert health["answered"] == len(_bad_requests(tmp_path)) and health["device"] == "cpu"
    assert health["provider"] == "torch" and health["backbone"] == "resnet18"
    assert any(" 413 " in line and "--max-pixels" in line for line in lines)  # the log line gives the reason


class Gate:
    """A model whose forward passes wait until ``open()``: requests pile up behind the first one."""

    def __init__(self, served: ServedModel) -> None:
        self.served, self.opened, self.entered = served, threading.Event(), threading.Event()

    def maps(self, images: torch.Tensor, max_side: int | None) -> torch.Tensor:
        self.entered.set()
        assert self.opened.wait(60)
        return self.served.maps(images, max_side)

    def model(self) -> ServedModel:
        return dataclasses.replace(self.served, maps=self.maps)


def _wait_for(condition, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_full_queue_is_answered_503_at_once(served: ServedModel, spread_checkpoint: Path, tmp_path: Path) -> None:
    photo = write_photo(tmp_path / "p.png")
    gate = Gate(served)
    options = ServeOptions(checkpoint=str(spread_checkpoint), queue_size=2)
    with serving(create_app(gate.model(), options)) as url, httpx.Client(base_url=url, timeout=60) as client:
        with ThreadPoolExecutor(2) as pool:
            taken = [pool.submit(_post, client, photo) for _ in range(2)]
            _wait_for(lambda: client.get("/healthz").json()["in_flight"] == 2)
            start = time.monotonic()
            refused = _post(client, photo)
            assert refused.status_code == 503 and time.monotonic() - start < 5
            assert "--queue-size" in refused.json()["error"] and refused.headers["retry-after"] == "1"
            gate.opened.set()
            assert [future.result().status_code for future in taken] == [200, 200]
        assert _post(client, photo).status_code == 200


def test_requests_arriving_together_share_forward_passes(
    served: ServedModel, spread_checkpoint: Path, photos: Path, tmp_path: Path
) -> None:
    files = sorted(photos.glob("*.png"))  # two sizes
    alone = {}
    with serving(create_app(served, ServeOptions(checkpoint=str(spread_checkpoint), max_batch=1))) as url:
        with httpx.Client(base_url=url, timeout=60) as client:
            for photo in files:
                alone[photo.name] = _pixels(_post(client, photo).content).astype(int)
    gate = Gate(served)
    options = ServeOptions(checkpoint=str(spread_checkpoint), max_batch=8, max_wait_ms=50)
    sent = [files[i % 2] for i in range(9)]
    with serving(create_app(gate.model(), options)) as url, httpx.Client(base_url=url, timeout=60) as client:
        with ThreadPoolExecutor(len(sent)) as pool:
            first = pool.submit(_post, client, sent[0])
            assert gate.entered.wait(30)  # the first request holds the model; the others queue behind it
            rest = [pool.submit(_post, client, photo) for photo in sent[1:]]
            _wait_for(lambda: client.get("/healthz").json()["waiting"] == len(sent) - 1)
            gate.opened.set()
            responses = [first.result(), *(future.result() for future in rest)]
        health = client.get("/healthz").json()
    assert [response.status_code for response in responses] == [200] * len(sent)
    for photo, response in zip(sent, responses):  # a batch's maps are those of batch 1
        assert np.abs(_pixels(response.content).astype(int) - alone[photo.name]).max() <= 1
    # the first alone, then the 8 that waited in one pass per image size
    assert health["images"] == len(sent) and health["forward_passes"] == 3, health


@pytest.mark.slow
@pytest.mark.parametrize(
    ("stop", "host", "returncode", "last"),
    [("SIGTERM", "127.0.0.1", 143, "terminated"), ("SIGINT", "0.0.0.0", 130, "interrupted")],
    ids=["sigterm", "ctrl-c-on-every-interface"],
)
def test_sigterm_answers_the_request_in_flight_then_stops(
    spread_checkpoint: Path, tmp_path: Path, stop: str, host: str, returncode: int, last: str
) -> None:
    """SIGTERM, or Ctrl-C (SIGINT), answers the request in flight, then ends the process as an interrupted command
    would; the start-up line says the URL, model, device and limits, and a host other than the loopback is noted."""
    import signal
    import subprocess
    import sys

    photo = write_photo(tmp_path / "p.png")
    port = free_port()
    args = ["serve", "--checkpoint", str(spread_checkpoint), "--port", str(port), "--max-upload-mb", "50"]
    args += ["--host", host]
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "run.py"), *args],
        cwd=REPO,
        env=cpu_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    # a request in flight: its upload sends half the body, then the rest once SIGTERM has been sent
    upload = httpx.Request("POST", f"{url}/predict", files={"image": ("p.png", photo.read_bytes())})
    body, signalled = upload.read(), threading.Event()

    def slow_body():  # type: ignore[no-untyped-def]
        yield body[: len(body) // 2]
        assert signalled.wait(60)
        yield body[len(body) // 2 :]

    try:
        _wait_for(lambda: _answers(url) or proc.poll() is not None, timeout=60)
        with httpx.Client(base_url=url, timeout=60) as client, ThreadPoolExecutor(1) as pool:
            headers = {"content-type": upload.headers["content-type"], "content-length": str(len(body))}
            pending = pool.submit(client.post, "/predict", content=slow_body(), headers=headers)
            _wait_for(lambda: client.get("/healthz").json()["in_flight"] == 1)
            proc.send_signal(getattr(signal, stop))
            _wait_for(lambda: not _answers(url))  # the server is stopping: it takes no new connection
            signalled.set()
            response = pending.result()
        assert response.status_code == 200 and _pixels(response.content).shape == (48, 64)
        output, _ = proc.communicate(timeout=60)
    finally:
        signalled.set()
        proc.kill()
    lines = output.splitlines()
    assert proc.returncode == returncode, output
    assert lines[0].startswith(f"serving {spread_checkpoint} (R3Net resnet18, torch on cpu) at http://{host}:{port}/")
    noted = f"note: listening on {host}: other machines can reach this server; it has no authentication"
    assert (noted in lines) == (host != "127.0.0.1"), output
    assert "batches of up to 8 image(s) within 5 ms, uploads up to 50 MB and 40000000 pixels" in lines[0]
    assert "stopping: answering the 1 request(s) in flight, taking no new ones (Ctrl-C again stops at once)" in lines
    assert any(line.startswith("127.0.0.1 POST /predict 200 in ") and line.endswith(" ms") for line in lines), output
    assert lines[-2:] == ["stopped after 1 answered request(s)", last], output


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_taken_port_is_one_line_before_the_model_is_read(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from ignite_r3net.serve.server import bind

    taken = bind("127.0.0.1", 0)
    try:
        port = taken.getsockname()[1]
        assert cli.main(["serve", "--checkpoint", str(tmp_path / "missing.pt"), "--port", str(port)]) == 2
    finally:
        taken.close()
    assert (
        capsys.readouterr().err == f"error: --port {port}: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    )
