"""CORS as llama-server answers it (and its ``--api-prefix``): a preflight (``OPTIONS``, any path,
no API key needed) gets 200 with the allowed methods and headers; every response names the
request's origin when it is allowed.
``--cors-origins`` lists the allowed origins: ``*`` (the default) any, ``localhost`` any origin on
this machine (localhost, 127.0.0.1, [::1], any port), else exact origins."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}
PREFLIGHT = [
    (b"Access-Control-Allow-Credentials", b"true"),
    (b"Access-Control-Allow-Methods", b"GET, POST, DELETE, OPTIONS"),
    (b"Access-Control-Allow-Headers", b"*"),
]


def allowed(origin: str, origins: Sequence[str]) -> bool:
    if "*" in origins:
        return True
    if "localhost" in origins:
        try:
            parts = urlsplit(origin)
            if parts.scheme in ("http", "https") and parts.hostname in LOCAL_HOSTS:
                return True
        except ValueError:
            return False
    return origin in origins


class Cors:
    def __init__(self, app: ASGIApp, origins: Sequence[str]) -> None:
        self.app, self.origins = app, tuple(origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        origin = headers.get(b"origin", b"").decode("latin-1")
        allow = (
            [(b"Access-Control-Allow-Origin", origin.encode("latin-1"))]
            if origin and allowed(origin, self.origins)
            else []
        )
        if scope["method"] == "OPTIONS":
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": allow + PREFLIGHT + [(b"Content-Length", b"0")],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return None

        async def with_origin(message: Message) -> None:
            if message["type"] == "http.response.start" and allow:
                message = {**message, "headers": [*message.get("headers", []), *allow, PREFLIGHT[0]]}
            await send(message)

        return await self.app(scope, receive, with_origin)


class Prefix:
    """llama-server's ``--api-prefix``: every route also answers under the prefix."""

    def __init__(self, app: ASGIApp, prefix: str) -> None:
        self.app, self.prefix = app, prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and (path == self.prefix or path.startswith(self.prefix + "/")):
            scope = {**scope, "path": path[len(self.prefix) :] or "/"}
        return await self.app(scope, receive, send)
