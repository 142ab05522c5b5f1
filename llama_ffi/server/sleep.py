"""``--sleep-idle-seconds`` for one model: after that long without a request the model is freed
(its memory given back); ``/health``, ``/props`` (``is_sleeping``), ``/models`` and ``/metrics``
answer without waking it (as they did just before; the metrics' counters go on across sleeps); any
other request loads it again first and is then served as usual."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# paths a sleeping model answers as it did just before it slept; /metrics from its last totals too
REMEMBERED = ("/health", "/v1/health", "/props", "/models", "/v1/models")
QUIET = (*REMEMBERED, "/metrics")  # they never wake it


class Sleeper:
    """The innermost middleware of the single-model app (under the API keys and CORS): ``served``
    is the app's ``Served``; ``load()`` makes the Llama again on waking."""

    def __init__(self, app: ASGIApp, served, load: Callable[[], object], seconds: float) -> None:
        self.app, self.served, self.load, self.seconds = app, served, load, seconds
        self.in_flight = 0
        self.last_used = time.monotonic()
        self.asleep: dict[str, tuple[int, list, bytes]] | None = None  # path -> the answer it gave
        self.lock: asyncio.Lock | None = None
        self.watcher: asyncio.Task | None = None
        self.outer = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        self.outer = scope.get("app", self.outer)  # the app the routes read their state from
        if self.lock is None:
            self.lock = asyncio.Lock()
            self.watcher = asyncio.ensure_future(self._watch())
        if scope["path"] in QUIET:
            if self.asleep is not None and scope["path"] in self.asleep:
                return await _replay(self.asleep[scope["path"]], send)
            return await self.app(scope, receive, send)
        self.in_flight += 1
        try:
            async with self.lock:
                if self.asleep is not None:
                    await self._wake()
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
            self.last_used = time.monotonic()

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(min(0.25, self.seconds / 4))
            idle = time.monotonic() - self.last_used
            if self.asleep is None and not self.in_flight and idle >= self.seconds and self.served.llm is not None:
                async with self.lock:
                    if not self.in_flight and self.asleep is None:
                        await self._sleep()

    async def _sleep(self) -> None:
        answers = {path: await _call(self.app, path, self.outer) for path in REMEMBERED}
        self.asleep = answers
        await run_in_threadpool(self.served.metrics.retire, self.served.llm)
        llm, self.served.llm = self.served.llm, None
        await run_in_threadpool(llm.close)
        status, headers, body = answers["/props"]
        if status == 200:  # it says it sleeps once its memory is back
            props = json.loads(body)
            props["is_sleeping"] = True
            body = json.dumps(props).encode()
            headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
            answers["/props"] = (status, [*headers, (b"content-length", str(len(body)).encode())], body)

    async def _wake(self) -> None:
        llm = await run_in_threadpool(self.load)
        self.served.loaded(llm)
        self.asleep = None


async def _call(app: ASGIApp, path: str, outer) -> tuple[int, list, bytes]:
    """``GET path`` of ``app``, in this process: its status, headers and body. ``outer``: the
    FastAPI app (the routes read its state, as a request that came through it does)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [],
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 0),
        "app": outer,
    }
    out: dict = {"status": 500, "headers": [], "body": b""}

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            out["status"], out["headers"] = message["status"], list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")

    await app(scope, receive, send)
    return out["status"], out["headers"], out["body"]


async def _replay(answer: tuple[int, list, bytes], send: Send) -> None:
    status, headers, body = answer
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
