"""The routes of ``serve``: ``POST /predict`` (an image in, a PNG map or cutout out), ``GET /healthz``, ``GET /``
(the demo page) and its files under ``/static``. Every refusal is a 4xx with one line of JSON, ``{"error": ...}``;
the server goes on serving. What a client posts is checked before it costs memory (``read_limited``,
``decode_upload``)."""

from __future__ import annotations

import asyncio
import io
import time
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from PIL import Image, ImageOps, UnidentifiedImageError
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

from ..errors import OptionError, error_line
from ..inference.crf import require_crf
from ..inference.cutout import Background, cutout_image, finished_map, parse_colour, read_background
from ..options.common import COLOUR_EXAMPLES
from ..options.serve import ServeOptions
from .model import Batcher, ServedModel

STATIC = Path(__file__).resolve().parent / "static"
FIELD = "image"  # the form field that holds the image
PARAMETERS = {"output", "threshold", "max_side", "crf", "refine", "background", "jpeg"}
_HOW = f"post the image as multipart/form-data in a field named '{FIELD}' (curl -F {FIELD}=@photo.jpg)"


@dataclass
class Counters:
    """Requests taken now (against ``--queue-size``) and answered so far."""

    in_flight: int = 0
    answered: int = 0


class Refused(Exception):
    """A request answered with ``status`` and the one-line ``message`` (``{"error": message}``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def too_large(size: int, limit: int) -> Refused:
    return Refused(413, f"the upload is {size / 1e6:.3g} MB, more than the server's --max-upload-mb {limit / 1e6:g}")


async def read_limited(chunks: AsyncIterator[bytes], limit: int, declared: int | None) -> bytes:
    """The whole body from ``chunks``, refused (413) as soon as it, or its declared length, passes ``limit``."""
    if declared is not None and declared > limit:
        raise too_large(declared, limit)
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise too_large(len(body), limit)
    return bytes(body)


def decode_upload(data: bytes, max_pixels: int) -> torch.Tensor:
    """The posted image as uint8 ``(3, H, W)`` RGB in display (EXIF) orientation, as ``predict`` reads a file that
    is not 8-bit RGB (``data.decode.load_image``'s PIL path); ``Refused`` (4xx) for anything else. Its pixels are
    counted from its header before it is decoded (a decompression bomb is refused unread); PIL's errors are
    exceptions (torchvision's PNG decoder crashed the process on a truncated file)."""
    if not data:
        raise Refused(400, "the field 'image' is empty")
    try:
        image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise Refused(415, "the upload is not an image (JPEG, PNG, WebP, BMP, TIFF, GIF ...)") from None
    except Image.DecompressionBombError as e:  # PIL's own limit, from its header
        raise Refused(413, f"the image has too many pixels: {error_line(e)}") from None
    with image:
        width, height = image.size
        if width * height > max_pixels:
            raise Refused(
                413,
                f"the image is {width}x{height} = {width * height} pixels, more than the server's --max-pixels "
                f"{max_pixels} (a decompression bomb?)",
            )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # DecompressionBombWarning: the pixels were counted above
                image.load()
                rgb = (ImageOps.exif_transpose(image) or image).convert("RGB")
        except Exception as e:  # PIL raises OSError, SyntaxError, ValueError ... for damaged data
            raise Refused(400, f"the image cannot be decoded (damaged or truncated?): {error_line(e)}") from None
    return torch.from_numpy(np.array(rgb)).permute(2, 0, 1)


def create_app(model: ServedModel, options: ServeOptions) -> FastAPI:
    """The application serving ``model`` under ``options``' batching and limits."""
    batcher = Batcher(model.maps, options.max_batch, options.max_wait_ms / 1000)
    counters = Counters()
    backdrop = read_background(options.background) if options.background is not None else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(title="R3Net saliency", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.batcher, app.state.counters = batcher, counters
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    _add_error_handlers(app)

    @app.get("/", include_in_schema=False)
    async def demo_page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {
            "status": "ok",
            "model": model.source,
            "backbone": model.backbone,
            "device": str(model.device),
            "provider": model.provider,
            "max_batch": options.max_batch,
            "max_wait_ms": options.max_wait_ms,
            "queue_size": options.queue_size,
            "in_flight": counters.in_flight,
            "waiting": batcher.waiting,
            "answered": counters.answered,
            "forward_passes": batcher.forward_passes,
            "images": batcher.images,
        }

    @app.post("/predict")
    async def predict(
        request: Request,
        output: Literal["map", "cutout"] = "map",
        threshold: float | None = Query(None, ge=0, le=1),
        max_side: int | None = Query(None, ge=1),
        crf: bool = False,
        refine: bool = False,
        background: str | None = None,
        jpeg: bool = False,
    ) -> Response:
        unknown = sorted(set(request.query_params) - PARAMETERS)
        if unknown:
            raise Refused(422, f"unknown parameter {unknown[0]!r} (known: {', '.join(sorted(PARAMETERS))})")
        look = _look(output, refine, background, jpeg, backdrop)
        if crf:
            try:
                require_crf()
            except OptionError as e:
                raise Refused(400, f"crf=true: {e} on the server") from None
        if counters.in_flight >= options.queue_size:
            raise Refused(503, f"the server is busy ({options.queue_size} requests, its --queue-size); try again")
        counters.in_flight += 1
        try:
            start = time.perf_counter()
            image = await asyncio.to_thread(decode_upload, await _posted_file(request, options), options.max_pixels)
            saliency = await batcher.maps_of(image, max_side)
            picture = await asyncio.to_thread(_picture, image, saliency, crf, threshold, look, model.device)
            milliseconds = (time.perf_counter() - start) * 1000
            counters.answered += 1
        finally:
            counters.in_flight -= 1
        headers = {
            "Server-Timing": f"total;dur={milliseconds:.1f}",
            "X-Image-Size": f"{image.shape[2]}x{image.shape[1]}",
        }
        return Response(picture, media_type="image/jpeg" if jpeg else "image/png", headers=headers)

    return app


async def _posted_file(request: Request, options: ServeOptions) -> bytes:
    """The bytes of the form's image field, the body read no further than ``--max-upload-mb``."""
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        raise Refused(415, f"expected multipart/form-data, got {content_type or 'no content type'}: {_HOW}")
    declared = request.headers.get("content-length")
    body = await read_limited(
        request.stream(), options.max_upload_bytes, int(declared) if declared and declared.isdigit() else None
    )

    async def replay() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    form = await Request(request.scope, replay).form(max_files=4, max_fields=16)
    try:
        field = form.get(FIELD)
        if field is None:
            names = ", ".join(repr(name) for name in form) or "none"
            raise Refused(422, f"no field '{FIELD}' in the form (its fields: {names}): {_HOW}")
        if not isinstance(field, UploadFile):
            raise Refused(422, f"the field '{FIELD}' is text, not a file: {_HOW}")
        return await field.read()
    finally:
        await form.close()


@dataclass(frozen=True)
class Look:
    """What a request makes of its map: the map itself, or a cutout (refined, over a background, as JPEG)."""

    cutout: bool
    refine: bool = False
    background: Background | None = None
    jpeg: bool = False


def _look(output: str, refine: bool, background: str | None, jpeg: bool, default: Background | None) -> Look:
    """The request's ``Look``; ``Refused`` (422) for a parameter that does not fit (``background``: a colour or
    ``none``; an image is the server's ``--background``)."""
    if output == "map":
        given = [name for name, value in (("refine", refine), ("background", background), ("jpeg", jpeg)) if value]
        if given:
            raise Refused(422, f"{given[0]} goes with output=cutout")
        return Look(cutout=False)
    chosen = default
    if background is not None:
        chosen = None if background == "none" else parse_colour(background)
        if chosen is None and background != "none":
            raise Refused(422, f"background: not a colour ({COLOUR_EXAMPLES}, # written %23), nor none: {background!r}")
    if jpeg and chosen is None:
        raise Refused(422, "jpeg=true goes with a background (a cutout keeps its transparency in a PNG)")
    return Look(cutout=True, refine=refine, background=chosen, jpeg=jpeg)


def _picture(
    image: torch.Tensor, saliency: torch.Tensor, crf: bool, threshold: float | None, look: Look, device: torch.device
) -> bytes:
    """``predict``'s map (or cutout) of ``image`` as PNG (or JPEG) bytes; a cutout's refinement runs on ``device``."""
    saliency = finished_map(image, saliency, crf, threshold)
    if look.cutout:
        picture = cutout_image(image.to(device), saliency, look.refine, look.background)
    else:
        picture = Image.fromarray(saliency.numpy(), mode="L")
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG" if look.jpeg else "PNG", quality=95)
    return buffer.getvalue()


def _refusal(request: Request, status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    request.state.error = message  # for the request's log line
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(Refused)
    async def refused(request: Request, e: Exception) -> JSONResponse:
        assert isinstance(e, Refused)
        return _refusal(request, e.status, e.message, {"Retry-After": "1"} if e.status == 503 else None)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: Exception) -> JSONResponse:
        assert isinstance(e, RequestValidationError)
        first = e.errors()[0]
        name = ".".join(str(part) for part in first.get("loc", ())[1:]) or "request"
        given = f" (got {first['input']!r})" if "input" in first else ""
        return _refusal(request, 422, f"{name}: {first.get('msg', 'invalid')}{given}")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: Exception) -> JSONResponse:
        assert isinstance(e, HTTPException)
        return _refusal(request, e.status_code, str(e.detail), dict(e.headers or {}))

    @app.exception_handler(Exception)
    async def failed(request: Request, e: Exception) -> JSONResponse:
        return _refusal(request, 500, f"internal error: {type(e).__name__}: {error_line(e)}")
