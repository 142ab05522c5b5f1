"""One tool as the ``/tools`` API lists and calls it, and what a call carries: where it runs, its
working directory, and (for a streamed call) where its output goes as it comes."""

from __future__ import annotations

import dataclasses
import posixpath
import threading
from collections.abc import Callable
from typing import Any

from llama_ffi.server.agent.runtime import Host, Remote


class ToolError(Exception):
    """A call the tool refuses (bad arguments, a missing file): the caller gets ``{"error": ...}``
    with status 200, so that a model reads it and tries again."""


@dataclasses.dataclass(eq=False)  # each call is its own (the toolbox keeps a set of those running)
class Call:
    place: Host | Remote
    cwd: str | None = None  # relative paths resolve against it (the x-tool-cwd header wins over params)
    on_chunk: Callable[[str], None] | None = None  # a streamed call's output, as it comes
    cancelled: threading.Event = dataclasses.field(default_factory=threading.Event)

    def path(self, params: dict, key: str = "path", default: str | None = None) -> str:
        value = params.get(key, default)
        if not isinstance(value, str) or not value:
            raise ToolError(f"'{key}' must be a non-empty string")
        if posixpath.isabs(value) or self.cwd is None:
            return value
        return posixpath.join(self.cwd, value)


@dataclasses.dataclass
class Tool:
    name: str
    display_name: str
    description: str
    parameters: dict  # JSON schema of the arguments
    run: Callable[[dict, Call], dict]
    writes: bool = False  # may change something (the UI asks before calling it)
    streams: bool = False  # can send its output as it comes (``"stream": true``)
    kind: str = "server"  # "server" (built in) or "mcp"

    def listing(self) -> dict:
        return {
            "tool": self.name,
            "display_name": self.display_name,
            "type": self.kind,
            "permissions": {"write": self.writes},
            "definition": {
                "type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
            },
        }


def schema(required: tuple[str, ...] = (), **properties: tuple[str, str]) -> dict:
    """An object schema from ``name=(json type, description)``."""
    return {
        "type": "object",
        "properties": {k: {"type": t, "description": d} for k, (t, d) in properties.items()},
        "required": list(required),
    }


def integer(params: dict, key: str, default: int, low: int, high: int | None = None) -> int:
    value = params.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ToolError(f"'{key}' must be an integer, got {value!r}")
    if value < low:
        raise ToolError(f"invalid {key}: {int(value)} (expected {low} or more)")
    return int(value) if high is None else min(int(value), high)


def text(params: dict, key: str, default: str | None = None) -> Any:
    value = params.get(key, default)
    if value is not None and not isinstance(value, str):
        raise ToolError(f"'{key}' must be a string, got {type(value).__name__}")
    return value
