"""The tools a server offers (``--tools`` names the built-in ones, or ``all``; MCP servers add
theirs) and one call of one of them, where it runs (``--tools-runtime``, or a request's
``x-tool-runtime``) and in which directory (``x-tool-cwd``, which wins over a ``cwd`` argument:
the client sets it, not the model)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from llama_ffi.server.agent import files, runtime, search, shell
from llama_ffi.server.agent.mcp import McpServer, ServerSpec
from llama_ffi.server.agent.tool import Call, Tool, ToolError

BUILTIN: dict[str, Tool] = {t.name: t for t in (*files.TOOLS, *search.TOOLS, *shell.TOOLS)}


class UnknownTool(LookupError):
    pass


class NotStreamable(LookupError):
    pass


def builtin_names(spec: str | None) -> list[str]:
    """``--tools``: ``all`` or a comma-separated list of built-in names (an unknown one is an error)."""
    names = [n.strip() for n in (spec or "").split(",") if n.strip()]
    if names == ["all"]:
        return list(BUILTIN)
    unknown = [n for n in names if n not in BUILTIN]
    if unknown:
        raise ValueError(f"--tools: unknown tool {', '.join(unknown)} (available: all, {', '.join(BUILTIN)})")
    return names


class Toolbox:
    def __init__(
        self, builtin: Sequence[str] = (), runtime_spec: str | None = None, mcp_servers: Sequence[ServerSpec] = ()
    ) -> None:
        self.place = runtime.parse(runtime_spec)  # a bad spec fails the start, not a call
        self.tools: dict[str, Tool] = {name: BUILTIN[name] for name in builtin}
        self.servers = [McpServer(spec) for spec in mcp_servers]
        self.calls: set[Call] = set()
        self.lock = threading.Lock()

    def start(self) -> None:
        """List every MCP server's tools (together: one slow server delays the start once)."""
        threads = [threading.Thread(target=s.warm_up, name=f"mcp-warm-up-{s.spec.name}") for s in self.servers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        taken = set(self.tools)
        for server in self.servers:
            self.tools.update({t.name: t for t in server.as_tools(taken)})

    def listing(self) -> list[dict]:
        return [tool.listing() for tool in self.tools.values()]

    def tool(self, name: str, streamed: bool = False) -> Tool:
        """The tool ``name`` names: ``UnknownTool``, or ``NotStreamable`` when it cannot stream."""
        tool = self.tools.get(name)
        if tool is None:
            raise UnknownTool(f"unknown tool: {name!r}")
        if streamed and not tool.streams:
            raise NotStreamable(f"tool {name!r} cannot stream its output")
        return tool

    def invoke(
        self,
        name: str,
        params: dict,
        cwd: str | None = None,
        runtime_spec: str | None = None,
        on_chunk: Callable[[str], None] | None = None,
        cancelled: threading.Event | None = None,
    ) -> dict:
        """The tool's answer, or ``{"error": ...}`` for a call it refused. ``UnknownTool``,
        ``NotStreamable`` and ``runtime.RuntimeSpecError`` are the request's faults."""
        tool = self.tool(name, streamed=on_chunk is not None)
        place = runtime.parse(runtime_spec, from_header=True) if runtime_spec else self.place
        if tool.kind == "server":
            params = dict(params)
            model_cwd = params.pop("cwd", None)
            if cwd is None and isinstance(model_cwd, str) and model_cwd:
                cwd = model_cwd
        call = Call(place, cwd, on_chunk, cancelled or threading.Event())
        with self.lock:
            self.calls.add(call)
        try:
            return tool.run(params, call)
        except (ToolError, OSError) as error:  # OSError: a listing too large, a runtime that failed
            return {"error": str(error)}
        finally:
            with self.lock:
                self.calls.discard(call)

    def abort(self) -> None:
        """The server is stopping: running commands are killed and MCP calls answered at once."""
        with self.lock:
            for call in self.calls:
                call.cancelled.set()
        for server in self.servers:
            server.close()

    def close(self) -> None:
        self.abort()
        self.place.close()
