"""The model behind a server's routes (``Served``: the Llama, once loaded, the requests in flight,
the totals), and how a route reaches it: ``ServedDep``, a FastAPI dependency reading the app's state."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Request

from llama_ffi import lib
from llama_ffi.server.errors import ApiError
from llama_ffi.server.metrics import Metrics
from llama_ffi.server.options import ServerOptions


class Served:
    """The Llama behind the routes (None while it loads), the requests in flight and the totals."""

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.llm = None
        self.load_error: BaseException | None = None
        self.in_flight = 0
        self.metrics = Metrics()
        self.started = time.time()
        self.names: set[str] = set()
        self.model_id = options.alias or ""
        self.aliases: set[str] = set()

    def loaded(self, llm) -> None:
        path = Path(llm.model_path)
        # llama-server's --alias a,b: every alias names the model, its id is the first in order
        self.aliases = {a.strip() for a in (self.options.alias or "").split(",") if a.strip()}
        self.model_id = min(self.aliases) if self.aliases else path.name
        self.names = {self.model_id, llm.model_path, path.name, path.stem, *self.aliases}
        self.llm = llm

    def ready(self):
        if self.llm is None:
            raise ApiError(503, "Loading model", headers={"Retry-After": "1"})
        return self.llm

    def check_model(self, name: str | None) -> None:
        """Any name is served by the one model (llama-server's rule: clients send names such as
        "gpt-3.5-turbo"); results name the served model."""

    def accept(self, body, embeddings: bool = False, rank: bool = False):
        """The Llama for ``body``, once the model is loaded, the body names it (or none) and the
        server was started for this task (generation, embeddings, or reranking)."""
        llm = self.ready()
        self.check_model(body.model)
        self.check_task(embeddings, rank)
        return llm

    @property
    def embeddings(self) -> bool:
        return bool(self.llm.context_params.embeddings)

    def check_task(self, embeddings: bool, rank: bool = False) -> None:
        if embeddings != self.embeddings:
            raise ApiError(
                501,
                "this server does not support "
                + (
                    "embeddings: start it with --embeddings"
                    if embeddings
                    else "completions: it was started with --embeddings or --reranking"
                ),
            )
        if rank and self.llm.pooling_type() != lib.LLAMA_POOLING_TYPE_RANK:
            raise ApiError(
                501, "this server does not support reranking: start it with --reranking and a reranking model"
            )

    @property
    def n_slots(self) -> int:
        return self.llm.engine.n_slots

    @contextlib.contextmanager
    def ticket(self):
        """A place among the requests in flight: the slots and a bounded queue; past it, 503."""
        if self.in_flight >= self.n_slots + self.options.queue_size:
            raise ApiError(
                503,
                f"the server is busy: {self.in_flight} requests in flight, the queue is full",
                headers={"Retry-After": "1"},
            )
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1


def served_of(request: Request) -> Served:
    return request.app.state.served


ServedDep = Annotated[Served, Depends(served_of)]
