"""API keys (llama-server's ``--api-key``): an ASGI middleware in front of every route but /health."""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from llama_ffi.server.errors import ApiError

PUBLIC_PATHS = {"/health", "/v1/health"}


class Gate:
    """API keys (``Authorization: Bearer`` or ``X-Api-Key``) on every path but /health."""

    def __init__(self, app: ASGIApp, keys: tuple[str, ...]) -> None:
        self.app, self.keys = app, keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.keys or scope["path"] in PUBLIC_PATHS:
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        given = headers.get("authorization") or headers.get("x-api-key") or ""
        if given.lower().startswith("bearer "):
            given = given[len("bearer ") :].strip()
        if any(hmac.compare_digest(given.encode(), key.encode()) for key in self.keys):  # constant time
            return await self.app(scope, receive, send)
        error = ApiError(
            401,
            "invalid API key" if given else "an API key is required (Authorization: Bearer KEY)",
            code="invalid_api_key",
        )
        await error.response(scope["path"])(scope, receive, send)
