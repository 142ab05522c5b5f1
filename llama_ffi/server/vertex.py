"""Vertex AI's prediction protocol (its custom-container contract), as llama-server speaks it when
``AIP_MODE=PREDICTION``: ``POST $AIP_PREDICT_ROUTE`` (default ``/predict``) takes ``{"instances":
[...]}``, each instance a request body with ``@requestFormat`` naming the route it goes to — a path
(``/v1/chat/completions``) or its camelCase name (``chatCompletions``) — and answers
``{"predictions": [...]}``, one result (or ``{"error": ...}``) per instance, in order. The instances
run concurrently through this same app (its key check, its engine); streaming is turned off.
``AIP_HEALTH_ROUTE`` answers as ``/health``; ``AIP_HTTP_PORT`` is the port (``port``)."""

from __future__ import annotations

import asyncio
import json
import os

from fastapi import FastAPI, Request
from starlette.routing import Route

from llama_ffi.server.errors import TYPES, ApiError

MAX_INSTANCES = 128  # llama-server's bound
FORMAT_KEY = "@requestFormat"
SCOPE_KEYS = ("type", "asgi", "http_version", "scheme", "root_path", "client", "server", "state")


def enabled() -> bool:
    return os.environ.get("AIP_MODE", "") == "PREDICTION"


def port(default: int) -> int:
    """The port to listen on: Vertex AI's ``AIP_HTTP_PORT`` where it runs the container."""
    given = os.environ.get("AIP_HTTP_PORT") if enabled() else None
    return int(given) if given else default


def camel_name(path: str) -> str:
    """``/v1/chat/completions`` -> ``chatCompletions``, ``/apply-template`` -> ``applyTemplate``
    (llama-server's aliases: ``/v1`` dropped, each ``/``, ``-`` or ``_`` capitalises the next)."""
    text = path.removeprefix("/v1").lstrip("/").split("{")[0]
    out, capital = [], False
    for char in text:
        if char in "/-_":
            capital = True
        else:
            out.append(char.upper() if capital else char)
            capital = False
    return "".join(out)


def _error(status: int, message: str) -> dict:
    return {"error": {"code": status, "message": message, "type": TYPES.get(status, "server_error")}}


def add_routes(app: FastAPI, prefix: str = "", routes=None) -> None:
    """The predict (and health) routes, over ``routes`` (default: those ``app`` has now; an app made
    of included routers passes theirs: FastAPI keeps an included router whole)."""
    routes = list(app.routes if routes is None else routes)
    paths = [r.path for r in routes if isinstance(r, Route) and "POST" in (r.methods or ())]
    aliases: dict[str, str] = {}
    for path in paths:
        aliases.setdefault(camel_name(path), path)  # the first registration wins, as there

    predict_route = os.environ.get("AIP_PREDICT_ROUTE") or "/predict"
    health_route = os.environ.get("AIP_HEALTH_ROUTE")
    if predict_route in paths:
        raise ValueError(f"AIP_PREDICT_ROUTE={predict_route} is one of this server's own routes")
    if health_route:
        health = next(r.endpoint for r in routes if isinstance(r, Route) and r.path == "/health")
        app.add_api_route(health_route, health, methods=["GET"])

    async def forward(request: Request, instance) -> object:
        if not isinstance(instance, dict):
            return _error(400, "each instance must be a JSON object")
        if not isinstance(instance.get(FORMAT_KEY), str):
            return _error(400, f"each instance must include a string {FORMAT_KEY}")
        payload = {k: v for k, v in instance.items() if k != FORMAT_KEY}
        if "stream" in payload:
            payload["stream"] = False  # a prediction is one JSON value
        name = instance[FORMAT_KEY]
        path = aliases.get(name) or (name if name in paths else None)
        if path is None:
            return _error(400, f"no handler registered for {FORMAT_KEY}: {name}")
        body = json.dumps(payload).encode()
        headers = [(k, v) for k, v in request.scope["headers"] if k not in (b"content-length", b"content-type")]
        scope = {k: request.scope[k] for k in SCOPE_KEYS if k in request.scope}
        scope.update(method="POST", path=prefix + path, raw_path=(prefix + path).encode(), query_string=b"")
        length = str(len(body)).encode()
        scope["headers"] = [*headers, (b"content-type", b"application/json"), (b"content-length", length)]
        sent = False
        chunks: list[bytes] = []

        async def receive():
            nonlocal sent
            if sent:
                await asyncio.Event().wait()  # no more body: wait to be cancelled
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message):
            if message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await request.app(scope, receive, send)
        data = b"".join(chunks)
        try:
            return json.loads(data) if data else None
        except ValueError:
            return data.decode(errors="replace")

    @app.post(predict_route)
    async def predict(request: Request):
        try:
            data = json.loads(await request.body())
        except ValueError as error:
            raise ApiError(400, f"the body is not JSON: {error}") from None
        if not isinstance(data, dict):
            raise ApiError(400, "request body must be a JSON object")
        instances = data.get("instances")
        if not isinstance(instances, list):
            raise ApiError(400, "request body must include an array field named instances", "instances")
        if len(instances) > MAX_INSTANCES:
            raise ApiError(400, f"instances array exceeds maximum size of {MAX_INSTANCES}", "instances")
        return {"predictions": list(await asyncio.gather(*(forward(request, i) for i in instances)))}
