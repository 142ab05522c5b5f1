"""The routes of llama-server's own API, as module-level handlers on one ``APIRouter``."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from pydantic import StrictStr
from starlette.concurrency import run_in_threadpool

from llama_ffi.high.chat.completion import chat_prompt
from llama_ffi.high.engine import results
from llama_ffi.high.grammar import LlamaGrammar
from llama_ffi.server import errors, params
from llama_ffi.server.errors import ApiError
from llama_ffi.server.handling import awaited, embed, generate, parse
from llama_ffi.server.native.completion import NativeRequest, drain, events, final
from llama_ffi.server.native.props import props
from llama_ffi.server.prompt_forms import prompts_of
from llama_ffi.server.schemas import (
    Body,
    ChatRequest,
    DetokenizeRequest,
    EmbeddingRequest,
    InfillRequest,
    LoraScales,
    RerankRequest,
    TokenizeRequest,
)
from llama_ffi.server.served import ServedDep
from llama_ffi.server.streaming import Clock, EventStream

router = APIRouter()


class SlotFile(Body):
    filename: StrictStr


def slot_file_name(name: str) -> str:
    """A slot file's name, refused unless it is a plain file name (nothing outside the folder)."""
    plain = os.path.basename(name) == name and name not in ("", ".", "..") and not name.startswith(".")
    if not plain or "\\" in name or any(ord(ch) < 32 for ch in name) or len(name.encode()) > 255:
        raise ApiError(400, f"filename must be a plain file name, got {name!r}", "filename")
    return name


@router.get("/health")
@router.get("/v1/health")
async def health(served: ServedDep):
    if served.load_error is not None:
        raise ApiError(500, f"the model could not be loaded: {served.load_error}")
    served.ready()
    return {"status": "ok"}


@router.get("/props")
async def get_props(served: ServedDep):
    return props(served.ready(), served)


@router.post("/slots/{slot_id}")
async def slot_action(slot_id: int, request: Request, served: ServedDep, action: str = ""):
    """llama-server's slot files: ``?action=save|restore`` with ``{"filename"}`` (a plain name
    under --slot-save-path), ``?action=erase``."""
    options = served.options
    if not options.slot_save_path:
        raise ApiError(501, "this server does not save slots: start it with --slot-save-path", code="not_supported")
    llm = served.ready()
    started = time.perf_counter()
    try:
        if action == "erase":
            return {"id_slot": slot_id, "n_erased": await run_in_threadpool(llm.slot_files.erase, slot_id)}
        if action not in ("save", "restore"):
            raise ApiError(400, f"action must be save, restore or erase, got {action!r}", "action")
        filename = (await parse(request, SlotFile)).filename
        path = os.path.join(options.slot_save_path, slot_file_name(filename))
        if action == "save":
            n = await run_in_threadpool(llm.slot_files.save, slot_id, path)
            done = {"n_saved": n, "n_written": os.path.getsize(path)}
        else:
            if not os.path.isfile(path):
                raise ApiError(400, f"no slot file named {filename!r}", "filename")
            n = await run_in_threadpool(llm.slot_files.restore, slot_id, path)
            done = {"n_restored": n, "n_read": os.path.getsize(path)}
    except ValueError as error:
        raise errors.from_library(error) from None
    elapsed = {f"{action}_ms": (time.perf_counter() - started) * 1e3}
    return {"id_slot": slot_id, "filename": filename, **done, "timings": elapsed}


@router.get("/lora-adapters")
async def lora_adapters(served: ServedDep):
    """The --lora adapters by id, with the scale requests that name none run them at."""
    llm = served.ready()
    paths, scales = llm.loras, {a["name"]: a["scale"] for a in llm.adapters.default_loras()}
    return [
        {"id": i, "path": paths[name]["path"], "scale": scales.get(name, 0.0)}
        for i, name in enumerate(served.options.lora_names)
    ]


@router.post("/lora-adapters")
async def set_lora_adapters(request: Request, served: ServedDep):
    """New default scales (``[{"id", "scale"}]``; an adapter left out is off), as llama-server."""
    body = await parse(request, LoraScales)
    llm = served.ready()
    active = params.adapters(served.options.lora_names, body)
    try:
        llm.adapters.set_default_loras(active)
    except ValueError as error:
        raise errors.from_library(error) from None
    return {"success": True}


async def rendered(request: Request, served) -> tuple[str, int]:
    body = await parse(request, ChatRequest)
    llm = served.accept(body)
    try:
        typed, chat = params.chat_request(llm, body, served.options)
        return chat_prompt(llm, body.messages, typed, **chat)
    except (ValueError, TypeError) as error:
        raise errors.from_library(error) from None


@router.post("/apply-template")
async def apply_template(request: Request, served: ServedDep):
    return {"prompt": (await rendered(request, served))[0]}


@router.post("/chat/completions/input_tokens")
@router.post("/v1/chat/completions/input_tokens")
async def input_tokens(request: Request, served: ServedDep):
    return {"input_tokens": (await rendered(request, served))[1]}


@router.post("/completion")
@router.post("/completions")
async def native_completion(request: Request, served: ServedDep):
    body = await parse(request, NativeRequest)
    llm = served.accept(body)
    prompt = body.prompt if body.prompt is not None else body.content
    if prompt is None:
        raise ApiError(400, "prompt is required", "prompt")
    typed = params.generation_request(
        llm, body, served.options, None, logprobs=body.n_probs or None, model=served.model_id
    )
    try:
        if body.json_schema is not None and typed.grammar is None:
            typed = dataclasses.replace(typed, grammar=LlamaGrammar.from_json_schema(body.json_schema, verbose=False))
        the_call = results.call_of(llm, prompts_of(llm, prompt), typed)
    except (ValueError, TypeError) as error:  # the library's refusals, shaped for the client
        raise errors.from_library(error) from None
    clock = Clock()
    if not body.stream:
        with served.ticket():
            await awaited(request, drain(the_call, clock))
        served.metrics.finished(the_call.usage())
        out = [final(llm, the_call, c, body, served.model_id, clock, False) for c in the_call.choices]
        return out[0] if len(out) == 1 else out
    stack = contextlib.ExitStack()
    stack.enter_context(served.ticket())
    stack.callback(lambda: served.metrics.finished(the_call.usage()))  # however the stream ended
    return EventStream(events(llm, the_call, body, served.model_id, clock), stack.close)


@router.post("/infill")
async def infill(request: Request, served: ServedDep):
    body = await parse(request, InfillRequest)
    llm = served.accept(body)
    if body.input_extra:
        raise ApiError(400, "input_extra (repository context) is not supported", "input_extra")
    typed = params.generation_request(llm, body, served.options, None, model=served.model_id, suffix=body.input_suffix)

    def call():
        return results.acomplete(llm, body.input_prefix + body.prompt, typed)

    result = await generate(request, served, body, call, stream_shape=_infill_chunk)
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


def _infill_chunk(chunk: dict) -> dict:
    """llama-server's /infill stream: ``{"content", "stop"}`` per chunk."""
    if "prompt_progress" in chunk:
        return {"content": "", "stop": False, "prompt_progress": chunk["prompt_progress"]}
    choice = chunk["choices"][0]
    return {"content": choice["text"], "stop": choice["finish_reason"] is not None, "index": choice["index"]}


@router.post("/embeddings")
async def native_embeddings(request: Request, served: ServedDep):
    """llama-server's own shape: ``[{"index", "embedding": [vector, ...]}]`` (one per token with
    pooling none)."""
    vectors, per_token = await embed(request, served, await parse(request, EmbeddingRequest), "array")
    served.metrics.finished(None)  # its tokens are the engine's embedded_tokens
    return [{"index": i, "embedding": v if per_token else [v]} for i, v in enumerate(vectors)]


@router.post("/v1/rerank")
@router.post("/rerank")
@router.post("/v1/reranking")
@router.post("/reranking")
async def rerank(request: Request, served: ServedDep):
    body = await parse(request, RerankRequest)
    llm = served.accept(body, embeddings=True, rank=True)
    documents = body.documents if body.documents is not None else body.texts
    if not documents:
        raise ApiError(400, "documents (or TEI's texts) must be a non-empty list", "documents")
    with served.ticket():
        scores = await awaited(request, run_in_threadpool(llm.rank, body.query, documents))
    ranked = [{"index": i, "relevance_score": s} for i, s in enumerate(scores)]
    ranked.sort(key=lambda r: -r["relevance_score"])
    if body.top_n is not None:
        ranked = ranked[: body.top_n]
    if body.texts is not None and body.documents is None:  # Text Embeddings Inference's shape
        return [{"index": r["index"], "score": r["relevance_score"]} for r in ranked]
    if body.return_documents:
        for r in ranked:
            r["document"] = {"text": documents[r["index"]]}
    return {"object": "list", "model": served.model_id, "results": ranked}


@router.post("/tokenize")
async def tokenize(request: Request, served: ServedDep):
    body = await parse(request, TokenizeRequest)
    llm = served.ready()
    tokens = llm.tokenize(body.content, add_bos=body.add_special, special=body.parse_special)
    if not body.with_pieces:
        return {"tokens": tokens}
    return {"tokens": [{"id": t, "piece": _piece(llm.tokenizer.piece(t, special=True))} for t in tokens]}


def _piece(data: bytes):
    """A token's text, or its bytes where they are not whole UTF-8 (as llama-server shows them)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return list(data)


@router.post("/detokenize")
async def detokenize(request: Request, served: ServedDep):
    body = await parse(request, DetokenizeRequest)
    llm = served.ready()
    try:
        llm.tokenizer.check_tokens(body.tokens)
    except ValueError as error:
        raise ApiError(400, str(error), "tokens") from None
    return {"content": llm.detokenize(body.tokens, special=True).decode("utf-8", "replace")}


@router.get("/metrics")
async def metrics(served: ServedDep):
    options = served.options
    if not options.metrics:
        raise ApiError(501, "this server does not serve metrics: start it with --metrics", code="not_supported")
    llm = served.llm if served.metrics.asleep is not None else served.ready()  # asleep: its last totals
    # in a thread: the engine's status is a snapshot its loop makes in its turn
    text = await run_in_threadpool(
        served.metrics.prometheus, llm, served.in_flight, served.model_id, options.lora_names
    )
    response = PlainTextResponse(text, media_type="text/plain; version=0.0.4")
    # llama-server's header, spelled as it spells it (clients that read it compare case)
    response.raw_headers.append((b"Process-Start-Time-Unix", str(int(served.started)).encode()))
    return response


@router.get("/slots")
async def slots(served: ServedDep):
    if not served.options.slots:
        raise ApiError(501, "this server does not serve /slots: start it with --slots", code="not_supported")
    llm = served.ready()
    n_ctx = int(llm.context.n_ctx_seq)  # what one slot holds
    status = await run_in_threadpool(llm.engine.status)  # a snapshot the engine's loop makes in its turn
    return [
        {"id": s.seq, "n_ctx": n_ctx, "is_processing": s.processing, "n_cached_tokens": s.cached_tokens}
        for s in status.slots
    ]
