"""The Messages API's request bodies (``/v1/messages``, ``/v1/messages/count_tokens``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, StrictBool, StrictInt, StrictStr

from llama_ffi.server.schemas import Body


class MessagesRequest(Body):
    model: StrictStr | None = None
    max_tokens: StrictInt = Field(ge=1)
    messages: list[dict[str, Any]]  # may be empty, as llama-server allows: the model starts the talk
    system: StrictStr | list[dict[str, Any]] | None = None
    stop_sequences: list[StrictStr] | None = None
    stream: StrictBool = False
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: StrictInt | None = Field(None, ge=0)
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None


class CountRequest(Body):
    model: StrictStr | None = None
    messages: list[dict[str, Any]]
    system: StrictStr | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
