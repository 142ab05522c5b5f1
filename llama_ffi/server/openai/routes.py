"""The routes of OpenAI's API, as module-level handlers on one ``APIRouter``."""

from __future__ import annotations

import base64
import time

import numpy as np
from fastapi import APIRouter, Request

from llama_ffi import lib
from llama_ffi.high.chat.completion import achat_completion, chat_prompt
from llama_ffi.high.engine import results
from llama_ffi.server import params
from llama_ffi.server.errors import ApiError
from llama_ffi.server.handling import embed, generate, parse
from llama_ffi.server.openai.models import model_object
from llama_ffi.server.schemas import ChatRequest, CompletionRequest, EmbeddingRequest
from llama_ffi.server.served import Served, ServedDep

router = APIRouter()


def model_card(served: Served, llm) -> dict:
    """The served model as OpenAI's model object, with llama-server's ``meta``."""
    return model_object(
        served.model_id,
        int(time.time()),
        aliases=sorted(served.aliases),
        tags=list(served.options.tags),
        meta={
            "n_ctx": int(llm.n_ctx),
            "n_ctx_train": llm.n_ctx_train,
            "n_vocab": int(llm.n_vocab),
            "n_embd": int(llm.n_embd),
            "n_params": int(lib.llama_model_n_params(llm.loaded_model.ptr)),
            "size": int(lib.llama_model_size(llm.loaded_model.ptr)),
            "slots": served.n_slots,
        },
    )


@router.get("/v1/models")
@router.get("/models")
async def models(served: ServedDep):
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
        "data": [model_card(served, llm)],
    }


@router.post("/v1/completions")
async def completions(request: Request, served: ServedDep):
    body = await parse(request, CompletionRequest)
    llm = served.accept(body)
    typed = params.generation_request(
        llm, body, served.options, 16, model=served.model_id, logprobs=body.logprobs, echo=body.echo, suffix=body.suffix
    )
    return await generate(request, served, body, lambda: results.acomplete(llm, body.prompt, typed))


@router.post("/v1/chat/completions")
@router.post("/chat/completions")
async def chat_completions(request: Request, served: ServedDep):
    body = await parse(request, ChatRequest)
    llm = served.accept(body)
    options = served.options
    params.check_media(body.messages, options.media_path)
    typed, chat = params.chat_request(llm, body, options, model=served.model_id)
    result = await generate(request, served, body, lambda: achat_completion(llm, body.messages, typed, **chat))
    if (body.verbose or options.verbose) and isinstance(result, dict):  # llama-server's debugging aid
        result["__verbose"] = {"prompt": chat_prompt(llm, body.messages, typed, **chat)[0]}
    return result


@router.post("/v1/embeddings")
async def embeddings(request: Request, served: ServedDep):
    body = await parse(request, EmbeddingRequest)
    llm = served.accept(body, embeddings=True)
    if body.dimensions is not None and body.dimensions != int(llm.n_embd):
        raise ApiError(400, f"dimensions: this model's embeddings have {int(llm.n_embd)}", "dimensions")
    if llm.pooling_type() == lib.LLAMA_POOLING_TYPE_NONE:
        raise ApiError(400, "pooling none (one vector per token) is served by /embeddings, not /v1/embeddings")
    out, _ = await embed(request, served, body, "json")
    out["model"] = served.model_id
    if body.encoding_format == "base64":
        for item in out["data"]:
            item["embedding"] = base64.b64encode(np.asarray(item["embedding"], dtype="<f4").tobytes()).decode()
    served.metrics.finished(None)  # its tokens are the engine's embedded_tokens
    return out
