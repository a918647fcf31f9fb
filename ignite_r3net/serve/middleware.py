"""One log line per request: client, method, path, status, bytes in and out, milliseconds, and a refusal's reason."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..console import echo

ASGIApp = Callable[..., Any]


def size_text(count: int) -> str:
    return f"{count} B" if count < 1000 else f"{count / 1000:.1f} kB" if count < 1_000_000 else f"{count / 1e6:.2f} MB"


class RequestLog:
    """ASGI middleware that prints ``127.0.0.1 POST /predict?output=map 200 in 48.1 kB out 12.0 kB 183 ms`` after
    each HTTP request (an error's one line appended); ``say`` prints it."""

    def __init__(self, app: ASGIApp, say: Callable[[str], Any] = echo) -> None:
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
