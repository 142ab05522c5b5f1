"""llama-server's routes for agents in the web UI: ``GET /tools`` (the tools offered) and
``POST /tools`` (``{"tool", "params", "stream"}``: the answer as JSON, or its output as events
``{"chunk"}`` then ``{"done"}``), 403 when no tool is offered; ``/cors-proxy?url=`` (403 unless
``--ui-mcp-proxy``), which forwards a request to another HTTP server with only the headers the
client names as ``x-llama-server-proxy-header-NAME`` (never its key, cookies or credentials)."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import threading
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from llama_ffi.server.agent.runtime import RuntimeSpecError
from llama_ffi.server.agent.toolbox import NotStreamable, Toolbox, UnknownTool
from llama_ffi.server.errors import ApiError
from llama_ffi.server.streaming import EventStream, event

PROXY_HEADER = "x-llama-server-proxy-header-"
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "set-cookie", "upgrade"}
PROXY_TIMEOUT = 600.0


router = APIRouter()


def agent_of(request: Request):
    """The app's ``Agent`` (its toolbox and whether the proxy is on): ``app.state.agent``."""
    return request.app.state.agent


AgentDep = Annotated[Any, Depends(agent_of)]


@router.get("/tools")
async def list_tools(agent: AgentDep):
    if agent.toolbox is None:
        raise ApiError(403, "no tools are offered: start the server with --tools or MCP servers")
    return agent.toolbox.listing()


@router.post("/tools")
async def call_tool(request: Request, agent: AgentDep):
    toolbox = agent.toolbox
    if toolbox is None:
        raise ApiError(403, "no tools are offered: start the server with --tools or MCP servers")
    name, params, stream = _tool_body(await request.body())
    cwd = request.headers.get("x-tool-cwd") or None
    spec = request.headers.get("x-tool-runtime") or None
    if stream:
        return _streamed(toolbox, name, params, cwd, spec)
    try:
        return await run_in_threadpool(toolbox.invoke, name, params, cwd, spec)
    except (UnknownTool, NotStreamable) as error:
        raise ApiError(404, str(error), "tool") from None
    except RuntimeSpecError as error:
        raise ApiError(500, str(error)) from None


@router.api_route("/cors-proxy", methods=["GET", "POST"])
async def proxy(request: Request, agent: AgentDep):
    if not agent.cors_proxy:
        raise ApiError(403, "the CORS proxy is off (--ui-mcp-proxy)")
    return await _proxied(request)


def _tool_body(raw: bytes) -> tuple[str, dict, bool]:
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        raise ApiError(400, "the body is not JSON") from None
    if not isinstance(body, dict) or not isinstance(body.get("tool"), str):
        raise ApiError(400, "'tool' must name a tool", "tool")
    params = body.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ApiError(400, "'params' must be an object", "params")
    return body["tool"], params, body.get("stream") is True


def _streamed(toolbox: Toolbox, name: str, params: dict, cwd: str | None, spec: str | None) -> EventStream:
    try:
        toolbox.tool(name, streamed=True)  # refused before the stream starts: a 404, not an event
    except (UnknownTool, NotStreamable) as error:
        raise ApiError(404, str(error), "tool") from None
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    stop = threading.Event()

    def on_chunk(text: str) -> None:
        if text:
            loop.call_soon_threadsafe(queue.put_nowait, ("chunk", text))

    def work() -> None:
        try:
            answer = toolbox.invoke(name, params, cwd, spec, on_chunk, cancelled=stop)  # stop: the client left
            ending = {"done": True, **({"error": answer["error"]} if "error" in answer else {})}
        except Exception as error:  # noqa: BLE001 - the stream ends with it either way
            ending = {"done": True, "error": str(error) or type(error).__name__}
        loop.call_soon_threadsafe(queue.put_nowait, ("done", ending))

    async def events():
        worker = loop.run_in_executor(None, work)
        try:
            while True:
                kind, payload = await queue.get()
                if kind == "done":
                    yield event(payload)
                    return
                yield event({"chunk": payload})
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.shield(worker)

    return EventStream(events(), stop.set)


async def _proxied(request: Request) -> Response:
    target = request.query_params.get("url", "")
    parts = urlsplit(target)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ApiError(400, "url must be an http or https URL", "url")
    headers = {
        key[len(PROXY_HEADER) :]: value
        for key, value in request.headers.items()
        if key.lower().startswith(PROXY_HEADER) and len(key) > len(PROXY_HEADER)
    }
    body = await request.body() if request.method == "POST" else None
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname, parts.port, timeout=PROXY_TIMEOUT)

    def open_answer() -> http.client.HTTPResponse:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request(request.method, path, body=body, headers=headers)
        return conn.getresponse()

    try:
        answer = await run_in_threadpool(open_answer)
    except (OSError, http.client.HTTPException) as error:
        conn.close()
        raise ApiError(502, f"the proxied server did not answer: {error}") from None
    kept = {k: v for k, v in answer.getheaders() if k.lower() not in HOP_BY_HOP}
    if answer.status in (204, 304):
        conn.close()
        return Response(status_code=answer.status, headers=kept)

    async def chunks():  # as they come: an MCP server's event stream is relayed live
        try:
            while chunk := await run_in_threadpool(answer.read1, 65536):
                yield chunk
        finally:
            conn.close()

    return StreamingResponse(chunks(), status_code=answer.status, headers=kept)
