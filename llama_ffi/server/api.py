"""The routes: OpenAI's (``/v1/completions``, ``/v1/chat/completions``, ``/v1/embeddings``,
``/v1/models``) and llama-server's (``/health``, ``/v1/rerank``, ``/tokenize``, ``/detokenize``,
``/infill``, ``/metrics``, ``/slots``). Each one validates its body, calls the ``Llama``'s async API
(the engine decodes every client together; the event loop never waits on a decode) and returns the
shapes the library made."""

from __future__ import annotations

import base64
import contextlib
import hmac
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from llama_ffi import lib
from llama_ffi.high.chat.completion import chat_prompt
from llama_ffi.server import anthropic, errors, native, params, responses, vertex
from llama_ffi.server.agent import Agent
from llama_ffi.server.cors import Cors, Prefix
from llama_ffi.server.errors import ApiError
from llama_ffi.server.handling import awaited, held, parse
from llama_ffi.server.metrics import Metrics
from llama_ffi.server.options import ServerOptions
from llama_ffi.server.schemas import (
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    EmbeddingRequest,
    InfillRequest,
    RerankRequest,
    TokenizeRequest,
)
from llama_ffi.server.sleep import Sleeper
from llama_ffi.server.streaming import EventStream, openai_events

PUBLIC_PATHS = {"/health", "/v1/health"}


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
        return len(self.llm.engine.status().slots)

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


class Gate:
    """API keys (``Authorization: Bearer`` or ``X-Api-Key``) on every path but /health."""

    def __init__(self, app: ASGIApp, keys: tuple[str, ...]) -> None:
        self.app, self.keys = app, keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.keys or scope["path"] in PUBLIC_PATHS:
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        given = headers.get("authorization") or headers.get("x-api-key") or ""
        if given.lower().startswith("bearer "):
            given = given[len("bearer ") :].strip()
        if any(hmac.compare_digest(given.encode(), key.encode()) for key in self.keys):  # constant time
            return await self.app(scope, receive, send)
        error = ApiError(
            401,
            "invalid API key" if given else "an API key is required (Authorization: Bearer KEY)",
            code="invalid_api_key",
        )
        await error.response(scope["path"])(scope, receive, send)


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
    _routes(app, served)
    agent.add_routes(app)
    native.add_routes(app, served)
    anthropic.add_routes(app, served)
    responses.add_routes(app, served)
    if vertex.enabled():  # last: its @requestFormat names every route above
        vertex.add_routes(app, options.api_prefix)
    return app


def _load_in_background(served: Served, load) -> None:
    try:
        served.loaded(load())
    except BaseException as error:  # noqa: BLE001 - kept for /health and the exit status
        served.load_error = error
        errors.log.error("the model could not be loaded: %s", error)


def _routes(app: FastAPI, served: Served) -> None:
    options = served.options

    @app.get("/health")
    @app.get("/v1/health")
    async def health():
        if served.load_error is not None:
            raise ApiError(500, f"the model could not be loaded: {served.load_error}")
        served.ready()
        return {"status": "ok"}

    @app.get("/v1/models")
    @app.get("/models")
    async def models():
        llm = served.ready()
        capabilities = ["completion", "multimodal"] if llm.mtmd is not None else ["completion"]
        return {
            "object": "list",
            # llama-server's Ollama-style list (clients such as Open WebUI read it)
            "models": [
                {
                    "name": served.model_id,
                    "model": served.model_id,
                    "type": "model",
                    "capabilities": capabilities,
                    "details": {"format": "gguf"},
                }
            ],
            "data": [
                {
                    "id": served.model_id,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "llama-ffi",
                    "aliases": sorted(served.aliases),
                    "tags": list(options.tags),
                    "meta": {
                        "n_ctx": int(llm.n_ctx),
                        "n_ctx_train": llm.n_ctx_train,
                        "n_vocab": int(llm.n_vocab),
                        "n_embd": int(llm.n_embd),
                        "n_params": int(lib.llama_model_n_params(llm.loaded_model.ptr)),
                        "size": int(lib.llama_model_size(llm.loaded_model.ptr)),
                        "slots": served.n_slots,
                    },
                }
            ],
        }

    async def generate(request: Request, body, call, stream_shape=None):
        """Run a generating call under a ticket; a stream keeps its ticket until it ends."""
        result, release = await held(request, served, call())
        if not body.stream:
            release()
            served.metrics.finished(result.get("usage"))
            return result
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        seen: dict = {}

        def ended():
            release()
            served.metrics.finished(seen.get("usage"))

        events = openai_events(result, include_usage, seen, stream_shape, timings=body.timings_per_token)
        return EventStream(events, ended)

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await parse(request, CompletionRequest)
        llm = served.accept(body)
        kwargs = params.generation_kwargs(llm, body, options, default_max=16)
        kwargs["model"] = served.model_id
        if body.logprobs is not None:
            kwargs["logprobs"] = body.logprobs
        if body.echo:
            kwargs["echo"] = True
        if body.suffix is not None:
            kwargs["suffix"] = body.suffix
        return await generate(request, body, lambda: llm.acreate_completion(body.prompt, stream=body.stream, **kwargs))

    @app.post("/v1/chat/completions")
    @app.post("/chat/completions")
    async def chat_completions(request: Request):
        body = await parse(request, ChatRequest)
        llm = served.accept(body)
        params.check_media(body.messages, options.media_path)
        kwargs = params.chat_kwargs(llm, body, options)
        kwargs["model"] = served.model_id
        result = await generate(
            request, body, lambda: llm.acreate_chat_completion(body.messages, stream=body.stream, **kwargs)
        )
        if (body.verbose or options.verbose) and isinstance(result, dict):  # llama-server's debugging aid
            result["__verbose"] = {"prompt": chat_prompt(llm, body.messages, **kwargs)[0]}
        return result

    @app.post("/infill")
    async def infill(request: Request):
        body = await parse(request, InfillRequest)
        llm = served.accept(body)
        if body.input_extra:
            raise ApiError(400, "input_extra (repository context) is not supported", "input_extra")
        kwargs = params.generation_kwargs(llm, body, options, default_max=None)
        kwargs["model"] = served.model_id

        def call():
            return llm.acreate_completion(
                body.input_prefix + body.prompt, suffix=body.input_suffix, stream=body.stream, **kwargs
            )

        result = await generate(request, body, call, stream_shape=_infill_chunk)
        if isinstance(result, dict):
            choice = result["choices"][0]
            usage = result["usage"]
            return {
                "content": choice["text"],
                "stop": True,
                "model": served.model_id,
                "finish_reason": choice["finish_reason"],
                "tokens_predicted": usage["completion_tokens"],
                "tokens_evaluated": usage["prompt_tokens"],
            }
        return result

    async def embed(request: Request, body, output_format: str):
        """The body's inputs embedded: normalised (euclidean) unless one vector per token, and
        refused when longer than a batch holds (llama-server's rule)."""
        llm = served.accept(body, embeddings=True)
        inputs = native.embedding_inputs(llm, body.input if body.input is not None else body.content)
        per_token = llm.pooling_type() == lib.LLAMA_POOLING_TYPE_NONE
        work = run_in_threadpool(
            llm.create_embedding, inputs, normalize=not per_token, truncate=False, output_format=output_format
        )
        with served.ticket():
            return await awaited(request, work), per_token

    @app.post("/embeddings")
    async def native_embeddings(request: Request):
        """llama-server's own shape: ``[{"index", "embedding": [vector, ...]}]`` (one per token with
        pooling none)."""
        vectors, per_token = await embed(request, await parse(request, EmbeddingRequest), "array")
        served.metrics.finished(None)  # its tokens are the engine's embedded_tokens
        return [{"index": i, "embedding": v if per_token else [v]} for i, v in enumerate(vectors)]

    @app.post("/v1/embeddings")
    async def embeddings(request: Request):
        body = await parse(request, EmbeddingRequest)
        llm = served.accept(body, embeddings=True)
        if body.dimensions is not None and body.dimensions != int(llm.n_embd):
            raise ApiError(400, f"dimensions: this model's embeddings have {int(llm.n_embd)}", "dimensions")
        if llm.pooling_type() == lib.LLAMA_POOLING_TYPE_NONE:
            raise ApiError(400, "pooling none (one vector per token) is served by /embeddings, not /v1/embeddings")
        out, _ = await embed(request, body, "json")
        out["model"] = served.model_id
        if body.encoding_format == "base64":
            for item in out["data"]:
                item["embedding"] = base64.b64encode(np.asarray(item["embedding"], dtype="<f4").tobytes()).decode()
        served.metrics.finished(None)  # its tokens are the engine's embedded_tokens
        return out

    @app.post("/v1/rerank")
    @app.post("/rerank")
    @app.post("/v1/reranking")
    @app.post("/reranking")
    async def rerank(request: Request):
        body = await parse(request, RerankRequest)
        llm = served.accept(body, embeddings=True, rank=True)
        documents = body.documents if body.documents is not None else body.texts
        if not documents:
            raise ApiError(400, "documents (or TEI's texts) must be a non-empty list", "documents")
        with served.ticket():
            scores = await awaited(request, run_in_threadpool(llm.rank, body.query, documents))
        results = [{"index": i, "relevance_score": s} for i, s in enumerate(scores)]
        results.sort(key=lambda r: -r["relevance_score"])
        if body.top_n is not None:
            results = results[: body.top_n]
        if body.texts is not None and body.documents is None:  # Text Embeddings Inference's shape
            return [{"index": r["index"], "score": r["relevance_score"]} for r in results]
        if body.return_documents:
            for r in results:
                r["document"] = {"text": documents[r["index"]]}
        return {"object": "list", "model": served.model_id, "results": results}

    @app.post("/tokenize")
    async def tokenize(request: Request):
        body = await parse(request, TokenizeRequest)
        llm = served.ready()
        tokens = llm.tokenize(body.content, add_bos=body.add_special, special=body.parse_special)
        if not body.with_pieces:
            return {"tokens": tokens}
        return {"tokens": [{"id": t, "piece": _piece(llm.tokenizer.piece(t, special=True))} for t in tokens]}

    @app.post("/detokenize")
    async def detokenize(request: Request):
        body = await parse(request, DetokenizeRequest)
        llm = served.ready()
        try:
            llm.tokenizer.check_tokens(body.tokens)
        except ValueError as error:
            raise ApiError(400, str(error), "tokens") from None
        return {"content": llm.detokenize(body.tokens, special=True).decode("utf-8", "replace")}

    @app.get("/metrics")
    async def metrics():
        if not options.metrics:
            raise ApiError(501, "this server does not serve metrics: start it with --metrics", code="not_supported")
        llm = served.llm if served.metrics.asleep is not None else served.ready()  # asleep: its last totals
        response = PlainTextResponse(
            served.metrics.prometheus(llm, served.in_flight, served.model_id, options.lora_names),
            media_type="text/plain; version=0.0.4",
        )
        # llama-server's header, spelled as it spells it (clients that read it compare case)
        response.raw_headers.append((b"Process-Start-Time-Unix", str(int(served.started)).encode()))
        return response

    @app.get("/slots")
    async def slots():
        if not options.slots:
            raise ApiError(501, "this server does not serve /slots: start it with --slots", code="not_supported")
        return _slots(served.ready())


def _piece(data: bytes):
    """A token's text, or its bytes where they are not whole UTF-8 (as llama-server shows them)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return list(data)


def _slots(llm) -> list[dict]:
    n_ctx = int(llm.context.n_ctx_seq)  # what one slot holds
    return [
        {"id": s.seq, "n_ctx": n_ctx, "is_processing": s.processing, "n_cached_tokens": s.cached_tokens}
        for s in llm.engine.status().slots
    ]


def _infill_chunk(chunk: dict) -> dict:
    """llama-server's /infill stream: ``{"content", "stop"}`` per chunk."""
    if "prompt_progress" in chunk:
        return {"content": "", "stop": False, "prompt_progress": chunk["prompt_progress"]}
    choice = chunk["choices"][0]
    return {"content": choice["text"], "stop": choice["finish_reason"] is not None, "index": choice["index"]}
