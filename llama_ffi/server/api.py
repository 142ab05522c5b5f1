"""The app factory: a FastAPI app serving one model, made of the middleware (idle sleep, API keys,
CORS, an API prefix) and one router per API — OpenAI's (``server.openai``), llama-server's own
(``server.native``), Anthropic's Messages (``server.anthropic``), OpenAI's Responses
(``server.responses``), the agent tools (``server.agent``) and Vertex AI's prediction route. The
routes reach the model through ``app.state.served`` (``server.served``)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from llama_ffi.server import anthropic, errors, native, openai, responses, vertex
from llama_ffi.server.agent import Agent
from llama_ffi.server.auth import Gate
from llama_ffi.server.cors import Cors, Prefix
from llama_ffi.server.options import ServerOptions
from llama_ffi.server.served import Served
from llama_ffi.server.sleep import Sleeper


def create_app(
    load: Callable[[], object],
    options: ServerOptions,
    load_now: bool = False,
    owns_llm: bool = False,
    agent: Agent | None = None,
) -> FastAPI:
    """``load`` makes the Llama: at once (``load_now``), or in a thread at start-up so that /health
    answers 503 meanwhile. ``owns_llm``: close it when the server stops (waiting for requests).
    ``agent``: the tools and CORS proxy served beside the model (none: /tools answers 403)."""
    served = Served(options)
    agent = agent or Agent()
    if load_now:
        served.loaded(load())

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        await run_in_threadpool(agent.start)  # MCP servers list their tools before the first request
        if served.llm is None:
            threading.Thread(
                target=_load_in_background, args=(served, load), name="llama-ffi-load", daemon=True
            ).start()
        yield
        await run_in_threadpool(agent.close)
        if owns_llm and served.llm is not None:
            await run_in_threadpool(served.llm.close)

    app = FastAPI(title="llama-ffi", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.served = served
    app.state.on_exit = [agent.abort]  # run at the exit signal, from any thread
    errors.install(app)
    if options.sleep_idle_seconds is not None:  # innermost: under the API keys and CORS
        if options.sleep_idle_seconds <= 0:
            raise ValueError(f"--sleep-idle-seconds must be > 0, got {options.sleep_idle_seconds}")
        app.add_middleware(Sleeper, served=served, load=load, seconds=options.sleep_idle_seconds)
    if options.api_keys:
        app.add_middleware(Gate, keys=tuple(options.api_keys))
    app.add_middleware(Cors, origins=options.cors_origins)  # before the key: a preflight needs none
    if options.api_prefix:
        app.add_middleware(Prefix, prefix=options.api_prefix)
    routers = [api.router for api in (openai, native, anthropic, responses)]
    for router in routers:
        app.include_router(router)
    agent.add_routes(app)
    if vertex.enabled():  # last: its @requestFormat names every route above
        from llama_ffi.server.agent import routes as agent_routes

        named = [*routers, agent_routes.router]
        vertex.add_routes(app, options.api_prefix, [route for router in named for route in router.routes])
    return app


def _load_in_background(served: Served, load) -> None:
    try:
        served.loaded(load())
    except BaseException as error:  # noqa: BLE001 - kept for /health and the exit status
        served.load_error = error
        errors.log.error("the model could not be loaded: %s", error)
