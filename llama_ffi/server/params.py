"""A validated request body → the one typed request (``high.request.GenerationRequest``) and, for a
chat, its chat options (llama-server's spellings → the library's): the conversion at the edge."""

from __future__ import annotations

import math
import os
from pathlib import Path

from llama_ffi.high.compat import ignoring_end_of_generation
from llama_ffi.high.grammar import LlamaGrammar
from llama_ffi.high.request import GenerationRequest, from_keywords
from llama_ffi.high.sampling_fields import BY_KEY
from llama_ffi.server.errors import ApiError
from llama_ffi.server.options import ServerOptions
from llama_ffi.server.schemas import ChatRequest, Sampling


def logit_bias(llm, body: Sampling) -> dict[int, float] | None:
    """OpenAI's ``{"token id": bias}``, or llama-server's ``[[token or text, bias], ...]``; a bias of
    ``false`` bans the token."""
    bias: dict[int, float] = {}
    items = body.logit_bias.items() if isinstance(body.logit_bias, dict) else (body.logit_bias or [])
    for i, item in enumerate(items):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ApiError(400, f"logit_bias[{i}] must be a [token, bias] pair", "logit_bias")
        key, value = item
        if isinstance(value, bool):
            value = -math.inf if value is False else 0.0
        if not isinstance(value, (int, float)):
            raise ApiError(400, f"logit_bias[{key!r}] must be a number or false", "logit_bias")
        tokens = _bias_tokens(llm, key)
        for token in tokens:
            bias[token] = float(value)
    if body.ignore_eos:
        bias = ignoring_end_of_generation(llm.tokenizer, bias)
    return bias or None


def _bias_tokens(llm, key) -> list[int]:
    if isinstance(key, str) and key.lstrip("-").isdigit():
        key = int(key)
    if isinstance(key, bool) or not isinstance(key, (int, str)):
        raise ApiError(400, f"logit_bias key {key!r} must be a token id or a text", "logit_bias")
    if isinstance(key, str):
        return llm.tokenize(key, add_bos=False)
    return [key]  # the sampling parameters' own check names an id outside the vocabulary


def max_tokens(body: Sampling, default: int | None) -> int | None:
    """``max_tokens`` (or chat's ``max_completion_tokens``, or llama-server's ``n_predict``); None:
    until the end of generation or a full context."""
    chat_limit = body.max_completion_tokens if isinstance(body, ChatRequest) else None
    for value in (chat_limit, body.max_tokens, body.n_predict):
        if value is not None:
            return None if value == -1 else value
    return default


def adapters(lora_names, body: Sampling) -> list[dict] | None:
    """llama-server's ``lora``: ``[{"id": i, "scale": s}]`` over the --lora adapters; those not
    named run at scale 0 (off)."""
    if body.lora is None:
        return None
    chosen = []
    for item in body.lora:
        if item.id >= len(lora_names):
            raise ApiError(
                400, f"lora id {item.id} does not exist: the server has {len(lora_names)} adapter(s)", "lora"
            )
        if item.scale != 0:
            chosen.append({"name": lora_names[item.id], "scale": item.scale})
    return chosen


def generation_request(llm, body: Sampling, options: ServerOptions, default_max: int | None, **extra):
    """The typed request (``high.request``) of a body: the server's defaults (``--temp``...), then
    what the request sets, in llama-server's spellings; ``extra``: the API's own request options."""
    sampling: dict = dict(options.sampling)
    for key, value in body.model_dump(exclude_unset=True).items():
        field = BY_KEY.get(key)
        if field is not None and value is not None:
            sampling[field.name] = field.clamp(value)
    for key in ("seed", "dry_sequence_breakers"):
        if getattr(body, key) is not None:
            sampling[key] = getattr(body, key)
    if body.seed is not None and body.seed < 0:
        sampling["seed"] = -1  # llama-server's -1: a random seed
    bias = logit_bias(llm, body)
    if bias is not None:
        sampling["logit_bias"] = bias
    if options.n_predict is not None:
        default_max = None if options.n_predict < 0 else options.n_predict
    own: dict = {"max_tokens": max_tokens(body, default_max), "n": body.n, "stream": body.stream}
    if body.stop is not None:
        own["stop"] = body.stop
    grammar = constraint(body)
    if grammar is not None:
        own["grammar"] = grammar
    own["active_loras"] = adapters(options.lora_names, body)
    own["progress"] = bool(body.return_progress and body.stream)
    if body.id_slot != -1:
        own["slot_id"] = body.id_slot
    return from_keywords(llm, {**sampling, **own, **extra})


# vLLM's structured_outputs keys (and the guided_* fields that spell them) -> LlamaGrammar's makers
STRUCTURED = {
    "json": LlamaGrammar.from_json_schema,
    "regex": LlamaGrammar.from_regex,
    "choice": LlamaGrammar.from_choice,
    "grammar": lambda text, verbose: grammar_of(text),
}


def grammar_of(text: str) -> LlamaGrammar:
    """llama-server's ``grammar``: GBNF (llama.cpp's engine), or Lark after ``%llguidance``."""
    if text.lstrip().startswith("%llguidance"):
        return LlamaGrammar.from_lark(text.lstrip(), verbose=False)
    return LlamaGrammar.from_string(text, verbose=False)


def constraint(body: Sampling) -> LlamaGrammar | None:
    """The one constraint a body gives (``grammar``, vLLM's ``structured_outputs`` or a
    ``guided_*`` field), compiled; two of them are a 400 naming both, never one silently dropped."""
    given = {}
    if body.grammar is not None:
        given["grammar"] = ("grammar", body.grammar)
    for key, value in (body.structured_outputs or {}).items():
        if key not in STRUCTURED:
            raise ApiError(400, f"structured_outputs.{key}: not one of {', '.join(STRUCTURED)}", "structured_outputs")
        if value is not None:
            given[f"structured_outputs.{key}"] = (key, value)
    for key in STRUCTURED:
        value = getattr(body, f"guided_{key}")
        if value is not None:
            given[f"guided_{key}"] = (key, value)
    if len(given) > 1:
        raise ApiError(400, f"give one constraint, not {' and '.join(given)}", next(iter(given)))
    if not given:
        return None
    ((field, (kind, value)),) = given.items()
    try:
        return STRUCTURED[kind](value, verbose=False)
    except (ValueError, TypeError) as error:
        raise ApiError(400, f"{field}: {error}", field) from None


def chat_request(llm, body: ChatRequest, options: ServerOptions, **extra) -> tuple[GenerationRequest, dict]:
    """A chat body as the typed request and the chat options (``plan_chat``'s keywords)."""
    logprobs = None
    if body.logprobs:
        logprobs = body.top_logprobs or 0
    elif body.top_logprobs is not None:
        raise ApiError(400, "top_logprobs needs logprobs: true", "top_logprobs")
    request = generation_request(llm, body, options, None, logprobs=logprobs, **extra)
    chat: dict = {}
    if body.response_format is not None:
        chat["response_format"] = body.response_format
    elif body.json_schema is not None:  # llama-server's own field
        chat["response_format"] = {"type": "json_object", "schema": body.json_schema}
    if body.tools:
        chat["tools"] = body.tools
        chat["parallel_tool_calls"] = body.parallel_tool_calls
    if body.tool_choice is not None:
        chat["tool_choice"] = body.tool_choice
    template_arguments = {}
    if options.reasoning == "off":  # llama-server's --reasoning off: the template is told not to think
        template_arguments["enable_thinking"] = False
    if body.add_generation_prompt is False and not body.continue_final_message:  # a continued turn has no new one
        template_arguments["add_generation_prompt"] = False
    template_arguments.update(body.chat_template_kwargs or {})
    if template_arguments:
        chat["extra_template_arguments"] = template_arguments
    if body.continue_final_message and body.add_generation_prompt:
        raise ApiError(
            400, "continue_final_message and add_generation_prompt cannot both be true", "continue_final_message"
        )
    last = body.messages[-1] if body.messages and isinstance(body.messages[-1], dict) else {}
    # a last assistant message is continued (llama-server's prefill; vLLM's continue_final_message)
    if body.continue_final_message or (last.get("role") == "assistant" and body.add_generation_prompt is not False):
        before = body.messages[-2] if len(body.messages) > 1 and isinstance(body.messages[-2], dict) else {}
        if before.get("role") == "assistant":
            raise ApiError(400, "two assistant messages end the conversation: only the last one can be continued")
        if isinstance(last.get("content"), list):  # its text parts, a paragraph each (llama-server's join)
            last["content"] = "\n\n".join(p.get("text", "") for p in last["content"] if isinstance(p, dict))
        chat["assistant_prefill"] = True
    budget = body.reasoning_budget if body.reasoning_budget is not None else options.reasoning_budget
    if budget is not None and budget >= 0:
        chat["reasoning_budget"] = budget
    return request, chat


def check_media(messages: list, media_path: str | None) -> None:
    """Images and audio come as data (``data:`` URIs, base64 audio); a local file only under the
    operator's ``--media-path``; nothing is fetched from the network."""
    root = Path(media_path).resolve() if media_path else None
    for m, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for p, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "image_url":
                continue
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str) or url.startswith("data:"):
                continue  # the library names what is wrong with it
            where = f"messages[{m}].content[{p}]"
            if url.startswith(("http://", "https://")):
                raise ApiError(
                    400,
                    f"{where}: this server does not fetch media from URLs; send the image as a data: URI",
                    "messages",
                )
            path = url.removeprefix("file://")
            if root is None:
                raise ApiError(
                    400,
                    f"{where}: local files are not allowed (the server was started without "
                    "--media-path); send the image as a data: URI",
                    "messages",
                )
            resolved = (root / path).resolve()
            if not resolved.is_relative_to(root) or not resolved.is_file():
                raise ApiError(400, f"{where}: {path!r} is not a file under the server's media path", "messages")
            part["image_url"] = {"url": os.fspath(resolved)}
