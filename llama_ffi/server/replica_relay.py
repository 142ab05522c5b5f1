"""Prefix affinity for replicas (``llama-ffi serve --ray --affinity prefix``). Ray's HTTP proxy
hands a request router the request's headers but not its body, so requests that share a prompt
cannot be told apart there. Here a small ingress deployment reads the body, names the request's
prefix (``prefix_key``: a chat's system prompt and first user turn, a completion's first
``PREFIX_CHARS`` characters, or the ``x-session-id`` header when the client gives one) and hands the
request to the model deployment through a handle; that deployment's router (``session_router``)
sends one key to one replica while it has room, so the turns of a conversation and the requests
that share a long system prompt find their prefix in that replica's slot and prompt caches. The
replica runs its ``llama-ffi serve`` app on the request and streams the response's ASGI messages
back (``relay``); the ingress sends them on unchanged. Imported where Ray runs it."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator

PREFIX_CHARS = 2048
SESSION_HEADER = b"x-session-id"
SCOPE_KEYS = ("type", "asgi", "http_version", "method", "scheme", "path", "raw_path", "query_string", "root_path")


def prefix_key(headers: list[tuple[bytes, bytes]], body: bytes) -> str | None:
    """What requests that should share a replica have in common; None: no preference."""
    session = next((v for k, v in headers if k.lower() == SESSION_HEADER), None)
    if session is not None:
        return "session:" + session.decode("latin-1")
    try:
        data = json.loads(body or b"null")
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    parts = [data.get("model"), data.get("system"), data.get("instructions")]
    messages = data.get("messages")
    if isinstance(messages, list):  # the system prompt and the first user turn: a conversation's start
        parts += messages[:2]
    else:
        parts += [data.get(field) for field in ("prompt", "input", "content")]
    text = json.dumps([p for p in parts if p is not None], sort_keys=True, ensure_ascii=False)
    if text in ("[]", json.dumps([data.get("model")])):
        return None
    return "prefix:" + hashlib.sha1(text[:PREFIX_CHARS].encode()).hexdigest()


def portable_scope(scope: dict) -> dict:
    """The parts of an HTTP scope the model's app reads, in a form Ray can send to a replica."""
    out = {k: scope[k] for k in SCOPE_KEYS if k in scope}
    out["headers"] = [(bytes(k), bytes(v)) for k, v in scope.get("headers", ())]
    out["client"], out["server"] = scope.get("client"), scope.get("server")
    return out


async def relay(app, scope: dict, body: bytes) -> AsyncIterator[dict]:
    """Run ``app`` on one request; its response's messages as they come. Closing this stops it."""
    messages: asyncio.Queue = asyncio.Queue()
    delivered = False

    async def receive() -> dict:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # nothing more comes: the request ends when the caller leaves
        return {"type": "http.disconnect"}

    async def run() -> None:
        try:
            await app({**scope, "state": {}}, receive, messages.put)
        finally:
            messages.put_nowait(None)

    task = asyncio.ensure_future(run())
    try:
        while (message := await messages.get()) is not None:
            yield message
        await task  # its exception, if it failed
    finally:
        task.cancel()


def ingress_response(model_handle, key: str | None, body: bytes):
    """The ingress's answer: the model deployment's response, relayed message by message."""
    from starlette.responses import Response

    class Relayed(Response):
        async def __call__(self, scope, receive, send) -> None:
            stream = model_handle.options(stream=True).relay.remote(key, portable_scope(scope), body)
            async for message in stream:
                await send(message)

    return Relayed()
