"""The Responses API's request body, and the responses kept for ``previous_response_id``."""

from __future__ import annotations

import collections
import threading
from typing import Any

from pydantic import Field, StrictBool, StrictInt, StrictStr

from llama_ffi.server.errors import ApiError
from llama_ffi.server.schemas import Body

KEPT = 1024  # stored responses (least recently stored go first)


class ResponsesRequest(Body):
    model: StrictStr | None = None
    input: StrictStr | list[dict[str, Any]] = ""
    instructions: StrictStr | None = None
    max_output_tokens: StrictInt | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: StrictStr | dict[str, Any] | None = None
    stream: StrictBool = False
    store: StrictBool = True
    previous_response_id: StrictStr | None = None
    text: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    parallel_tool_calls: StrictBool = True
    timings_per_token: StrictBool = False  # llama-server's: speeds on text deltas and the end
    return_progress: StrictBool = False  # llama-server's: prompt progress on response.in_progress


class Store:
    """Responses kept for ``previous_response_id`` and ``GET``: the response and the conversation
    up to and including it (as chat messages)."""

    def __init__(self, limit: int = KEPT) -> None:
        self.limit = limit
        self._items: collections.OrderedDict[str, tuple[dict, list[dict]]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def put(self, response: dict, conversation: list[dict]) -> None:
        with self._lock:
            self._items[response["id"]] = (response, conversation)
            while len(self._items) > self.limit:
                self._items.popitem(last=False)

    def get(self, rid: str) -> tuple[dict, list[dict]]:
        with self._lock:
            found = self._items.get(rid)
        if found is None:
            raise ApiError(
                404,
                f"no response with id {rid!r} (it was not stored, or it was deleted)",
                "previous_response_id",
                "not_found",
            )
        return found

    def delete(self, rid: str) -> None:
        with self._lock:
            if self._items.pop(rid, None) is None:
                raise ApiError(404, f"no response with id {rid!r}", None, "not_found")
