"""The router's app: its lifespan (the models unloaded at the end, idle ones put to sleep), the
middleware, and its routes (``router.routes``) with the agent's before the catch-all forward."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from llama_ffi.server import errors
from llama_ffi.server.agent import Agent
from llama_ffi.server.auth import Gate
from llama_ffi.server.cors import Cors, Prefix
from llama_ffi.server.router import routes
from llama_ffi.server.router.catalog import ModelEntry
from llama_ffi.server.router.hosts import Fleet


@dataclasses.dataclass(frozen=True)
class RouterOptions:
    api_keys: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ("*",)
    api_prefix: str = ""
    sleep_idle_seconds: float | None = None  # free a model after this long without requests


def create_router_app(
    fleet: Fleet, options: RouterOptions, reread: Callable[[], list[ModelEntry]], agent: Agent | None = None
) -> FastAPI:
    """``reread()``: the list of models again (``GET /models?reload=1``). ``agent``: the tools and
    CORS proxy, served by the router itself (its models' apps have none)."""
    agent = agent or Agent()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        loop = asyncio.get_running_loop()
        app.state.on_exit.append(lambda: loop.call_soon_threadsafe(fleet.events.close))
        await run_in_threadpool(agent.start)
        sleeper = None
        if options.sleep_idle_seconds:
            sleeper = asyncio.create_task(fleet.sleep_idle(options.sleep_idle_seconds))
        yield
        if sleeper is not None:
            sleeper.cancel()
        for host in list(fleet.hosts.values()):  # each waits for its requests in flight
            await fleet.unload(host)
        await run_in_threadpool(agent.close)

    app = FastAPI(title="llama-ffi router", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.on_exit = [agent.abort]  # run at the exit signal, from any thread
    errors.install(app)
    if options.api_keys:
        app.add_middleware(Gate, keys=options.api_keys)
    app.add_middleware(Cors, origins=options.cors_origins)
    if options.api_prefix:
        app.add_middleware(Prefix, prefix=options.api_prefix)
    app.state.router = routes.RouterState(fleet, reread)
    app.include_router(routes.router)
    agent.add_routes(app)  # before the catch-all
    app.include_router(routes.forwarding)
    return app
