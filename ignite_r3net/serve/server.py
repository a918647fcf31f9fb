"""``serve``: the model loaded once, the socket bound (a taken port is one line), uvicorn serving the application
with one log line per request (``RequestLog``), and the stop: SIGTERM or Ctrl-C stops taking connections, the
requests in flight are answered, then the process ends as after any interrupted command (exit 143 or 130)."""

from __future__ import annotations

import importlib.util
import signal
import socket
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch

from ..console import echo
from ..distributed.process_setup import use_device
from ..distributed.signals import raise_on_sigterm, restore_sigterm
from ..distributed.topology import LaunchSpec
from ..errors import OptionError, Terminated, install_extra
from ..inference.cutout import read_background
from ..numerics import inference_numerics
from ..options.serve import LOOPBACK_HOSTS, ServeOptions
from .model import ServedModel, load_served_model

SERVE_MISSING = f"serve needs FastAPI, uvicorn and python-multipart: {install_extra('serve')}"


def require_serve_extra() -> None:
    # python-multipart is imported as python_multipart since 0.0.13, as multipart before
    if not all(importlib.util.find_spec(name) for name in ("fastapi", "uvicorn")) or not (
        importlib.util.find_spec("python_multipart") or importlib.util.find_spec("multipart")
    ):
        raise OptionError(SERVE_MISSING)


def serve(options: ServeOptions) -> None:
    """Serve ``options``' model until SIGTERM or Ctrl-C (raised once the requests in flight are answered)."""
    options.validate()
    require_serve_extra()
    if options.background is not None:
        read_background(options.background)  # a bad colour or file is one line before the model is read
    import uvicorn

    from .app import create_app

    device = torch.device(use_device(LaunchSpec(device=options.device)))
    listening = bind(options.host, options.port)  # a taken port is said before the model is read
    try:
        model = load_served_model(options, device)
        model.maps(torch.zeros(1, 3, 64, 64, dtype=torch.uint8), None)  # a broken model fails here, not on a request
    except BaseException:
        listening.close()
        raise
    app = create_app(model, options)
    config = uvicorn.Config(RequestLog(app), log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    signals = say_when_stopping(server, app.state.counters)
    previous = raise_on_sigterm()  # what uvicorn raises again once it has drained the requests
    try:
        with inference_numerics(options.inference.tf32 == "on"):
            echo(startup_line(model, options, listening.getsockname()[1]))
            if options.host not in LOOPBACK_HOSTS:
                echo(
                    f"note: listening on {options.host}: other machines can reach this server; it has no authentication"
                )
            server.run(sockets=[listening])
        # uvicorn raised the signal again, unless it was ignored (SIGINT in a shell's background job): end as it would
        if signal.SIGTERM in signals:
            raise Terminated()
        if signal.SIGINT in signals:
            raise KeyboardInterrupt()
    finally:
        restore_sigterm(previous)
        listening.close()
        echo(f"stopped after {app.state.counters.answered} answered request(s)")


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (IPv4 or IPv6 as ``host`` is); ``OptionError`` when it cannot."""
    try:
        family, kind, protocol, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        listening = socket.socket(family, kind, protocol)
    except OSError as e:
        raise OptionError(f"--host {host}: {e.strerror or e}") from None
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(address)
        listening.listen(2048)
    except OSError as e:
        listening.close()
        raise OptionError(f"--port {port}: cannot listen on {host}:{port}: {e.strerror or e}") from None
    listening.set_inheritable(True)
    return listening


def startup_line(model: ServedModel, options: ServeOptions, port: int) -> str:
    host = f"[{options.host}]" if ":" in options.host else options.host
    return (
        f"serving {model.describe()} at http://{host}:{port}/ (the demo page; POST /predict, GET /healthz): "
        f"batches of up to {options.max_batch} image(s) within {options.max_wait_ms:g} ms, uploads up to "
        f"{options.max_upload_mb:g} MB and {options.max_pixels} pixels, {options.queue_size} requests at once "
        "(more: 503); Ctrl-C or SIGTERM stops after the requests in flight"
    )


def say_when_stopping(server: Any, counters: Any) -> list[int]:
    """Make uvicorn's ``server`` say, at the first SIGTERM or Ctrl-C, how many requests it still answers; returns
    the list of the signals it receives."""
    handle_exit, received = server.handle_exit, []

    def handle_exit_saying(sig: int, frame: FrameType | None) -> None:
        received.append(sig)
        if not server.should_exit:
            echo(
                f"stopping: answering the {counters.in_flight} request(s) in flight, taking no new ones "
                "(Ctrl-C again stops at once)"
            )
        handle_exit(sig, frame)

    server.handle_exit = handle_exit_saying  # uvicorn installs self.handle_exit for the signals
    return received


def size_text(count: int) -> str:
    return f"{count} B" if count < 1000 else f"{count / 1000:.1f} kB" if count < 1_000_000 else f"{count / 1e6:.2f} MB"


class RequestLog:
    """ASGI middleware that prints ``127.0.0.1 POST /predict?output=map 200 in 48.1 kB out 12.0 kB 183 ms`` after
    each HTTP request (an error's one line appended); ``say`` prints it."""

    def __init__(self, app: Callable[..., Any], say: Callable[[str], Any] = echo) -> None:
        self.app, self.say = app, say

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        counts = {"in": 0, "out": 0, "status": 500}

        async def counting_receive() -> dict[str, Any]:
            message = await receive()
            if message["type"] == "http.request":
                counts["in"] += len(message.get("body", b""))
            return message

        async def counting_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                counts["status"] = message["status"]
            elif message["type"] == "http.response.body":
                counts["out"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, counting_receive, counting_send)
        finally:
            milliseconds = (time.perf_counter() - start) * 1000
            client = scope.get("client") or ("-", 0)
            query = scope.get("query_string", b"").decode("latin-1")
            path = scope["path"] + (f"?{query}" if query else "")
            reason = scope.get("state", {}).get("error")
            self.say(
                f"{client[0]} {scope['method']} {path} {counts['status']} in {size_text(counts['in'])} out "
                f"{size_text(counts['out'])} {milliseconds:.0f} ms" + (f": {reason}" if reason else "")
            )
