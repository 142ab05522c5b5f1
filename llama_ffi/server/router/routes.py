"""The router's routes, as module-level handlers: ``GET /models`` (every model with its state),
``POST /models`` (a download into the ``-hf`` cache) and ``DELETE /models``, ``/models/sse``,
``POST /models/load`` and ``/models/unload``, ``GET /props`` (the router's own, or a model's with
``?model=``), and (``forwarding``, included last) every other route forwarded to the model its
request names (the body's ``model``, or ``?model=``) as an ASGI call: the single-model server
answers, on the same event loop, with nothing in between. The routes reach the fleet through
``RouterDep`` (``app.state.router``)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from llama_ffi.server.errors import ApiError
from llama_ffi.server.native.props import build_info
from llama_ffi.server.openai.models import model_object
from llama_ffi.server.router import hf_cache
from llama_ffi.server.router.catalog import ModelEntry
from llama_ffi.server.router.hosts import Fleet, ModelHost


@dataclasses.dataclass
class RouterState:
    """What the router's routes share: the fleet, how to read the list of models again, and the
    downloads in progress (by the id the model will have) with their tasks (held until done: the
    event loop keeps only weak references)."""

    fleet: Fleet
    reread: Callable[[], list[ModelEntry]]
    downloads: set[str] = dataclasses.field(default_factory=set)
    fetching: set[asyncio.Task] = dataclasses.field(default_factory=set)


def router_of(request: Request) -> RouterState:
    return request.app.state.router


RouterDep = Annotated[RouterState, Depends(router_of)]

router = APIRouter()
forwarding = APIRouter()  # the catch-all: included after every other route


@router.get("/health")
@router.get("/v1/health")
async def health():
    return {"status": "ok"}


@router.get("/models")
@router.get("/v1/models")
async def models(state: RouterDep, reload: str = ""):
    fleet = state.fleet
    if reload:
        fleet.update(state.reread())
        fleet.events.publish("models_reload", "*")
    now = int(time.time())
    listed = [_listing(h, now) for h in fleet.hosts.values()]
    listed += [_downloading(spec, now) for spec in sorted(state.downloads - set(fleet.hosts))]
    return {"object": "list", "data": listed}


@router.get("/models/sse")
async def model_events(state: RouterDep):
    return state.fleet.events.response()


@router.post("/models")
async def download(request: Request, state: RouterDep):
    """Fetch OWNER/NAME[:TAG] into -hf's cache; ``/models/sse`` says when it is there."""
    spec = _body_model(await request.body())
    try:
        model_id = hf_cache.listed_id(spec)
    except ValueError as error:
        raise ApiError(400, str(error), "model") from None
    if model_id in state.fleet.hosts or model_id in state.downloads:
        raise ApiError(400, f"model '{model_id}' already exists", "model")
    state.downloads.add(model_id)
    task = asyncio.ensure_future(_download(state, spec, model_id))
    state.fetching.add(task)
    task.add_done_callback(state.fetching.discard)
    return {"success": True}


async def _download(state: RouterState, spec: str, model_id: str) -> None:
    fleet = state.fleet
    try:
        await run_in_threadpool(hf_cache.download, spec)
    except Exception as error:  # noqa: BLE001 - the listeners hear why; the router goes on
        fleet.events.publish("download_failed", spec, {"error": str(error) or type(error).__name__})
    else:
        fleet.update(state.reread())
        fleet.events.publish("download_finished", spec, {"model": model_id})
    finally:
        state.downloads.discard(model_id)


@router.delete("/models")
async def remove(state: RouterDep, model: str = ""):
    """Unload a model ``-hf`` cached (once its requests end) and delete its files."""
    fleet = state.fleet
    host = fleet.host(model or None)
    if host.entry.source != "cache":
        raise ApiError(400, f"model '{host.entry.id}' is not removable (not from the -hf cache)", "model")
    await fleet.unload(host)
    await run_in_threadpool(hf_cache.remove, host.entry.id)
    fleet.update(state.reread())
    fleet.events.publish("model_remove", host.entry.id)
    return {"success": True}


@router.post("/models/load")
async def load(request: Request, state: RouterDep):
    host = state.fleet.host(_body_model(await request.body()))
    if host.holds_place:
        raise ApiError(400, f"model '{host.entry.id}' is already running", "model")
    asyncio.ensure_future(_quietly(state.fleet.load(host)))  # /models shows it loading, then loaded
    return {"success": True}


@router.post("/models/unload")
async def unload(request: Request, state: RouterDep):
    host = state.fleet.host(_body_model(await request.body()))
    if not host.holds_place:
        raise ApiError(400, f"model '{host.entry.id}' is not running", "model")
    asyncio.ensure_future(_quietly(state.fleet.unload(host)))
    return {"success": True}


@router.get("/props")
async def props(request: Request, state: RouterDep):
    if request.query_params.get("model"):
        return await _forwarded(request, state.fleet)
    return {
        "role": "router",
        "max_instances": state.fleet.models_max,
        "models_autoload": state.fleet.autoload,
        "model_alias": "llama-ffi",
        "model_path": "none",
        "default_generation_settings": {"params": {}, "n_ctx": 0},
        "build_info": build_info(),
        "is_sleeping": False,
    }


@forwarding.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
async def forward(request: Request, state: RouterDep):
    return await _forwarded(request, state.fleet)


async def _forwarded(request: Request, fleet: Fleet) -> Response:
    body = await request.body()
    name = request.query_params.get("model")
    if request.method == "POST" and not name:
        name = _body_model(body)
    host = fleet.host(name)
    autoload = request.query_params.get("autoload")
    app_for = await _acquire(fleet, host, None if autoload is None else autoload in ("1", "true"), request)
    return Forward(fleet, host, app_for, body)


async def _acquire(fleet: Fleet, host: ModelHost, autoload: bool | None, request: Request):
    gone = asyncio.Event()

    async def watch():  # the client leaving while its model waits for a place
        while (await request.receive())["type"] != "http.disconnect":
            pass
        gone.set()

    watcher = asyncio.ensure_future(watch())
    try:
        return await fleet.acquire(host, autoload, gone)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)


class Forward(Response):
    """The rest of a request, answered by its model's app; its place in flight ends with it."""

    def __init__(self, fleet: Fleet, host: ModelHost, app, body: bytes) -> None:
        super().__init__()
        self.fleet, self.host, self.app, self.body_bytes = fleet, host, app, body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        replayed = False

        async def receive_again() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": self.body_bytes, "more_body": False}
            return await receive()

        try:
            await self.app(scope, receive_again, send)
        finally:
            await self.fleet.release(self.host)


def _body_model(body: bytes) -> str | None:
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        raise ApiError(400, "the body is not JSON") from None
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, str) else None


async def _quietly(work) -> None:
    with contextlib.suppress(ApiError):  # a failed load is the model's state, shown by /models
        await work


def _downloading(model_id: str, now: int) -> dict:
    listed = _model(model_id, {"value": "downloading", "args": ["-hf", model_id]}, "cache", now)
    return {**listed, "can_remove": False}


def _listing(host: ModelHost, now: int) -> dict:
    return _model(host.entry.id, host.status(), host.entry.source, now)


def _model(model_id: str, status: dict, source: str, now: int) -> dict:
    return model_object(model_id, now, aliases=[], tags=[], status=status, source=source, can_remove=source == "cache")
