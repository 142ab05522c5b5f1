"""llama-server's own completion API: ``POST /completion`` (and ``/completions`` without ``/v1``),
with its request fields (``prompt`` as text, tokens, a mix of both or a list of prompts; ``n_probs``,
``return_tokens``, ``response_fields``...) and its response: ``content``, ``tokens``, ``stop``,
``stop_type``, ``timings``, ``generation_settings``, ``completion_probabilities``; a stream sends
one such object per token, then the final one."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from typing import Any

from fastapi import FastAPI, Request
from pydantic import StrictBool, StrictInt, StrictStr
from starlette.concurrency import run_in_threadpool

from llama_ffi._backports import aclosing
from llama_ffi.high import completion
from llama_ffi.high.chat.completion import chat_prompt
from llama_ffi.high.engine import results
from llama_ffi.high.engine.progress import PromptProgress
from llama_ffi.server import errors, params
from llama_ffi.server.errors import ApiError, sse_error
from llama_ffi.server.handling import awaited, parse
from llama_ffi.server.schemas import Body, ChatRequest, LoraScales, Sampling
from llama_ffi.server.streaming import Clock, EventStream, event, progress_timings


class NativeRequest(Sampling):
    prompt: Any = None
    content: Any = None  # llama-server's older name of prompt
    n_probs: StrictInt = 0
    return_tokens: StrictBool = False
    post_sampling_probs: StrictBool = False
    response_fields: list[str] | None = None
    json_schema: dict[str, Any] | None = None


class SlotFile(Body):
    filename: StrictStr


def slot_file_name(name: str) -> str:
    """A slot file's name, refused unless it is a plain file name (nothing outside the folder)."""
    plain = os.path.basename(name) == name and name not in ("", ".", "..") and not name.startswith(".")
    if not plain or "\\" in name or any(ord(ch) < 32 for ch in name) or len(name.encode()) > 255:
        raise ApiError(400, f"filename must be a plain file name, got {name!r}", "filename")
    return name


def prompts_of(llm, prompt) -> list:
    """llama-server's prompt forms as the library's: one text or token list per prompt. A list
    mixing texts and token ids is one prompt; a list of texts, token lists or mixes is several."""
    if isinstance(prompt, dict) and isinstance(prompt.get("prompt_string"), str):
        if prompt.get("multimodal_data"):
            raise ApiError(400, "multimodal_data needs the images through /v1/chat/completions", "prompt")
        return [prompt["prompt_string"]]
    if isinstance(prompt, str):
        return [prompt]
    if not isinstance(prompt, list) or not prompt:
        raise ApiError(400, "prompt must be a string, a list of tokens, or a list of prompts", "prompt")
    if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
        return [prompt]
    if any(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
        return [mixed_tokens(llm, prompt)]
    return [tokens_of(llm, prompts_of(llm, p)[0]) for p in prompt]  # the library takes one kind per list


def embedding_inputs(llm, raw) -> list:
    """An embedding request's ``input`` in llama-server's forms, as texts and token lists: one
    input (a text, token ids, a mix, an object) or a list of them."""
    if raw is None or raw == []:
        raise ApiError(400, "input is required: a text, token ids, or a list of them", "input")
    one = isinstance(raw, (str, dict)) or (isinstance(raw, list) and any(_is_token(x) for x in raw))
    items = [raw] if one else raw
    if not isinstance(items, list):
        raise ApiError(400, "input must be a text, token ids, or a list of them", "input")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, dict) and isinstance(item.get("content"), list):
            parts = item["content"]
            if not all(
                isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in parts
            ):
                raise ApiError(400, f"input[{i}].content must be a list of text parts", "input")
            item = "".join(p["text"] for p in parts)
        if isinstance(item, list) and not all(_is_token(x) for x in item):
            item = mixed_tokens(llm, item)
        elif not isinstance(item, (str, list)):
            item = prompts_of(llm, item)[0]
        out.append(item)
    return out


def _is_token(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def tokens_of(llm, prompt) -> list[int]:
    return llm.tokenize(prompt, add_bos=True, special=True) if isinstance(prompt, str) else prompt


def mixed_tokens(llm, parts: list) -> list[int]:
    out: list[int] = []
    for i, part in enumerate(parts):
        if isinstance(part, str):
            out += llm.tokenize(part, add_bos=i == 0, special=True)
        elif isinstance(part, int) and not isinstance(part, bool):
            out.append(part)
        else:
            raise ApiError(400, f"prompt[{i}] must be a string or a token id", "prompt")
    return out


def _bytes(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def token_json(llm, token: int, logprob: float, as_prob: bool) -> dict:
    piece = llm.tokenizer.piece(token).decode("utf-8", "replace")
    value = {"prob": math.exp(logprob)} if as_prob else {"logprob": logprob}
    return {"id": token, "token": piece, "bytes": list(piece.encode("utf-8")), **value}


def probabilities(llm, event_, as_prob: bool) -> dict:
    """``post_sampling_probs`` asks for probabilities instead of log-probabilities (here those of
    the model's distribution before the sampler chain; tokens of probability 0 left out)."""
    top = [token_json(llm, t, v, as_prob) for t, v in event_.top or [] if not as_prob or math.exp(v) > 0.0]
    return {**token_json(llm, event_.token, event_.logprob, as_prob), ("top_probs" if as_prob else "top_logprobs"): top}


def stop_type(choice) -> str:
    if choice.finish_reason == "length":
        return "limit"
    if choice.matcher.matched is not None:
        return "word"
    return "eos" if choice.finish_reason == "stop" else "none"


def settings_json(settings, n_predict: int | None) -> dict:
    sampling = dataclasses.asdict(settings.sampling)
    # llama-server's shape; a ban (-inf) is null, as JSON has no infinity
    sampling["logit_bias"] = [
        {"bias": b if math.isfinite(b) else None, "token": t} for t, b in (settings.sampling.logit_bias or {}).items()
    ]
    sampling["dry_sequence_breakers"] = list(sampling["dry_sequence_breakers"])
    return {"n_predict": -1 if n_predict is None else n_predict, "stop": settings.stop, **sampling}


def final(llm, call_, choice, body: NativeRequest, model: str, clock: Clock, streamed: bool) -> dict:
    group = next(g for g in call_.request.groups if choice in g.choices)
    text = "".join(e.text for e in choice.events)
    n_prompt = len(group.prompt)
    out = {
        "index": choice.index,
        "content": "" if streamed else text,
        "tokens": [e.token for e in choice.events if e.token >= 0] if body.return_tokens and not streamed else [],
        "id_slot": body.id_slot,
        "stop": True,
        "model": model,
        "tokens_predicted": choice.produced,
        "tokens_evaluated": n_prompt,
        "generation_settings": settings_json(call_.settings, call_.settings.max_tokens),
        "prompt": llm.detokenize(list(group.prompt)).decode("utf-8", "replace"),
        "has_new_line": "\n" in text,
        "truncated": False,
        "stop_type": stop_type(choice),
        "stopping_word": choice.matcher.matched or "",
        "tokens_cached": n_prompt + choice.produced,
        "timings": clock.timings(n_prompt, choice.produced, group.cached),
    }
    if body.n_probs and not streamed:
        out["completion_probabilities"] = [
            probabilities(llm, e, body.post_sampling_probs) for e in choice.events if e.token >= 0
        ]
    return pick(out, body.response_fields)


def pick(result: dict, fields: list[str] | None) -> dict:
    """llama-server's ``response_fields``: only those (a "a/b" path is taken out of its parent)."""
    if not fields:
        return result
    out = {}
    for field in fields:
        value: Any = result
        for part in field.split("/"):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None:
            out[field.split("/")[-1] if "/" in field else field] = value
    return out


def props(llm, served) -> dict:
    """llama-server's ``GET /props``: the defaults a request gets, the slots, the model."""
    options = served.options
    settings = completion.token_settings(llm, None, None, None, None, None, dict(options.sampling))
    vocab = llm.tokenizer
    return {
        "default_generation_settings": {
            "n_ctx": int(llm.context.n_ctx_seq),
            "params": settings_json(settings, options.n_predict),
        },
        "total_slots": served.n_slots,
        "model_alias": served.model_id,
        "model_path": llm.model_path,
        "modalities": {
            "vision": llm.mtmd is not None and llm.mtmd.supports_vision,
            "audio": llm.mtmd is not None and llm.mtmd.supports_audio,
        },
        "chat_template": llm.metadata.get("tokenizer.chat_template", ""),
        "bos_token": vocab.piece(llm.token_bos(), special=True).decode("utf-8", "replace"),
        "eos_token": vocab.piece(llm.token_eos(), special=True).decode("utf-8", "replace"),
        "build_info": build_info(),
        "is_sleeping": False,
    }


def build_info() -> str:
    from llama_ffi import build_info as info

    built = info()
    return f"b{built['llama_cpp_build_number']}-{built['llama_cpp_commit'][:8]}"


def add_routes(app: FastAPI, served) -> None:
    options = served.options

    @app.get("/props")
    async def get_props():
        return props(served.ready(), served)

    @app.post("/slots/{slot_id}")
    async def slot_action(slot_id: int, request: Request, action: str = ""):
        """llama-server's slot files: ``?action=save|restore`` with ``{"filename"}`` (a plain name
        under --slot-save-path), ``?action=erase``."""
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

    @app.get("/lora-adapters")
    async def lora_adapters():
        """The --lora adapters by id, with the scale requests that name none run them at."""
        llm = served.ready()
        paths, scales = llm.loras, {a["name"]: a["scale"] for a in llm.adapters.default_loras()}
        return [
            {"id": i, "path": paths[name]["path"], "scale": scales.get(name, 0.0)}
            for i, name in enumerate(options.lora_names)
        ]

    @app.post("/lora-adapters")
    async def set_lora_adapters(request: Request):
        """New default scales (``[{"id", "scale"}]``; an adapter left out is off), as llama-server."""
        body = await parse(request, LoraScales)
        llm = served.ready()
        active = params.adapters(options.lora_names, body)
        try:
            llm.adapters.set_default_loras(active)
        except ValueError as error:
            raise errors.from_library(error) from None
        return {"success": True}

    async def rendered(request: Request) -> tuple[str, int]:
        body = await parse(request, ChatRequest)
        llm = served.accept(body)
        try:
            return chat_prompt(llm, body.messages, **params.chat_kwargs(llm, body, options))
        except (ValueError, TypeError) as error:
            raise errors.from_library(error) from None

    @app.post("/apply-template")
    async def apply_template(request: Request):
        return {"prompt": (await rendered(request))[0]}

    @app.post("/chat/completions/input_tokens")
    @app.post("/v1/chat/completions/input_tokens")
    async def input_tokens(request: Request):
        return {"input_tokens": (await rendered(request))[1]}

    @app.post("/completion")
    @app.post("/completions")
    async def native_completion(request: Request):
        body = await parse(request, NativeRequest)
        llm = served.accept(body)
        prompt = body.prompt if body.prompt is not None else body.content
        if prompt is None:
            raise ApiError(400, "prompt is required", "prompt")
        kwargs = params.generation_kwargs(llm, body, options, default_max=None)
        if body.n_probs:
            kwargs["logprobs"] = body.n_probs
        if body.json_schema is not None and "grammar" not in kwargs:
            from llama_ffi.high.chat.completion import response_grammar

            kwargs["grammar"] = response_grammar({"type": "json_object", "schema": body.json_schema})
        progress, slot_id = kwargs.pop("return_progress", False), kwargs.pop("slot_id", None)
        try:
            prepared = completion.prepare_keywords(llm, prompts_of(llm, prompt), {**kwargs, "model": served.model_id})
        except (ValueError, TypeError) as error:  # the library's refusals, shaped for the client
            raise errors.from_library(error) from None
        try:
            the_call = results.Call(llm, *prepared, streamed=body.stream, progress=progress, slot_id=slot_id)
        except ValueError as error:
            raise errors.from_library(error) from None
        clock = Clock()
        if not body.stream:
            with served.ticket():
                await awaited(request, _drain(the_call, clock))
            served.metrics.finished(the_call.usage())
            out = [final(llm, the_call, c, body, served.model_id, clock, False) for c in the_call.choices]
            return out[0] if len(out) == 1 else out
        stack = contextlib.ExitStack()
        stack.enter_context(served.ticket())
        stack.callback(lambda: served.metrics.finished(the_call.usage()))  # however the stream ended
        return EventStream(_events(llm, the_call, body, served.model_id, clock), stack.close)


async def _drain(call_, clock: Clock) -> None:
    async for _ in results.aitems(call_):
        clock.tick()


async def _events(llm, call_, body: NativeRequest, model: str, clock: Clock):
    produced: dict[int, int] = {}
    n_prompt = {c.index: len(g.prompt) for g in call_.request.groups for c in g.choices}
    try:
        async with aclosing(results.aitems(call_)) as items:
            async for item in items:
                if isinstance(item, PromptProgress):  # before the first token: the clock does not start
                    out = {"index": 0, "content": "", "tokens": [], "stop": False, "prompt_progress": item.as_dict()}
                    if body.timings_per_token:
                        out["timings"] = progress_timings(out["prompt_progress"])
                    yield event(out)
                    continue
                index, ev = item
                clock.tick()
                if ev is None:
                    choice = next(c for c in call_.choices if c.index == index)
                    yield event(final(llm, call_, choice, body, model, clock, True))
                    continue
                produced[index] = produced.get(index, 0) + (ev.token >= 0)
                chunk = {
                    "index": index,
                    "content": ev.text,
                    "tokens": [ev.token] if ev.token >= 0 else [],
                    "stop": False,
                    "id_slot": body.id_slot,
                    "tokens_predicted": produced[index],
                    "tokens_evaluated": n_prompt[index],
                }
                if body.n_probs and ev.token >= 0:
                    chunk["completion_probabilities"] = [probabilities(llm, ev, body.post_sampling_probs)]
                yield event(chunk)
    except Exception as error:  # noqa: BLE001 - the client sees it as an event
        yield sse_error(error)
